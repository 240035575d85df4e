"""The JSON the NVML probe child prints, and its translation into core records.

NVML runs in a child process (`adapters.nvml.probe`) so that a segfault or hang in the
library cannot take the plugin down; this module is the contract between the two
sides. Pure: no I/O, no pynvml, tested on its own. Two readers: the ComputeDomain half
takes fabric records (`fabric_records`), the GPU half the GPU inventory (`gpu_inventory`).

Shape (one JSON object on stdout):
    {"schema": 1, "ok": true, "driver_version": "...", "cuda_driver_version": "13.0" | null,
     "gpus": [{"index", "uuid", "name", "call", "state", "cluster_uuid" (32 hex digits),
     "clique_id", "status", "note",
     "minor", "brand", "architecture", "cuda_compute_capability", "pci_bus_id",
     "memory_bytes", "mig_capable", "mig_enabled", "addressing_mode", "numa_node",
     "pcie_root", "module_id", "skipped_calls": [...], "migs": [{"uuid", "profile",
     "gi_profile_id", "gi_id", "ci_id", "placement_start", "placement_size", "memory_bytes",
     "multiprocessors", "copy_engines", "decoders", "encoders", "jpeg_engines",
     "ofa_engines", "gi_cap_minor", "ci_cap_minor"}, ...]}, ...]}
    {"schema": 1, "ok": false, "reason": "nvml-unavailable" | "nvml-error" |
     "probe-error", "message": "..."}

The GPU details (from "minor" on) were added to schema 1 without a version bump: a report
without them (an older probe) still decodes, with those fields None/empty, and serves the
fabric records as before; only `gpu_inventory` needs them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from core import models
from core.gpu import devices, migprofiles

SCHEMA_VERSION = 1
CLUSTER_UUID_LEN = 16
NVML_SUCCESS = 0
# Upstream's string for a brand or architecture NVML could not name.
UNKNOWN = "Unknown"


class ProbeOutputError(ValueError):
    """The probe printed something that is not a probe report of this schema."""


class FabricCall(enum.StrEnum):
    """Which NVML entry point produced a GPU's fabric info."""

    LEGACY = "legacy"  # nvmlDeviceGetGpuFabricInfo
    VERSIONED = "v"  # nvmlDeviceGetGpuFabricInfoV (opt-in: NVML_FABRIC_INFO_V=1)
    NONE = "none"  # neither answered: reported as NOT_SUPPORTED


class FailureReason(enum.StrEnum):
    UNAVAILABLE = "nvml-unavailable"  # no libnvidia-ml / driver not loaded / no pynvml
    NVML_ERROR = "nvml-error"  # an NVML call returned an error
    PROBE_ERROR = "probe-error"  # the probe itself failed unexpectedly


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeMig:
    """One existing MIG device (GPU instance + compute instance) as the probe saw it."""

    uuid: str
    # As nvidia-smi names it ("3g.20gb"); `gi_profile_id` is NVML's profile *id* (9 for it).
    profile: str
    gi_profile_id: int
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    memory_bytes: int
    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0
    gi_cap_minor: int | None = None
    ci_cap_minor: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeGpu:
    """One GPU as the probe saw it; `state`/`status` are NVML's raw integers.

    Everything after `note` is the GPU half's view; None where NVML (or sysfs) could not
    say, each failed call named in `skipped_calls` ("nvmlDeviceGetBrand: Not Supported").
    """

    index: int
    uuid: str
    name: str
    call: FabricCall
    state: int
    cluster_uuid: bytes = b"\x00" * CLUSTER_UUID_LEN
    clique_id: int = 0
    status: int = NVML_SUCCESS
    note: str = ""
    minor: int | None = None
    brand: str | None = None
    architecture: str | None = None
    cuda_compute_capability: str | None = None
    pci_bus_id: str | None = None
    memory_bytes: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    addressing_mode: str | None = None
    numa_node: int | None = None
    pcie_root: str | None = None
    # nvmlDeviceGetModuleId: the board position Fabric Manager's partitions name.
    module_id: int | None = None
    skipped_calls: tuple[str, ...] = ()
    migs: tuple[ProbeMig, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeReport:
    driver_version: str
    gpus: tuple[ProbeGpu, ...]
    # "13.0"; None from an older probe or when NVML could not say.
    cuda_driver_version: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeFailure:
    reason: FailureReason
    message: str


def encode_report(report: ProbeReport) -> str:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "ok": True,
            "driver_version": report.driver_version,
            "cuda_driver_version": report.cuda_driver_version,
            "gpus": [_gpu_to_json(gpu) for gpu in report.gpus],
        },
        sort_keys=True,
    )


