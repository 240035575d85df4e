"""Dynamic MIG (gate DynamicMIG): every MIG device a GPU could hold, published as a partition.

KEP-4815 partitionable devices: each dynamic-capable GPU gets one CounterSet
(`gpu-<minor>-counter-set`) holding its engines, memory and one `memory-slice-<i>` counter per
memory slice. Every profile x placement is a device consuming its share of those counters
(its own memory slices among them), and the full GPU consumes all of them, so the scheduler
never hands out overlapping placements, more engines than the GPU has, or a full GPU together
with one of its slices. The MIG device itself is created only at prepare time.

Which GPUs take part, as upstream decides: MIG capable, with profiles listed, and either able
to toggle MIG mode without a reset (Hopper and later: full GPU and partitions) or already in
MIG mode (Ampere: partitions only, leaving MIG mode would need a reset). Any other GPU is
published as without the gate.

Layouts: Kubernetes 1.34 takes the counters in the slice of the devices consuming them (one
slice per GPU); from 1.35 counters must sit in a slice of their own (one counters-only slice,
then one slice per GPU). Names and counter names are upstream's, so claims and the slices
read the same as with the upstream driver.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from functools import partial
from typing import Final

from core import gates as feature_gates
from core import models, names, slices
from core.gpu import devices, fm_partitions, migprofiles, shares
from core.gpu import slices as gpu_slices

# Capacity names of a MIG partition, in upstream's order (`memory` in bytes).
_CAPACITIES: Final = (
    "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines",
    "memory",
)
_CAMEL_BOUNDARY: Final = re.compile(r"([a-z0-9])([A-Z])")


class SliceLayout(enum.Enum):
    """Where the counters go: with their devices (Kubernetes 1.34) or apart (1.35 and on)."""

    COMBINED = "combined"
    SPLIT = "split"


def layout_for(server_version: str) -> SliceLayout:
    """The layout the API server of `server_version` ("v1.34.4", "1.35.0+k3s1") accepts.

    Raises ValueError for a version that does not start with major.minor.
    """
    found = re.match(r"v?(\d+)\.(\d+)", server_version)
    if found is None:
        raise ValueError(f"{server_version!r} is not a Kubernetes version (want e.g. v1.35.2)")
    major, minor = int(found.group(1)), int(found.group(2))
    return SliceLayout.COMBINED if (major, minor) < (1, 35) else SliceLayout.SPLIT


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigSpec:
    """A MIG device a GPU could hold: one profile at one placement start."""

    parent: devices.GpuInfo
    profile: migprofiles.MigProfile
    placement_start: int

    @property
    def name(self) -> str:
        """Upstream's canonical name, `gpu-<minor>-mig-<profile>-<profile id>-<start>`."""
        return devices.mig_device_name(
            parent_minor=self.parent.minor, profile=self.profile.name,
            gi_profile_id=self.profile.profile_id, placement_start=self.placement_start,
        )

    @property
    def memory_slices(self) -> range:
        """The memory slices this placement takes."""
        return range(self.placement_start, self.placement_start + self.profile.placement_size)


def is_partitionable(gpu: devices.GpuInfo) -> bool:
    """Whether dynamic MIG publishes this GPU's partitions (see the module docstring)."""
    if not gpu.mig_capable or not gpu.mig_profiles:
        return False
    return migprofiles.toggles_without_reset(gpu.architecture) or gpu.mig_enabled


def offers_full_gpu(gpu: devices.GpuInfo) -> bool:
    """Whether a partitionable GPU is offered whole too: not on a GPU stuck in MIG mode."""
    return not gpu.mig_enabled or migprofiles.toggles_without_reset(gpu.architecture)


def possible_migs(gpu: devices.GpuInfo) -> tuple[MigSpec, ...]:
    """Every profile x placement of `gpu`, sorted by name (the scheduler takes the first)."""
    specs = (
        MigSpec(parent=gpu, profile=profile, placement_start=start)
        for profile in gpu.mig_profiles
        for start in profile.placement_starts
    )
    return tuple(sorted(specs, key=lambda spec: spec.name))


def find_mig(gpu: devices.GpuInfo, name: str) -> MigSpec | None:
    """The possible MIG device of `gpu` called `name`, if there is one."""
    return next((spec for spec in possible_migs(gpu) if spec.name == name), None)


def counter_set_name(gpu: devices.GpuInfo) -> str:
    """Upstream's name of the GPU's CounterSet: `gpu-<minor>-counter-set`."""
    return f"{gpu.name}-counter-set"


