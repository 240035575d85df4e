"""What the kubelet plugin publishes: the node's ResourceSlices (`resource.k8s.io/v1`).

The scheduler only sees devices through these slices, and the DeviceClass CEL selectors match
on their attributes, so names and attribute shapes here are wire contract (DESIGN §3). The sync
planner turns desired vs existing slices into cluster actions; applying them and planning again
yields no actions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from core import models, names

_SLICE_KIND = "ResourceSlice"
# Kubernetes object names are DNS subdomains: at most 253 characters.
_MAX_NAME_LENGTH = 253


def slice_name(*, node_name: str, driver: str, index: int) -> str:
    """Deterministic ResourceSlice name `<node>-<driver>-<index>`, shortened to a valid length.

    An over-long node name is cut and suffixed with a hash of the full name, so two nodes that
    share a long prefix still get distinct slice names.
    """
    name = f"{node_name}-{driver}-{index}"
    if len(name) <= _MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    tail = f"-{digest}-{driver}-{index}"
    return node_name[: _MAX_NAME_LENGTH - len(tail)].rstrip("-.") + tail


def node_owner_reference(*, node_name: str, node_uid: str) -> models.JSONObject:
    """The Node as the controlling owner of its ResourceSlices (as upstream's plugins set it):
    the garbage collector deletes a node's slices with the Node."""
    return {
        "apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True,
    }


def build_resource_slices(
    *,
    node_name: str,
    driver: str,
    devices: Sequence[Mapping[str, Any]],
    generation: int,
    node_uid: str = "",
) -> tuple[models.JSONObject, ...]:
    """The node's pool as ResourceSlice objects: pool name = node name, ≤128 devices per slice,
    each owned by the Node (`node_uid`; no ownerReferences when it is unknown, "").

    A node with no devices still publishes one empty slice, so the pool (and its generation)
    stays visible to the scheduler.
    """
    chunks = [
        list(devices[i : i + names.MAX_DEVICES_PER_SLICE])
        for i in range(0, len(devices), names.MAX_DEVICES_PER_SLICE)
    ] or [[]]
    owners = (
        {"ownerReferences": [node_owner_reference(node_name=node_name, node_uid=node_uid)]}
        if node_uid
        else {}
    )
    return tuple(
        {
            "apiVersion": names.DRA_GROUP_VERSION,
            "kind": _SLICE_KIND,
            "metadata": {
                "name": slice_name(node_name=node_name, driver=driver, index=index),
                **owners,
            },
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {
                    "name": node_name,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "devices": [dict(device) for device in chunk],
            },
        }
        for index, chunk in enumerate(chunks)
    )


def plan_slice_sync(
    *,
    desired: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
) -> tuple[models.ClusterAction, ...]:
    """Create, patch and delete actions that make `existing` (this driver's slices) `desired`.

    Slices are matched by name. A slice whose spec already holds every desired field is left
    alone (the API server may add defaults); one whose ownerReferences differ from desired ones
    (a slice published before its Node's UID was known, or for an earlier Node of that name)
    gets them replaced; desired slices without ownerReferences leave existing ones alone.
    A slice holding `devices` or `sharedCounters` its desired spec lacks gets them removed.
    Output: creates, then patches, then deletes, each sorted by name; empty when the two
    already agree.
    """
    existing_by_name = {_name(obj): obj for obj in existing}
    desired_by_name = {_name(obj): obj for obj in desired}
    creates: list[models.ClusterAction] = []
    patches: list[models.ClusterAction] = []
    for name in sorted(desired_by_name):
        want = desired_by_name[name]
        have = existing_by_name.get(name)
        if have is None:
            creates.append(models.CreateObject(kind=_SLICE_KIND, obj=want))
            continue
        patch: dict[str, Any] = {}
        want_spec, have_spec = want.get("spec", {}), have.get("spec", {})
        # NB: null in a merge patch removes the field.
        dropped = {f: None for f in _CONTENT_FIELDS if f not in want_spec and have_spec.get(f)}
        if (dropped or not _contains(have_spec, want_spec) or _taints_differ(have_spec, want_spec)
                or _binding_differs(have_spec, want_spec)):
            patch["spec"] = {**want_spec, **dropped}
        owners = _owners(want)
        if owners and not _contains(_owners(have), owners):
            patch["metadata"] = {"ownerReferences": owners}
        if patch:
            patches.append(
                models.PatchObject(
                    kind=_SLICE_KIND,
                    namespace="",
                    name=name,
                    patch=patch,
                    resource_version=str(have.get("metadata", {}).get("resourceVersion", "")),
                )
            )
    deletes: list[models.ClusterAction] = [
        models.DeleteObject(kind=_SLICE_KIND, namespace="", name=name)
        for name in sorted(existing_by_name)
        if name not in desired_by_name
    ]
    return (*creates, *patches, *deletes)


# A device taint as compared: (key, value, effect); `timeAdded` is the API server's.
TaintKey = tuple[str, str, str]


def device_taints(pool: Sequence[Mapping[str, Any]]) -> dict[str, tuple[TaintKey, ...]]:
    """The taints of every device of a pool's slices, by device name ({} when none is
    tainted; an untainted device is named with no taints)."""
    found: dict[str, tuple[TaintKey, ...]] = {}
    for obj in pool:
        devices = (obj.get("spec") or {}).get("devices")
        for device in devices if isinstance(devices, list) else ():
            if isinstance(device, Mapping):
                found[str(device.get("name"))] = tuple(
                    (str(t.get("key") or ""), str(t.get("value") or ""),
                     str(t.get("effect") or ""))
                    for t in device.get("taints") or () if isinstance(t, Mapping))
    return found


def dropped_taints(
    desired: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The devices (sorted) whose desired taints the API server did not store: one without
    gate DRADeviceTaints drops `devices[].taints` without an error."""
    have = device_taints(stored)
    return tuple(sorted(name for name, want in device_taints(desired).items()
                        if name in have and len(have[name]) < len(want)))


def without_taints(pool: Sequence[Mapping[str, Any]]) -> list[models.JSONObject]:
    """The slices as a server without DRADeviceTaints stores them: no `devices[].taints`."""
    return _without_device_fields(pool, frozenset({"taints"}))


def _without_device_fields(
    pool: Sequence[Mapping[str, Any]], fields: frozenset[str]
) -> list[models.JSONObject]:
    """The slices with `fields` left out of every device (what a server lacking the gate of
    those fields stores)."""
    result: list[models.JSONObject] = []
    for obj in pool:
        spec = obj.get("spec") or {}
        devices = spec.get("devices")
        if not isinstance(devices, list):
            result.append(dict(obj))
            continue
        bare = [{k: v for k, v in d.items() if k not in fields} if isinstance(d, Mapping) else d
                for d in devices]
        result.append({**obj, "spec": {**spec, "devices": bare}})
    return result


# A device's DRA binding-condition fields (KEP-5007): an API server without gate
# DRADeviceBindingConditions (alpha, off by default, in 1.34 and 1.35) drops them all.
BINDING_FIELDS = ("bindingConditions", "bindingFailureConditions", "bindsToNode")


def devices_with_binding_conditions(pool: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The devices (sorted) of a pool's slices that carry binding conditions."""
    return tuple(sorted(
        str(device.get("name"))
        for obj in pool
        for device in _devices(obj)
        if device.get("bindingConditions")
    ))


def dropped_binding_conditions(
    desired: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The devices (sorted) whose desired binding conditions the API server did not store:
    one without gate DRADeviceBindingConditions drops them without an error."""
    kept = set(devices_with_binding_conditions(stored))
    stored_names = {str(d.get("name")) for obj in stored for d in _devices(obj)}
    return tuple(name for name in devices_with_binding_conditions(desired)
                 if name in stored_names and name not in kept)


def without_binding_conditions(pool: Sequence[Mapping[str, Any]]) -> list[models.JSONObject]:
    """The slices as a server without DRADeviceBindingConditions stores them."""
    return _without_device_fields(pool, frozenset(BINDING_FIELDS))


def _devices(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = (obj.get("spec") or {}).get("devices")
    return [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []


# What a slice publishes: a desired slice without one of them (dynamic MIG's counters-only
# slice, or a pool back to plain devices) has it removed from the existing slice.
_CONTENT_FIELDS = ("devices", "sharedCounters")


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _owners(obj: Mapping[str, Any]) -> list[Any]:
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return list(refs) if isinstance(refs, list | tuple) else []


def _taints_differ(have_spec: Mapping[str, Any], want_spec: Mapping[str, Any]) -> bool:
    """Whether a device's taints differ (a taint lifted must go: containment alone would keep
    it). Compared without `timeAdded`, which the API server fills in."""
    def taints(spec: Mapping[str, Any]) -> list[list[tuple[Any, Any, Any]]]:
        devices = spec.get("devices")
        return [[(t.get("key"), t.get("value") or "", t.get("effect"))
                 for t in (d.get("taints") or ()) if isinstance(t, Mapping)]
                for d in (devices if isinstance(devices, list) else ()) if isinstance(d, Mapping)]
    return taints(have_spec) != taints(want_spec)


def _binding_differs(have_spec: Mapping[str, Any], want_spec: Mapping[str, Any]) -> bool:
    """Whether a device's binding-condition fields differ (conditions no longer wanted, as
    when gate ComputeDomainBindingConditions is turned off, must go: containment alone would
    keep them, and the scheduler would wait for conditions nobody sets)."""
    def fields(spec: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        devices = spec.get("devices")
        return [tuple(d.get(f) or None for f in BINDING_FIELDS)
                for d in (devices if isinstance(devices, list) else ()) if isinstance(d, Mapping)]
    return fields(have_spec) != fields(want_spec)


def _contains(have: Any, want: Any) -> bool:
    """Whether `have` holds everything in `want`; lists must match element for element."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            key in have and _contains(have[key], value) for key, value in want.items()
        )
    if isinstance(want, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(type(have) is type(want) and have == want)
