"""The constraints a `fabricTopologyConfig` implies, written into the claim for the scheduler.

The scheduler never reads opaque configs, so a GpuConfig saying "Auto, partitionSize 4" alone
would let it pick any four GPUs, most of which form no Fabric Manager partition, and prepare
would then refuse them. The mutating admission webhook closes that gap: for each GpuConfig
with a fabricTopologyConfig it adds to the claim (or template) what a user would write by hand:

- Auto with partitionSize N: a `constraints` entry `matchAttribute:
  gpu.nvidia.com/partition<N>` over the config's requests (all requests when the config names
  none), so all their GPUs share one N-GPU partition; with N GPUs requested, that is exactly
  one partition, the one prepare activates.
- Manual: a CEL selector on each of the config's requests (each subrequest of a
  `firstAvailable` request) admitting only GPUs of the listed partitions.

Nothing for Auto without partitionSize (the size is not known before allocation), Disabled,
VGPU, or a config that does not decode (the validating webhook refuses it with the message).
Idempotent: a constraint or selector already there (written by a person or an earlier call)
is not added again. Shapes: resource.k8s.io v1 and v1beta2 keep a request's selectors under
`exactly` (or per `firstAvailable` subrequest), v1beta1 on the request itself.

Pure: the claim's JSON in, JSON Patch operations out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from core import errors, models
from core.gpu import configs, fm_partitions

# The partition sizes a node publishes `partition<N>` for (HGX 8-GPU boards: 1, 2, 4, 8). A
# Manual selector without partitionSize checks each: partition ids are unique across sizes.
ATTRIBUTE_SIZES: Final = (1, 2, 4, 8)
# API versions whose requests keep their selectors under `exactly` (v1beta1: on the request).
_NESTED_VERSIONS: Final = frozenset({"v1", "v1beta2"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchOp:
    """One JSON Patch (RFC 6902) `add` operation."""

    path: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {"op": "add", "path": self.path, "value": self.value}


def partition_attribute(size: int) -> str:
    """The fully qualified attribute a `matchAttribute` names: gpu.nvidia.com/partition<N>."""
    return f"{configs.DRIVER_NAME}/{fm_partitions.PARTITION_ATTRIBUTE_PREFIX}{size}"


def partition_selector(partition_ids: Sequence[int], *, size: int | None) -> str:
    """A CEL device selector admitting only GPUs of the partitions `partition_ids`.

    Each `partition<N>` read is guarded with has(): a device without it (another driver's,
    a MIG device) evaluates to false instead of failing the whole allocation.
    """
    ids = ", ".join(str(i) for i in partition_ids)
    attributes = f'device.attributes["{configs.DRIVER_NAME}"]'
    sizes = ATTRIBUTE_SIZES if size is None else (size,)
    terms = []
    for n in sizes:
        name = f"{attributes}.{fm_partitions.PARTITION_ATTRIBUTE_PREFIX}{n}"
        terms.append(f"(has({name}) && {name} in [{ids}])")
    return " || ".join(terms)


def plan_patch(
    devices: object, *, pointer: str, api_version: str, gates: models.FeatureGates
) -> tuple[PatchOp, ...]:
    """The `add` operations that give `devices` (a claim spec's `devices`, found at JSON
    Pointer `pointer`) the constraints and selectors its GpuConfigs' fabricTopologyConfig
    imply, in the order of its configs; () when there is nothing to add or the shape is not
    one to judge. `api_version` is the object's resource.k8s.io version (v1, v1beta1,
    v1beta2). Deterministic, idempotent, never raises.
    """
    if not isinstance(devices, Mapping):
        return ()
    entries = devices.get("config")
    requests = devices.get("requests")
    if not isinstance(entries, list) or not isinstance(requests, list):
        return ()
    builder = _Builder(devices, pointer=pointer, nested=api_version in _NESTED_VERSIONS)
    for entry in entries:
        topology = _topology_of(entry, gates=gates)
        if topology is None or topology.virtualization_model is configs.VirtualizationModel.VGPU:
            continue
        names = _request_names(entry)
        if names is None:
            continue
        if topology.strategy is configs.FabricStrategy.AUTO and topology.partition_size:
            builder.constrain(names, partition_attribute(topology.partition_size))
        elif topology.strategy is configs.FabricStrategy.MANUAL:
            selector = partition_selector(topology.partition_ids, size=topology.partition_size)
            builder.select(names, requests, selector)
    return tuple(builder.ops)


class _Builder:
    """Collects operations, tracking arrays created by earlier ones (an array made by one
    operation is appended to by the next, never made twice)."""

    def __init__(self, devices: Mapping[Any, Any], *, pointer: str, nested: bool) -> None:
        self.devices = devices
        self.pointer = pointer
        self.nested = nested
        self.ops: list[PatchOp] = []
        self._added: dict[str, list[Any]] = {}

    def constrain(self, names: tuple[str, ...], attribute: str) -> None:
        constraint: dict[str, Any] = {"matchAttribute": attribute}
        if names:
            constraint["requests"] = list(names)
        existing = self.devices.get("constraints")
        present = existing if isinstance(existing, list) else []
        if any(_same_constraint(c, constraint) for c in (*present, *self._added.get("c", []))):
            return
        self._append(f"{self.pointer}/constraints", "c", present_array=existing, value=constraint)

    def select(self, names: tuple[str, ...], requests: list[Any], expression: str) -> None:
        for index, request in enumerate(requests):
            if not isinstance(request, Mapping) or not isinstance(request.get("name"), str):
                continue
            base = f"{self.pointer}/requests/{index}"
            for path, holder in self._selector_holders(request, base=base, names=names):
                selectors = holder.get("selectors")
                present = selectors if isinstance(selectors, list) else []
                value = {"cel": {"expression": expression}}
                if value in present or value in self._added.get(path, []):
                    continue
                self._append(f"{path}/selectors", path, present_array=selectors, value=value)

    def _selector_holders(
        self, request: Mapping[Any, Any], *, base: str, names: tuple[str, ...]
    ) -> list[tuple[str, Mapping[Any, Any]]]:
        """(JSON Pointer, object) of each place the request keeps selectors that `names`
        (request or request/subrequest names; empty: all) reach."""
        name = request["name"]
        subs = request.get("firstAvailable")
        if isinstance(subs, list):
            found = []
            for k, sub in enumerate(subs):
                if not isinstance(sub, Mapping) or not isinstance(sub.get("name"), str):
                    continue
                if not names or name in names or f"{name}/{sub['name']}" in names:
                    found.append((f"{base}/firstAvailable/{k}", sub))
            return found
        if names and name not in names:
            return []
        if not self.nested:
            return [(base, request)]
        exactly = request.get("exactly")
        return [(f"{base}/exactly", exactly)] if isinstance(exactly, Mapping) else []

    def _append(self, path: str, key: str, *, present_array: object, value: Any) -> None:
        added = self._added.setdefault(key, [])
        if isinstance(present_array, list) or added:
            self.ops.append(PatchOp(path=f"{path}/-", value=value))
        else:
            self.ops.append(PatchOp(path=path, value=[value]))
        added.append(value)


def _topology_of(
    entry: object, *, gates: models.FeatureGates
) -> configs.FabricTopologyConfig | None:
    if not isinstance(entry, Mapping):
        return None
    opaque = entry.get("opaque")
    if not isinstance(opaque, Mapping) or opaque.get("driver") != configs.DRIVER_NAME:
        return None
    parameters: Any = opaque.get("parameters")
    try:
        config = configs.decode_device_config(parameters, gates=gates)
    except errors.DecodeError:
        return None
    return config.fabric_topology if isinstance(config, configs.GpuConfig) else None


def _request_names(entry: Mapping[Any, Any]) -> tuple[str, ...] | None:
    """The config's `requests` (empty: all of the claim's), None when malformed."""
    names = entry.get("requests")
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)


def _same_constraint(existing: object, wanted: Mapping[str, Any]) -> bool:
    if not isinstance(existing, Mapping):
        return False
    names = existing.get("requests") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return False
    return existing.get("matchAttribute") == wanted["matchAttribute"] and sorted(names) == sorted(
        wanted.get("requests") or []
    )
