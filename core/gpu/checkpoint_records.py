"""What the GPU half records about a prepared claim, and how it is written.

An entry of the GPU plugin's checkpoint holds the shared fields (`core.checkpoint`) and a
`GpuClaimRecord`: which devices the claim holds (and whether they may be shared), what was
done to the GPUs (time-slices set, the IOMMU API device given, MPS control daemons started and
the GPUs they put in EXCLUSIVE_PROCESS). Member `mpsDaemons` is written only when a claim has
one, so records without MPS encode byte for byte as before; likewise `dynamicMIG`, the MIG
devices a prepare creates (gate DynamicMIG), recorded before the first is created so that
unprepare, rollback and the stale sweep destroy them; and `fabricPartitions`, the Fabric
Manager partitions a prepare activates (gate FabricManagerPartitioning), recorded before the
activation so that unprepare, rollback, the stale sweep and the start-up clean-up of
partitions no claim owns know whose they are. Entry member `gpu` (format
version 2). Version 1 kept the same JSON under the entry's `gpu` member beside ComputeDomain
fields that meant nothing for GPU claims; a missing or malformed one (hand-edited) reads as
the device names of the entry, each held exclusively: the safe reading for conflict checks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from core import checkpoint as checkpoints
from core import models
from core.gpu import devices

KEY: Final = "gpu"

_GPU_PREFIX = "gpu-"
_VFIO_PREFIX = "gpu-vfio-"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeldDevice:
    """One device a claim holds on the node."""

    name: str
    # devices.GPU_TYPE, MIG_TYPE or VFIO_TYPE ("" when a name tells nothing).
    kind: str
    # Minor of the physical GPU the device lives on (None: unknown, e.g. a VFIO function).
    gpu_minor: int | None = None
    # Full GPUs: the UUID a time-slice was set on.
    uuid: str = ""
    # VFIO functions: the PCI address bound to vfio-pci.
    pci_bus_id: str = ""
    shared: bool = False
    # Held with admin access (monitoring, debugging): beside any other holder, and the claim
    # changed nothing on the device (see `gpu.overlap`).
    admin_access: bool = False
    # Held as a consumable share (the allocation result has a shareID): beside other shares
    # of the device whose `config` is equal (see `gpu.overlap`).
    consumable: bool = False
    # A share's normalized config (`gpu.shares.normalized_config`); "" for other devices.
    config: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MpsRecord:
    """An MPS control daemon a claim started (or was starting): what undoing it needs."""

    daemon_id: str
    # Full GPUs it put in EXCLUSIVE_PROCESS (DEFAULT again once it is gone).
    gpu_uuids: tuple[str, ...] = ()
    # The claim's slice devices whose CDI devices reach it.
    devices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuClaimRecord:
    """The GPU half's part of a checkpoint entry."""

    held: tuple[HeldDevice, ...] = ()
    # Full GPUs whose time-slice this claim set (reset on unprepare, as upstream does).
    time_sliced: tuple[str, ...] = ()
    # The IOMMU API device the claim's spec gives ("" none, /dev/vfio/vfio or /dev/iommu).
    vfio_api: str = ""
    # MPS control daemons, recorded before any is started (PrepareStarted).
    mps: tuple[MpsRecord, ...] = ()
    # MIG devices this claim creates (dynamic MIG), recorded before any is created.
    dynamic_migs: tuple[devices.MigPlacement, ...] = ()
    # Fabric Manager partitions this claim activates (ids), recorded before any is activated.
    fabric_partitions: tuple[int, ...] = ()


Entry = models.CheckpointEntry[GpuClaimRecord]
Checkpoint = models.Checkpoint[GpuClaimRecord]
PluginAction = models.PluginAction[GpuClaimRecord]


# Version 1 wrote ComputeDomain fields with these constant values beside the GPU record.
_LEGACY_MODE: Final[Mapping[str, Any]] = {"mode": "driverManaged", "isolation": "domain"}