def encode_failure(failure: ProbeFailure) -> str:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "ok": False,
            "reason": failure.reason.value,
            "message": failure.message,
        },
        sort_keys=True,
    )


def decode_probe_output(text: str) -> ProbeReport | ProbeFailure:
    """Parse the probe's stdout; ProbeOutputError if it is not one report of this schema."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeOutputError(f"not JSON ({exc.msg} at char {exc.pos})") from exc
    obj = _mapping(raw, "probe output")
    if obj.get("schema") != SCHEMA_VERSION:
        raise ProbeOutputError(f"schema {obj.get('schema')!r}, expected {SCHEMA_VERSION}")
    ok = obj.get("ok")
    if ok is False:
        reason = _str(obj, "reason")
        try:
            failure_reason = FailureReason(reason)
        except ValueError as exc:
            raise ProbeOutputError(f"unknown failure reason {reason!r}") from exc
        return ProbeFailure(reason=failure_reason, message=_str(obj, "message"))
    if ok is not True:
        raise ProbeOutputError(f"field 'ok' must be true or false, got {ok!r}")
    gpus = obj.get("gpus")
    if not isinstance(gpus, list):
        raise ProbeOutputError("field 'gpus' must be a list")
    return ProbeReport(
        driver_version=_str(obj, "driver_version"),
        gpus=tuple(_gpu_from_json(_mapping(gpu, "gpus[]")) for gpu in gpus),
        cuda_driver_version=_opt_str(obj, "cuda_driver_version"),
    )


def fabric_records(report: ProbeReport) -> tuple[models.FabricRecord, ...]:
    """Core fabric records of every GPU, sorted by GPU UUID (deterministic)."""
    return tuple(
        sorted((fabric_record(gpu) for gpu in report.gpus), key=lambda record: record.gpu_uuid)
    )


def fabric_record(gpu: ProbeGpu) -> models.FabricRecord:
    try:
        state = models.FabricState(gpu.state)
    except ValueError as exc:
        raise ProbeOutputError(
            f"GPU {gpu.uuid} reports unknown NVML fabric state {gpu.state}"
        ) from exc
    return models.FabricRecord(
        gpu_uuid=gpu.uuid,
        state=state,
        cluster_uuid=gpu.cluster_uuid,
        clique_id=gpu.clique_id,
        status_ok=gpu.status == NVML_SUCCESS,
    )


def gpu_inventory(report: ProbeReport) -> devices.GpuInventory:
    """The GPU half's view of the report: every GPU in NVML index order, then its MIG devices.

    VFIO functions are not NVML's to report (sysfs discovery adds them). Brand and
    architecture NVML could not name become "Unknown" (upstream's word for them); memory it
    could not read becomes 0. ProbeOutputError, naming the GPU and the fact, when a GPU lacks
    what its slice entry cannot do without (minor, PCI bus id, versions).
    """
    gpus: list[devices.GpuInfo] = []
    migs: list[devices.MigDeviceInfo] = []
    for gpu in sorted(report.gpus, key=lambda g: g.index):
        info = _gpu_info(gpu, report=report)
        gpus.append(info)
        migs.extend(_mig_info(mig, parent=info) for mig in gpu.migs)
    return devices.GpuInventory(gpus=tuple(gpus), migs=tuple(migs))


def _gpu_info(gpu: ProbeGpu, *, report: ProbeReport) -> devices.GpuInfo:
    minor, bus_id = gpu.minor, gpu.pci_bus_id
    capability, cuda = gpu.cuda_compute_capability, report.cuda_driver_version
    if minor is None or bus_id is None or capability is None or cuda is None:
        facts = {
            "minor": minor,
            "pci_bus_id": bus_id,
            "cuda_compute_capability": capability,
            "cuda_driver_version": cuda,
        }
        missing = ", ".join(name for name, value in facts.items() if value is None)
        skipped = "; ".join(gpu.skipped_calls) or "none recorded (a probe older than this plugin?)"
        raise ProbeOutputError(
            f"GPU {gpu.uuid} (index {gpu.index}): the NVML probe could not read {missing}, "
            f"which its ResourceSlice entry needs; failed NVML calls: {skipped}. Check this "
            f"GPU with nvidia-smi -q -i {gpu.index}"
        )
    return devices.GpuInfo(
        minor=minor,
        index=gpu.index,
        uuid=gpu.uuid,
        product_name=gpu.name,
        brand=gpu.brand or UNKNOWN,
        architecture=gpu.architecture or UNKNOWN,
        cuda_compute_capability=capability,
        driver_version=report.driver_version,
        cuda_driver_version=cuda,
        pci_bus_id=bus_id,
        memory_bytes=gpu.memory_bytes or 0,
        pcie_root=gpu.pcie_root,
        numa_node=gpu.numa_node,
        mig_capable=gpu.mig_capable,
        mig_enabled=gpu.mig_enabled,
        addressing_mode=gpu.addressing_mode,
        # NB: the profile tables are ours, by product name (DynamicMIG publishes a GPU's
        # partitions only when its model is listed there); NVML's own profile and placement
        # queries would serve every model, but cannot be exercised without a GPU here.
        mig_profiles=migprofiles.BY_PRODUCT.get(gpu.name, ()) if gpu.mig_capable else (),
        module_id=gpu.module_id,
    )


def _mig_info(mig: ProbeMig, *, parent: devices.GpuInfo) -> devices.MigDeviceInfo:
    return devices.MigDeviceInfo(
        uuid=mig.uuid,
        profile=mig.profile,
        parent_uuid=parent.uuid,
        parent_minor=parent.minor,
        gi_profile_id=mig.gi_profile_id,
        gi_id=mig.gi_id,
        ci_id=mig.ci_id,
        placement_start=mig.placement_start,
        placement_size=mig.placement_size,
        memory_bytes=mig.memory_bytes,
        multiprocessors=mig.multiprocessors,
        copy_engines=mig.copy_engines,
        decoders=mig.decoders,
        encoders=mig.encoders,
        jpeg_engines=mig.jpeg_engines,
        ofa_engines=mig.ofa_engines,
        gi_cap_minor=mig.gi_cap_minor,
        ci_cap_minor=mig.ci_cap_minor,
    )


def _gpu_to_json(gpu: ProbeGpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "call": gpu.call.value,
        "state": gpu.state,
        "cluster_uuid": gpu.cluster_uuid.hex(),
        "clique_id": gpu.clique_id,
        "status": gpu.status,
        "note": gpu.note,
        "minor": gpu.minor,
        "brand": gpu.brand,
        "architecture": gpu.architecture,
        "cuda_compute_capability": gpu.cuda_compute_capability,
        "pci_bus_id": gpu.pci_bus_id,
        "memory_bytes": gpu.memory_bytes,
        "mig_capable": gpu.mig_capable,
        "mig_enabled": gpu.mig_enabled,
        "addressing_mode": gpu.addressing_mode,
        "numa_node": gpu.numa_node,
        "pcie_root": gpu.pcie_root,
        "module_id": gpu.module_id,
        "skipped_calls": list(gpu.skipped_calls),
        "migs": [dataclasses.asdict(mig) for mig in gpu.migs],
    }


def _gpu_from_json(obj: Mapping[str, Any]) -> ProbeGpu:
    cluster_hex = _str(obj, "cluster_uuid")
    try:
        cluster_uuid = bytes.fromhex(cluster_hex)
    except ValueError as exc:
        raise ProbeOutputError(f"cluster_uuid {cluster_hex!r} is not hex") from exc
    if len(cluster_uuid) != CLUSTER_UUID_LEN:
        raise ProbeOutputError(
            f"cluster_uuid {cluster_hex!r} has {len(cluster_uuid)} bytes, "
            f"expected {CLUSTER_UUID_LEN}"
        )
    call = _str(obj, "call")
    try:
        fabric_call = FabricCall(call)
    except ValueError as exc:
        raise ProbeOutputError(f"unknown fabric call {call!r}") from exc
    return ProbeGpu(
        index=_int(obj, "index"),
        uuid=_str(obj, "uuid"),
        name=_str(obj, "name"),
        call=fabric_call,
        state=_int(obj, "state"),
        cluster_uuid=cluster_uuid,
        clique_id=_int(obj, "clique_id"),
        status=_int(obj, "status"),
        note=_str(obj, "note"),
        minor=_opt_int(obj, "minor"),
        brand=_opt_str(obj, "brand"),
        architecture=_opt_str(obj, "architecture"),
        cuda_compute_capability=_opt_str(obj, "cuda_compute_capability"),
        pci_bus_id=_opt_str(obj, "pci_bus_id"),
        memory_bytes=_opt_int(obj, "memory_bytes"),
        mig_capable=_opt_bool(obj, "mig_capable"),
        mig_enabled=_opt_bool(obj, "mig_enabled"),
        addressing_mode=_opt_str(obj, "addressing_mode"),
        numa_node=_opt_int(obj, "numa_node"),
        pcie_root=_opt_str(obj, "pcie_root"),
        module_id=_opt_int(obj, "module_id"),
        skipped_calls=tuple(_str_list(obj, "skipped_calls")),
        migs=tuple(_mig_from_json(_mapping(mig, "migs[]")) for mig in _list(obj, "migs")),
    )


def _mig_from_json(obj: Mapping[str, Any]) -> ProbeMig:
    return ProbeMig(
        uuid=_str(obj, "uuid"),
        profile=_str(obj, "profile"),
        gi_profile_id=_int(obj, "gi_profile_id"),
        gi_id=_int(obj, "gi_id"),
        ci_id=_int(obj, "ci_id"),
        placement_start=_int(obj, "placement_start"),
        placement_size=_int(obj, "placement_size"),
        memory_bytes=_int(obj, "memory_bytes"),
        multiprocessors=_opt_int(obj, "multiprocessors") or 0,
        copy_engines=_opt_int(obj, "copy_engines") or 0,
        decoders=_opt_int(obj, "decoders") or 0,
        encoders=_opt_int(obj, "encoders") or 0,
        jpeg_engines=_opt_int(obj, "jpeg_engines") or 0,
        ofa_engines=_opt_int(obj, "ofa_engines") or 0,
        gi_cap_minor=_opt_int(obj, "gi_cap_minor"),
        ci_cap_minor=_opt_int(obj, "ci_cap_minor"),
    )


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProbeOutputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ProbeOutputError(f"field {key!r} must be a string, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProbeOutputError(f"field {key!r} must be an integer, got {value!r}")
    return value


# Optional fields: absent (an older probe) and null both read as "unknown".
def _opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key)


def _opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    return None if obj.get(key) is None else _str(obj, key)


def _opt_bool(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise ProbeOutputError(f"field {key!r} must be true or false, got {value!r}")
    return value


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise ProbeOutputError(f"field {key!r} must be a list, got {value!r}")
    return value


def _str_list(obj: Mapping[str, Any], key: str) -> list[str]:
    values = _list(obj, key)
    if not all(isinstance(value, str) for value in values):
        raise ProbeOutputError(f"field {key!r} must be a list of strings, got {values!r}")
    return values
