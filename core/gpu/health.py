"""GPU health (gate NVMLDeviceHealthCheck): NVML health events in, device taints out.

An NVML event loop (`adapters.nvml.health_watch`) reports what it sees on the node's GPUs as
`HealthEvent`s. This module decides, from plain values, which published devices each event
touches and which KEP-5055 device taint they get, with upstream's keys so that tolerations
written for the upstream driver match:

- `gpu.nvidia.com/xid=<XID>`: `NoSchedule` for an XID that means the GPU is broken, effect
  `None` (informational: shown, nothing refused) for the XIDs that are application errors (the
  default list below plus `--additional-xids-to-ignore`);
- `gpu.nvidia.com/gpu-lost` `NoSchedule`: the GPU fell off the bus (or NVML cannot name it);
- `gpu.nvidia.com/unmonitored` `None`: events cannot be watched on this GPU.

One taint per key and device: a later event of the same key replaces the value and effect (an
XID 48 after an XID 79 shows 48). An event on a whole GPU reaches its MIG devices too. The
state is kept per node boot (`HealthState.boot_id`): a reboot resets the GPUs, so what was
seen before it no longer holds; a plugin restart keeps it.

Pure: no clocks, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from core import device_health, device_taints, errors, models, names
from core.gpu import devices

TAINT_KEY_XID: Final = f"{names.GPU_DRIVER_NAME}/xid"
TAINT_KEY_GPU_LOST: Final = f"{names.GPU_DRIVER_NAME}/gpu-lost"
TAINT_KEY_UNMONITORED: Final = f"{names.GPU_DRIVER_NAME}/unmonitored"
# NVML's GPU/compute instance ID of an event on a whole GPU (not on one MIG device).
WHOLE_GPU: Final = 0xFFFFFFFF
# XIDs that are application errors (the GPU stays usable), as NVIDIA's XID catalogue and the
# upstream driver classify them: graphics engine exception, GPU memory page fault, GPU stopped
# processing, preemptive cleanup, video processor exception, context switch timeout.
DEFAULT_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
STATE_VERSION: Final = 1

# Shared with the ComputeDomain half's fabric taints (`core.device_taints`).
TaintEffect = device_taints.TaintEffect
DeviceTaint = device_taints.DeviceTaint
taint_to_k8s = device_taints.taint_to_k8s
effect_none_supported = device_taints.effect_none_supported


class HealthEventKind(enum.Enum):
    XID = "xid"
    GPU_LOST = "gpu-lost"
    UNMONITORED = "unmonitored"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HealthEvent:
    """What the event loop saw. `gpu_uuid` "" means every GPU of the node (NVML lost, or
    cannot say which); `gi_id`/`ci_id` name a MIG device, either one `WHOLE_GPU` the GPU
    itself (as upstream reads NVML's event)."""

    kind: HealthEventKind
    gpu_uuid: str = ""
    gi_id: int = WHOLE_GPU
    ci_id: int = WHOLE_GPU
    xid: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a published device lives, as NVML events name it."""

    device: str
    gpu_uuid: str
    gi_id: int = WHOLE_GPU
    ci_id: int = WHOLE_GPU


@dataclasses.dataclass(frozen=True, kw_only=True)
class XidPolicy:
    """Which XIDs only inform (effect `None`) instead of refusing the device."""

    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS

    def effect(self, xid: int) -> TaintEffect:
        return TaintEffect.NONE if xid in self.ignored else TaintEffect.NO_SCHEDULE


DEFAULT_XID_POLICY: Final = XidPolicy()


@dataclasses.dataclass(frozen=True, kw_only=True)
class HealthState:
    """The taints each device carries, for one boot of the node."""

    boot_id: str
    taints: Mapping[str, tuple[DeviceTaint, ...]] = dataclasses.field(default_factory=dict)

    def of(self, device: str) -> tuple[DeviceTaint, ...]:
        return self.taints.get(device, ())


def xid_policy(additional: str) -> XidPolicy:
    """The policy with `--additional-xids-to-ignore` (comma-separated XIDs, blanks allowed)
    added to the defaults; ConfigError naming the bad entry otherwise."""
    extra: set[int] = set()
    for item in additional.split(","):
        text = item.strip()
        if not text:
            continue
        if not (text.isascii() and text.isdigit()) or int(text) > 2**32 - 1:
            raise errors.ConfigError(
                f"--additional-xids-to-ignore (ADDITIONAL_XIDS_TO_IGNORE) has {text!r}: it "
                "must be a comma-separated list of XID numbers, e.g. \"48,79\"")
        extra.add(int(text))
    return XidPolicy(ignored=DEFAULT_IGNORED_XIDS | extra)


def placements(inventory: devices.GpuInventory) -> tuple[Placement, ...]:
    """The placement of every full GPU and MIG device (VFIO functions have no NVML events:
    gate PassthroughSupport excludes this one)."""
    found = [Placement(device=gpu.name, gpu_uuid=gpu.uuid)
             for gpu in inventory.gpus if gpu.uuid]
    found += [Placement(device=mig.name, gpu_uuid=mig.parent_uuid, gi_id=mig.gi_id,
                        ci_id=mig.ci_id) for mig in inventory.migs if mig.parent_uuid]
    return tuple(found)


def affected_devices(event: HealthEvent, where: Iterable[Placement]) -> tuple[str, ...]:
    """The devices `event` is about, sorted: every device for a node-wide event; a GPU and
    all its MIG devices for an event on a whole GPU; one MIG device for one on its instance.
    An event on an instance nothing published names touches nothing."""
    found: set[str] = set()
    for place in where:
        if event.gpu_uuid and place.gpu_uuid != event.gpu_uuid:
            continue
        whole = not event.gpu_uuid or WHOLE_GPU in (event.gi_id, event.ci_id)
        if whole or (place.gi_id, place.ci_id) == (event.gi_id, event.ci_id):
            found.add(place.device)
    return tuple(sorted(found))


def taint_for(event: HealthEvent, policy: XidPolicy) -> DeviceTaint:
    if event.kind is HealthEventKind.XID:
        return DeviceTaint(key=TAINT_KEY_XID, value=str(event.xid),
                           effect=policy.effect(event.xid))
    if event.kind is HealthEventKind.GPU_LOST:
        return DeviceTaint(key=TAINT_KEY_GPU_LOST)
    return DeviceTaint(key=TAINT_KEY_UNMONITORED, effect=TaintEffect.NONE)


def apply_event(
    state: HealthState, event: HealthEvent, *, where: Sequence[Placement], policy: XidPolicy
) -> tuple[HealthState, tuple[str, ...]]:
    """The state after `event`, and the devices whose taints changed (sorted; empty when the
    event repeats what is known, so nothing needs publishing)."""
    taint = taint_for(event, policy)
    taints = dict(state.taints)
    changed: list[str] = []
    for device in affected_devices(event, where):
        kept = tuple(t for t in taints.get(device, ()) if t.key != taint.key)
        updated = tuple(sorted((*kept, taint)))
        if updated != taints.get(device, ()):
            taints[device] = updated
            changed.append(device)
    return dataclasses.replace(state, taints=taints), tuple(changed)


def for_boot(state: HealthState | None, *, boot_id: str) -> HealthState:
    """What is still known after a (re)start: the saved state of this boot, else nothing."""
    if state is None or state.boot_id != boot_id:
        return HealthState(boot_id=boot_id)
    return state


def observations(
    state: HealthState, published: Iterable[str]
) -> dict[str, device_health.Observation]:
    """What the kubelet's health stream says of each published device: unhealthy while a
    taint refuses it, unknown while it is unmonitored, else healthy."""
    seen: dict[str, device_health.Observation] = {}
    for device in published:
        taints = state.of(device)
        blocking = [t for t in taints if t.blocks_scheduling]
        if blocking:
            status = device_health.HealthStatus.UNHEALTHY
            message = "tainted " + ", ".join(str(t) for t in blocking)
        elif any(t.key == TAINT_KEY_UNMONITORED for t in taints):
            status = device_health.HealthStatus.UNKNOWN
            message = "NVML cannot watch this device's events"
        else:
            status = device_health.HealthStatus.HEALTHY
            message = ("no fatal NVML event" if not taints else
                       "informational: " + ", ".join(str(t) for t in taints))
        seen[device] = device_health.Observation(status=status, message=message)
    return seen


def with_taints(
    published: Sequence[models.JSONObject], state: HealthState, *, effect_none: bool
) -> list[models.JSONObject]:
    """The ResourceSlice devices with their health taints (`devices[].taints`); see
    `core.device_taints.with_taints` (effect `None` left out where the API server lacks it)."""
    return device_taints.with_taints(published, state.taints, effect_none=effect_none)


# ---------------------------------------------------------------- the saved state (JSON edge)


def state_to_json(state: HealthState) -> models.JSONObject:
    return {
        "version": STATE_VERSION,
        "bootID": state.boot_id,
        "devices": {device: [taint_to_k8s(t) for t in taints]
                    for device, taints in sorted(state.taints.items()) if taints},
    }


def state_from_json(raw: Any) -> HealthState:
    """The saved state; DecodeError saying what is wrong (the caller starts from nothing)."""
    if not isinstance(raw, Mapping) or type(raw.get("version")) is not int or (
            raw["version"] != STATE_VERSION):
        raise errors.DecodeError(f"device health state: want an object with version "
                                 f"{STATE_VERSION}, got {str(raw)[:200]}")
    boot_id = raw.get("bootID")
    entries = raw.get("devices")
    if not isinstance(boot_id, str) or not isinstance(entries, Mapping):
        raise errors.DecodeError("device health state: bootID (string) and devices (object) "
                                 "are required")
    taints: dict[str, tuple[DeviceTaint, ...]] = {}
    for device, items in entries.items():
        if not isinstance(items, list):
            raise errors.DecodeError(f"device health state: {device!r} needs a list of taints")
        loaded = [_taint_from_json(device, t) for t in items]
        keys = [t.key for t in loaded]
        if len(set(keys)) != len(keys):
            twice = next(key for key in keys if keys.count(key) > 1)
            raise errors.DecodeError(
                f"device health state: {device!r} has two taints of {twice} (one per key)")
        taints[str(device)] = tuple(sorted(loaded))
    return HealthState(boot_id=boot_id, taints=taints)


def _taint_from_json(device: str, raw: Any) -> DeviceTaint:
    try:
        key, value = raw["key"], raw.get("value", "")
        if not (isinstance(key, str) and key and isinstance(value, str)):
            raise TypeError("key must be a non-empty string and value a string")
        return DeviceTaint(key=key, value=value, effect=TaintEffect(raw["effect"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise errors.DecodeError(
            f"device health state: a taint of {device!r} is malformed ({exc!r}): {raw!r}"
        ) from None