class _Codec:
    """The `models.RecordCodec` of `GpuClaimRecord`."""

    key: Final = KEY
    legacy_fields: Final = frozenset({"mode", "isolation", "domainID", "channelIDs", KEY})

    def encode(self, record: GpuClaimRecord) -> dict[str, Any]:
        out: dict[str, Any] = {
            "devices": [_held_to_json(h) for h in record.held],
            "timeSliced": list(record.time_sliced),
            "vfioAPIDevice": record.vfio_api,
        }
        if record.mps:  # NB: only when set: records without MPS stay byte-identical
            out["mpsDaemons"] = [_mps_to_json(m) for m in record.mps]
        if record.dynamic_migs:  # NB: likewise for records without dynamic MIG
            out["dynamicMIG"] = [_placement_to_json(m) for m in record.dynamic_migs]
        if record.fabric_partitions:  # NB: likewise for records without Fabric Manager
            out["fabricPartitions"] = list(record.fabric_partitions)
        return out

    def decode(self, raw: Any) -> GpuClaimRecord:
        if not isinstance(raw, dict):
            raise ValueError(f"an entry's {KEY!r} record is not a JSON object")
        listed, sliced, api = raw.get("devices"), raw.get("timeSliced"), raw.get("vfioAPIDevice")
        if not isinstance(listed, list):
            raise ValueError(f"'{KEY}.devices' is not a list")
        if not isinstance(sliced, list) or any(not isinstance(u, str) for u in sliced):
            raise ValueError(f"'{KEY}.timeSliced' is not a list of strings")
        if not isinstance(api, str):
            raise ValueError(f"'{KEY}.vfioAPIDevice' is not a string")
        held = tuple(_held_from_json(item) for item in listed)
        if any(h is None for h in held):
            raise ValueError(f"'{KEY}.devices' holds an item without a name")
        daemons = raw.get("mpsDaemons", [])
        if not isinstance(daemons, list):
            raise ValueError(f"'{KEY}.mpsDaemons' is not a list")
        mps = tuple(_mps_from_json(item) for item in daemons)
        if any(m is None for m in mps):
            raise ValueError(f"'{KEY}.mpsDaemons' holds an item without an id")
        created = raw.get("dynamicMIG", [])
        if not isinstance(created, list):
            raise ValueError(f"'{KEY}.dynamicMIG' is not a list")
        placements = tuple(_placement_from_json(item) for item in created)
        if any(m is None for m in placements):
            raise ValueError(
                f"'{KEY}.dynamicMIG' holds an item without integer gpuMinor, giProfileID and "
                "placementStart"
            )
        fabric = raw.get("fabricPartitions", [])
        # NB: `type(...) is int`, not isinstance: JSON true is no partition id.
        if not isinstance(fabric, list) or any(type(i) is not int for i in fabric):
            raise ValueError(f"'{KEY}.fabricPartitions' is not a list of integers")
        return GpuClaimRecord(
            held=tuple(h for h in held if h is not None), time_sliced=tuple(sliced), vfio_api=api,
            mps=tuple(m for m in mps if m is not None),
            dynamic_migs=tuple(m for m in placements if m is not None),
            fabric_partitions=tuple(fabric),
        )

    def decode_legacy(self, entry: Mapping[str, Any]) -> GpuClaimRecord:
        raw = entry.get(KEY)
        if isinstance(raw, Mapping):
            listed = raw.get("devices")
            if isinstance(listed, list):
                sliced = raw.get("timeSliced")
                return GpuClaimRecord(
                    held=tuple(h for h in (_held_from_json(i) for i in listed) if h is not None),
                    time_sliced=tuple(
                        str(u) for u in sliced if isinstance(u, str)
                    ) if isinstance(sliced, list) else (),
                    vfio_api=str(raw.get("vfioAPIDevice") or ""),
                    mps=_tolerant_mps(raw.get("mpsDaemons")),
                    # NB: a snapshot (format version 1) keeps them here too: without them an
                    # unprepare after a restart would not destroy the claim's MIG devices.
                    dynamic_migs=_tolerant_placements(raw.get("dynamicMIG")),
                    # NB: likewise, or the start-up clean-up would deactivate its partition.
                    fabric_partitions=_tolerant_ints(raw.get("fabricPartitions")),
                )
        named = entry.get("devices")
        return GpuClaimRecord(held=tuple(
            held_from_name(str(d["deviceName"])) for d in (named if isinstance(named, list) else ())
            if isinstance(d, Mapping) and d.get("deviceName")
        ))

    def encode_legacy(self, record: GpuClaimRecord) -> dict[str, Any]:
        return {**_LEGACY_MODE, "domainID": "", "channelIDs": [], KEY: self.encode(record)}

    def legacy_header(self, records: Sequence[GpuClaimRecord]) -> Mapping[str, Any]:
        return _LEGACY_MODE

    def tallies(self, record: GpuClaimRecord) -> tuple[Hashable, ...]:
        return ()


CODEC: Final[models.RecordCodec[GpuClaimRecord]] = _Codec()


def empty(*, boot_id: str) -> Checkpoint:
    """A fresh GPU-plugin checkpoint for this boot."""
    return checkpoints.empty(boot_id=boot_id, codec=CODEC)


def decode(data: bytes) -> Checkpoint:
    """`checkpoint.decode` for the GPU plugin's file."""
    return checkpoints.decode(data, CODEC)