def counter_name(capacity: str) -> str:
    """The counter of a capacity: camel case to DNS label (`copyEngines` -> `copy-engines`)."""
    return _CAMEL_BOUNDARY.sub(r"\1-\2", capacity).lower()


def memory_slice_counter(index: int) -> str:
    """The counter of memory slice `index`: `memory-slice-<index>`."""
    return f"memory-slice-{index}"


def profile_amounts(profile: migprofiles.MigProfile) -> dict[str, int]:
    """A profile's capacities by name, as a partition publishes them."""
    values = (
        profile.multiprocessors, profile.copy_engines, profile.decoders, profile.encoders,
        profile.jpeg_engines, profile.ofa_engines, profile.memory_bytes,
    )
    return dict(zip(_CAPACITIES, values, strict=True))


def max_amounts(gpu: devices.GpuInfo) -> dict[str, int]:
    """Per capacity, the largest any profile has: what the whole GPU offers to partitions."""
    amounts = [profile_amounts(profile) for profile in gpu.mig_profiles]
    return {name: max(a[name] for a in amounts) for name in _CAPACITIES}


def memory_slice_count(gpu: devices.GpuInfo) -> int:
    """The GPU's memory slices: the largest placement (the whole-GPU profile takes them all)."""
    return max(profile.placement_size for profile in gpu.mig_profiles)


def counter_set(gpu: devices.GpuInfo) -> models.JSONObject:
    """The GPU's CounterSet: its engines, memory and one counter per memory slice."""
    return {"name": counter_set_name(gpu), "counters": _counters(
        max_amounts(gpu), range(memory_slice_count(gpu)), device=gpu.name)}


def full_gpu_device(
    gpu: devices.GpuInfo,
    *,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric: Mapping[str, models.JSONObject] | None = None,
) -> models.JSONObject:
    """The whole GPU as a partitionable device: its largest capacities, consuming everything
    (`fabric`: its Fabric Manager attributes, `core.gpu.slices.fabric_attributes`)."""
    amounts = max_amounts(gpu)
    device = {
        **gpu_slices.gpu_device(gpu, fabric=fabric),
        "capacity": _capacity(amounts, device=gpu.name),
        "consumesCounters": [{
            "counterSet": counter_set_name(gpu),
            "counters": _counters(amounts, range(memory_slice_count(gpu)), device=gpu.name),
        }],
    }
    return shares.shareable(
        device, consumable, memory_bytes=amounts["memory"],
        quantity=partial(_quantity_text, device=gpu.name),
    )


