"""The NVML probe: run as `python -m adapters.nvml.probe` in a child process, prints one JSON line.

NVML is a C library reached through ctypes; a bad call segfaults or hangs the whole
process (the versioned `nvmlDeviceGetGpuFabricInfoV` did so through pynvml on an H100
with driver 580). So the plugin never calls NVML itself: it runs this module as a child
and reads its report (`adapters.nvml._codec`); a crash or hang here is only a failed
probe there.

Fabric info: the legacy `nvmlDeviceGetGpuFabricInfo` is tried first. The versioned call
is tried only when `NVML_FABRIC_INFO_V=1` and the legacy call is missing, unsupported or
reports NOT_SUPPORTED.

GPU details (for the `gpu.nvidia.com` half): minor, brand, architecture, compute
capability, PCI bus id, memory, MIG mode, addressing mode and each existing MIG device,
read as the upstream driver reads them; NUMA node and PCIe root from sysfs and MIG
capability minors from procfs (under `NVML_PROBE_HOST_ROOT`, default "/"). A call that a
GPU or driver does not support only leaves its field empty and is named in the GPU's
`skipped_calls`: the fabric report the ComputeDomain half needs never fails on them.

The only module that imports `pynvml`. Exit status is 0 whenever a JSON report (success
or failure) was printed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from adapters.nvml import _codec, _facts

FABRIC_INFO_V_ENV = "NVML_FABRIC_INFO_V"
# Where the host's /sys and /proc are seen from the probe (tests point it at a fake tree).
HOST_ROOT_ENV = "NVML_PROBE_HOST_ROOT"
MIG_MINORS_PATH = "proc/driver/nvidia-caps/mig-minors"
_FABRIC_STATE_NOT_SUPPORTED = 0
_MIG_ENABLED = 1
_LEGACY_PROFILE_INFO = 1  # the v1 profile-info calls, present on every MIG-capable driver
_ENGINE_PROFILE_SHARED = 0


def main() -> int:
    try:
        outcome = _probe()
    except Exception as exc:  # the probe must always answer in JSON
        outcome = _codec.ProbeFailure(
            reason=_codec.FailureReason.PROBE_ERROR, message=f"{type(exc).__name__}: {exc}"
        )
    if isinstance(outcome, _codec.ProbeReport):
        print(_codec.encode_report(outcome), flush=True)
    else:
        print(_codec.encode_failure(outcome), flush=True)
    return 0


def _probe() -> _codec.ProbeReport | _codec.ProbeFailure:
    try:
        with warnings.catch_warnings():
            # pynvml 12+ warns that it is a shim over nvidia-ml-py; the API is the same.
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError as exc:
        return _codec.ProbeFailure(
            reason=_codec.FailureReason.UNAVAILABLE,
            message=f"the pynvml Python package is not installed ({exc})",
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        unavailable = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        reason = (
            _codec.FailureReason.UNAVAILABLE
            if exc.value in unavailable
            else _codec.FailureReason.NVML_ERROR
        )
        return _codec.ProbeFailure(reason=reason, message=f"nvmlInit: {exc}")
    try:
        return _report(
            pynvml,
            use_versioned=os.environ.get(FABRIC_INFO_V_ENV) == "1",
            host_root=os.environ.get(HOST_ROOT_ENV) or "/",
        )
    except pynvml.NVMLError as exc:
        return _codec.ProbeFailure(reason=_codec.FailureReason.NVML_ERROR, message=str(exc))
    finally:
        pynvml.nvmlShutdown()


def _report(nvml: Any, *, use_versioned: bool, host_root: str) -> _codec.ProbeReport:
    mig_minors = _facts.parse_mig_minors(_read(host_root, MIG_MINORS_PATH) or "")
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        fabric = _gpu(
            nvml,
            handle,
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            use_versioned=use_versioned,
        )
        try:
            gpu = _with_details(nvml, handle, fabric, host_root=host_root, mig_minors=mig_minors)
        except Exception as exc:  # NB: GPU details must never cost the fabric report
            gpu = dataclasses.replace(
                fabric, skipped_calls=(f"GPU details: {type(exc).__name__}: {exc}",)
            )
        gpus.append(gpu)
    cuda = _Calls(nvml).get("nvmlSystemGetCudaDriverVersion")
    return _codec.ProbeReport(
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        gpus=tuple(gpus),
        cuda_driver_version=None if cuda is None else _facts.cuda_driver_version(int(cuda)),
    )


class _Calls:
    """NVML calls a GPU or driver may lack: a failure leaves None and is noted, never raised."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.skipped: list[str] = []

    def get(self, name: str, *args: Any, **kwargs: Any) -> Any:
        function: Callable[..., Any] | None = getattr(self.nvml, name, None)
        if function is None:
            self.skipped.append(f"{name}: not in this pynvml")
            return None
        try:
            return function(*args, **kwargs)
        except self.nvml.NVMLError as exc:
            self.skipped.append(f"{name}: {exc}")
            return None

    def quiet(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Like `get`, for probing calls where an error only means "not this one"."""
        try:
            return getattr(self.nvml, name)(*args, **kwargs)
        except (self.nvml.NVMLError, AttributeError):
            return None


def _with_details(
    nvml: Any,
    handle: Any,
    gpu: _codec.ProbeGpu,
    *,
    host_root: str,
    mig_minors: dict[_facts.MigMinorKey, int],
) -> _codec.ProbeGpu:
    calls = _Calls(nvml)
    minor = calls.get("nvmlDeviceGetMinorNumber", handle)
    brand = calls.get("nvmlDeviceGetBrand", handle)
    architecture = calls.get("nvmlDeviceGetArchitecture", handle)
    capability = calls.get("nvmlDeviceGetCudaComputeCapability", handle)
    pci = calls.get("nvmlDeviceGetPciInfo", handle)
    memory = calls.get("nvmlDeviceGetMemoryInfo", handle)
    # NOT_SUPPORTED means "no such mode on this platform" (most x86 hosts) and "not MIG
    # capable": upstream reads both as absent, not as failures, so they are not noted.
    addressing = calls.quiet("nvmlDeviceGetAddressingMode", handle)
    mig_mode = calls.quiet("nvmlDeviceGetMigMode", handle)
    # Only NVSwitch baseboards have module ids (Fabric Manager's partitions name them);
    # elsewhere NOT_SUPPORTED, which is no failure either.
    module_id = calls.quiet("nvmlDeviceGetModuleId", handle)
    bus_id = None if pci is None else _facts.pci_bus_id(pci.busId)
    memory_bytes = None if memory is None else int(memory.total)
    mig_enabled = mig_mode is not None and int(mig_mode[0]) == _MIG_ENABLED
    migs: tuple[_codec.ProbeMig, ...] = ()
    if mig_enabled and minor is not None:
        migs = _migs(
            nvml,
            handle,
            calls,
            minor=int(minor),
            memory_bytes=memory_bytes or 0,
            mig_minors=mig_minors,
        )
    sysfs = None if bus_id is None else os.path.join(host_root, "sys/bus/pci/devices", bus_id)
    numa_text = None if sysfs is None else _read(sysfs, "numa_node")
    return dataclasses.replace(
        gpu,
        minor=None if minor is None else int(minor),
        brand=None if brand is None else _named(calls, "brand", brand, _facts.brand_name),
        architecture=(
            None
            if architecture is None
            else _named(calls, "architecture", architecture, _facts.architecture_name)
        ),
        cuda_compute_capability=(
            None if capability is None else _facts.compute_capability(*map(int, capability))
        ),
        pci_bus_id=bus_id,
        memory_bytes=memory_bytes,
        mig_capable=mig_mode is not None,
        mig_enabled=mig_enabled,
        addressing_mode=(
            None
            if addressing is None
            else _named(calls, "addressing mode", addressing, _facts.addressing_mode_name)
        ),
        numa_node=None if numa_text is None else _facts.numa_node(numa_text),
        pcie_root=(
            None
            if sysfs is None or not os.path.exists(sysfs)
            else _facts.pcie_root(os.path.realpath(sysfs))
        ),
        module_id=None if module_id is None else int(module_id),
        skipped_calls=tuple(calls.skipped),
        migs=migs,
    )


def _named(calls: _Calls, what: str, value: Any, name: Callable[[int], str | None]) -> str | None:
    raw = int(getattr(value, "value", value))
    named = name(raw)
    if named is None:
        calls.skipped.append(f"{what} {raw}: a value newer than this probe knows")
    return named


def _migs(
    nvml: Any,
    handle: Any,
    calls: _Calls,
    *,
    minor: int,
    memory_bytes: int,
    mig_minors: dict[_facts.MigMinorKey, int],
) -> tuple[_codec.ProbeMig, ...]:
    """Every existing MIG device of a MIG-enabled GPU, walked as upstream walks them.

    A device whose details NVML will not give is left out and named in `skipped_calls`.
    """
    # GPU instance profiles this GPU supports, by NVML profile index.
    gi_profiles = {
        index: info
        for index in range(_facts.GPU_INSTANCE_PROFILE_COUNT)
        if (
            info := calls.quiet(
                "nvmlDeviceGetGpuInstanceProfileInfo", handle, index, version=_LEGACY_PROFILE_INFO
            )
        )
        is not None
    }
    count = calls.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    found = []
    for slot in range(int(count)):
        # NOT_FOUND / INVALID_ARGUMENT: an empty slot.
        mig_handle = calls.quiet("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig_handle is None:
            continue
        try:
            found.append(
                _mig(
                    nvml,
                    handle,
                    mig_handle,
                    gi_profiles=gi_profiles,
                    minor=minor,
                    memory_bytes=memory_bytes,
                    mig_minors=mig_minors,
                )
            )
        except (nvml.NVMLError, _MigSkipped) as exc:
            calls.skipped.append(f"MIG device in slot {slot}: {exc}")
    return tuple(found)


class _MigSkipped(Exception):
    """A MIG device whose profile this probe cannot name."""


def _mig(
    nvml: Any,
    handle: Any,
    mig_handle: Any,
    *,
    gi_profiles: dict[int, Any],
    minor: int,
    memory_bytes: int,
    mig_minors: dict[_facts.MigMinorKey, int],
) -> _codec.ProbeMig:
    uuid = _text(nvml.nvmlDeviceGetUUID(mig_handle))
    gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(mig_handle))
    gi = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
    gi_info = nvml.nvmlGpuInstanceGetInfo(gi)
    ci_id = int(nvml.nvmlDeviceGetComputeInstanceId(mig_handle))
    ci_info = nvml.nvmlComputeInstanceGetInfo(nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))
    gi_index, gi_profile = next(
        ((i, p) for i, p in gi_profiles.items() if int(p.id) == int(gi_info.profileId)),
        (None, None),
    )
    ci_index = next(
        (
            index
            for index in range(_facts.COMPUTE_INSTANCE_PROFILE_COUNT)
            if _ci_profile_id(nvml, gi, index) == int(ci_info.profileId)
        ),
        None,
    )
    if gi_index is None or gi_profile is None or ci_index is None:
        raise _MigSkipped(
            f"{uuid}: no known profile has GPU instance profile id {int(gi_info.profileId)} "
            f"and compute instance profile id {int(ci_info.profileId)}"
        )
    mig_memory_mib = int(gi_profile.memorySizeMB)
    profile = _facts.mig_profile_name(
        gi_profile_index=gi_index,
        ci_profile_index=ci_index,
        mig_memory_mib=mig_memory_mib,
        device_memory_bytes=memory_bytes,
    )
    if profile is None:
        raise _MigSkipped(f"{uuid}: profile indices {gi_index}/{ci_index} are unknown")
    return _codec.ProbeMig(
        uuid=uuid,
        profile=profile,
        gi_profile_id=int(gi_profile.id),
        gi_id=int(gi_info.id),
        ci_id=int(ci_info.id),
        placement_start=int(gi_info.placement.start),
        placement_size=int(gi_info.placement.size),
        memory_bytes=mig_memory_mib * _facts.MIB,
        multiprocessors=int(gi_profile.multiprocessorCount),
        copy_engines=int(gi_profile.copyEngineCount),
        decoders=int(gi_profile.decoderCount),
        encoders=int(gi_profile.encoderCount),
        jpeg_engines=int(gi_profile.jpegCount),
        ofa_engines=int(gi_profile.ofaCount),
        gi_cap_minor=mig_minors.get((minor, int(gi_info.id), None)),
        ci_cap_minor=mig_minors.get((minor, int(gi_info.id), int(ci_info.id))),
    )


def _ci_profile_id(nvml: Any, gi: Any, index: int) -> int | None:
    try:
        info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, index, _ENGINE_PROFILE_SHARED, version=_LEGACY_PROFILE_INFO
        )
    except nvml.NVMLError:
        return None  # this GPU instance has no such compute profile
    return int(info.id)


def _read(directory: str, name: str) -> str | None:
    """A small sysfs/procfs file's text; None where the host does not have it."""
    try:
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return None


def _gpu(
    nvml: Any, handle: Any, *, index: int, uuid: str, name: str, use_versioned: bool
) -> _codec.ProbeGpu:
    # Errors meaning "this GPU/driver has no such call": not a failure, just no fabric.
    absent = (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)
    legacy_note = ""
    info = nvml.c_nvmlGpuFabricInfo_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except absent as exc:
        legacy_note = f"nvmlDeviceGetGpuFabricInfo: {exc}"
    else:
        if info.state != _FABRIC_STATE_NOT_SUPPORTED or not use_versioned:
            call = _codec.FabricCall.LEGACY
            return _from_info(info, index=index, uuid=uuid, name=name, call=call)
        legacy_note = "nvmlDeviceGetGpuFabricInfo: state NOT_SUPPORTED"
    if not use_versioned:
        return _codec.ProbeGpu(
            index=index,
            uuid=uuid,
            name=name,
            call=_codec.FabricCall.NONE,
            state=_FABRIC_STATE_NOT_SUPPORTED,
            note=legacy_note,
        )
    info_v = nvml.c_nvmlGpuFabricInfoV_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info_v))
    except absent as exc:
        return _codec.ProbeGpu(
            index=index,
            uuid=uuid,
            name=name,
            call=_codec.FabricCall.NONE,
            state=_FABRIC_STATE_NOT_SUPPORTED,
            note=f"{legacy_note}; nvmlDeviceGetGpuFabricInfoV: {exc}",
        )
    return _from_info(info_v, index=index, uuid=uuid, name=name, call=_codec.FabricCall.VERSIONED)


def _from_info(
    info: Any, *, index: int, uuid: str, name: str, call: _codec.FabricCall
) -> _codec.ProbeGpu:
    return _codec.ProbeGpu(
        index=index,
        uuid=uuid,
        name=name,
        call=call,
        state=int(info.state),
        cluster_uuid=bytes(info.clusterUuid),
        clique_id=int(info.cliqueId),
        status=int(info.status),
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":
    sys.exit(main())