def _held_to_json(held: HeldDevice) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": held.name, "type": held.kind, "shared": held.shared}
    if held.gpu_minor is not None:
        raw["gpuMinor"] = held.gpu_minor
    if held.uuid:
        raw["uuid"] = held.uuid
    if held.pci_bus_id:
        raw["pciBusID"] = held.pci_bus_id
    if held.admin_access:
        raw["adminAccess"] = True  # NB: only when set: records without it stay byte-identical
    if held.consumable:
        raw["consumableShare"] = True  # NB: likewise
    if held.config:
        raw["config"] = json.loads(held.config)
    return raw


def _mps_to_json(record: MpsRecord) -> dict[str, Any]:
    return {
        "id": record.daemon_id,
        "gpuUUIDs": list(record.gpu_uuids),
        "devices": list(record.devices),
    }


def _mps_from_json(raw: Any) -> MpsRecord | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str) or not raw["id"]:
        return None
    return MpsRecord(
        daemon_id=raw["id"],
        gpu_uuids=_strings(raw.get("gpuUUIDs")),
        devices=_strings(raw.get("devices")),
    )


def _placement_to_json(placement: devices.MigPlacement) -> dict[str, Any]:
    return {
        "gpuMinor": placement.parent_minor,
        "giProfileID": placement.gi_profile_id,
        "placementStart": placement.placement_start,
    }


def _placement_from_json(raw: Any) -> devices.MigPlacement | None:
    if not isinstance(raw, Mapping):
        return None
    minor, profile_id, start = raw.get("gpuMinor"), raw.get("giProfileID"), raw.get(
        "placementStart"
    )
    # NB: `type(...) is int`, not isinstance: JSON true is no minor.
    if type(minor) is not int or type(profile_id) is not int or type(start) is not int:
        return None
    return devices.MigPlacement(
        parent_minor=minor, gi_profile_id=profile_id, placement_start=start
    )


def _tolerant_placements(raw: Any) -> tuple[devices.MigPlacement, ...]:
    items = raw if isinstance(raw, list) else ()
    return tuple(m for m in (_placement_from_json(i) for i in items) if m is not None)


def _tolerant_ints(raw: Any) -> tuple[int, ...]:
    items = raw if isinstance(raw, list) else ()
    return tuple(i for i in items if type(i) is int)


def _tolerant_mps(raw: Any) -> tuple[MpsRecord, ...]:
    items = raw if isinstance(raw, list) else ()
    return tuple(m for m in (_mps_from_json(i) for i in items) if m is not None)


def _strings(raw: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in raw if isinstance(v, str)) if isinstance(raw, list) else ()


def _held_from_json(raw: Any) -> HeldDevice | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        return None
    name = str(raw["name"])
    guessed = held_from_name(name)
    minor = raw.get("gpuMinor")
    return HeldDevice(
        name=name,
        kind=str(raw.get("type") or guessed.kind),
        gpu_minor=minor if type(minor) is int else guessed.gpu_minor,
        uuid=str(raw.get("uuid") or ""),
        pci_bus_id=str(raw.get("pciBusID") or ""),
        shared=raw.get("shared") is True,
        admin_access=raw.get("adminAccess") is True,
        consumable=raw.get("consumableShare") is True,
        config=_canonical(raw.get("config")),
    )


def _canonical(config: Any) -> str:
    """A stored share config as canonical JSON; "" when absent or not an object (a hand-edited
    record: the share then equals no other config, the safe reading)."""
    if not isinstance(config, Mapping):
        return ""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


# The `device_type` label of `nvidia_dra_prepared_devices` (upstream's values).
UNKNOWN_TYPE: Final = "unknown"
PREPARED_DEVICE_TYPES: Final = (devices.GPU_TYPE, devices.MIG_TYPE, devices.VFIO_TYPE, UNKNOWN_TYPE)


def prepared_device_type(device_name: str) -> str:
    """The `device_type` metric label of a GPU device, from its slice name."""
    return held_from_name(device_name).kind or UNKNOWN_TYPE


def held_from_name(name: str) -> HeldDevice:
    """What a slice device name alone tells: its kind and physical GPU (never shared)."""
    if name.startswith(_VFIO_PREFIX):
        return HeldDevice(name=name, kind=devices.VFIO_TYPE)
    mig = devices.parse_mig_name(name)
    if mig is not None:
        return HeldDevice(name=name, kind=devices.MIG_TYPE, gpu_minor=mig[0])
    suffix = name.removeprefix(_GPU_PREFIX)
    if suffix != name and suffix.isascii() and suffix.isdigit():
        return HeldDevice(name=name, kind=devices.GPU_TYPE, gpu_minor=int(suffix))
    return HeldDevice(name=name, kind="")