def mig_partition_device(
    spec: MigSpec,
    *,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric: Mapping[str, models.JSONObject] | None = None,
) -> models.JSONObject:
    """A MIG device not created yet, as upstream's dynamic MigSpec publishes it.

    Attributes as for static MIG less the `uuid` (no device exists yet; its parent's Fabric
    Manager attributes, `fabric`, included); capacities the
    profile's (no per-slice capacities); it consumes its profile's amounts and its memory
    slices from the parent's CounterSet.
    """
    name, parent = spec.name, spec.parent
    attributes = {
        "type": gpu_slices.string_attribute(devices.MIG_TYPE, device=name, field="type"),
        "parentUUID": gpu_slices.string_attribute(parent.uuid, device=name, field="parentUUID"),
        "profile": gpu_slices.string_attribute(spec.profile.name, device=name, field="profile"),
        **gpu_slices.common_gpu_attributes(parent, device=name),
        **(fabric or {}),
    }
    amounts = profile_amounts(spec.profile)
    device = {
        **gpu_slices.device_object(name, attributes, _capacity(amounts, device=name)),
        "consumesCounters": [{
            "counterSet": counter_set_name(parent),
            "counters": _counters(amounts, spec.memory_slices, device=name),
        }],
    }
    return shares.shareable(
        device, consumable, memory_bytes=spec.profile.memory_bytes,
        quantity=partial(_quantity_text, device=name),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceContent:
    """What one ResourceSlice of the pool holds: devices, counter sets, or both."""

    devices: tuple[models.JSONObject, ...] = ()
    shared_counters: tuple[models.JSONObject, ...] = ()


def plan_partitioned_slices(
    inventory: devices.GpuInventory,
    *,
    layout: SliceLayout,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric_partitions: tuple[fm_partitions.Partition, ...] | None = None,
) -> tuple[SliceContent, ...]:
    """The node's pool under DynamicMIG: one slice per GPU (PCI bus ID order), devices sorted
    by name; counters with them (COMBINED) or all in a first slice of their own (SPLIT).

    A GPU that is not partitionable keeps what it publishes without the gate (its full GPU or
    its existing MIG devices), without counters. `fabric_partitions` (given only under gate
    FabricManagerPartitioning on an NVSwitch node) adds each GPU's Fabric Manager attributes
    to all its devices, as `core.gpu.slices.plan_gpu_devices` does. Raises
    `errors.PermanentError` as that does for what the API would refuse.
    """
    fabric_gates = models.FeatureGates(
        values={feature_gates.FABRIC_MANAGER_PARTITIONING: fabric_partitions is not None}
    )
    fabric = gpu_slices.fabric_attributes(
        inventory, gates=fabric_gates, fabric_partitions=fabric_partitions
    )
    static_migs = {
        gpu.minor: tuple(mig for mig in inventory.migs if mig.parent_minor == gpu.minor)
        for gpu in inventory.gpus
    }
    per_gpu: list[tuple[str, tuple[models.JSONObject, ...], models.JSONObject | None]] = []
    for gpu in inventory.gpus:
        address = gpu_slices.bus_id(gpu.pci_bus_id, gpu.name)
        if is_partitionable(gpu):
            specs = possible_migs(gpu)
            gpu_slices.check_names(
                [*([gpu.name] if offers_full_gpu(gpu) else []), *(s.name for s in specs)])
            own = fabric.get(gpu.minor)
            built = [
                mig_partition_device(spec, consumable=consumable, fabric=own) for spec in specs
            ]
            if offers_full_gpu(gpu):
                built.append(full_gpu_device(gpu, consumable=consumable, fabric=own))
            per_gpu.append((address, _by_name(built), counter_set(gpu)))
        else:
            alone = devices.GpuInventory(gpus=(gpu,), migs=static_migs[gpu.minor])
            per_gpu.append((address, gpu_slices.plan_gpu_devices(
                alone, gates=fabric_gates, consumable=consumable,
                fabric_partitions=fabric_partitions,
            ), None))
    per_gpu.sort(key=lambda item: item[0])
    if layout is SliceLayout.COMBINED:
        return tuple(
            SliceContent(devices=built, shared_counters=(counters,) if counters else ())
            for _, built, counters in per_gpu
        ) or (SliceContent(),)
    sets = tuple(counters for _, _, counters in per_gpu if counters)
    return (SliceContent(shared_counters=sets), *(
        SliceContent(devices=built) for _, built, _ in per_gpu))


def build_partitioned_slices(
    contents: tuple[SliceContent, ...],
    *,
    node_name: str,
    generation: int,
    node_uid: str = "",
) -> tuple[models.JSONObject, ...]:
    """The pool's ResourceSlice objects (names, pool and owner as `core.slices` gives them);
    a slice holds `devices` and `sharedCounters` only where it has some."""
    owners = (
        {"ownerReferences": [slices.node_owner_reference(node_name=node_name, node_uid=node_uid)]}
        if node_uid else {}
    )
    built: list[models.JSONObject] = []
    for index, content in enumerate(contents):
        spec: dict[str, object] = {
            "driver": names.GPU_DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation,
                     "resourceSliceCount": len(contents)},
        }
        if content.devices or not content.shared_counters:
            spec["devices"] = [dict(device) for device in content.devices]
        if content.shared_counters:
            spec["sharedCounters"] = [dict(counters) for counters in content.shared_counters]
        built.append({
            "apiVersion": names.DRA_GROUP_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "name": slices.slice_name(
                    node_name=node_name, driver=names.GPU_DRIVER_NAME, index=index),
                **owners,
            },
            "spec": spec,
        })
    return tuple(built)


def _by_name(built: list[models.JSONObject]) -> tuple[models.JSONObject, ...]:
    return tuple(sorted(built, key=lambda device: str(device["name"])))


def _capacity(amounts: Mapping[str, int], *, device: str) -> dict[str, models.JSONObject]:
    return {
        name: gpu_slices.capacity_quantity(amounts[name], device=device, field=name)
        for name in sorted(amounts)
    }


def _counters(
    amounts: Mapping[str, int], memory_slices: range, *, device: str
) -> dict[str, models.JSONObject]:
    counters = {
        counter_name(name): gpu_slices.capacity_quantity(value, device=device, field=name)
        for name, value in amounts.items()
    }
    for index in memory_slices:
        counters[memory_slice_counter(index)] = {"value": "1"}
    return {key: counters[key] for key in sorted(counters)}


def _quantity_text(value: int, *, device: str) -> str:
    return str(gpu_slices.capacity_quantity(value, device=device, field="memory")["value"])
