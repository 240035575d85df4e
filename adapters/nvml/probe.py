"""The NVML probe: run as `python -m adapters.nvml.probe` in a child process, prints one JSON line.

NVML is a C library reached through ctypes; a bad call segfaults or hangs the whole
process (the versioned `nvmlDeviceGetGpuFabricInfoV` did so through pynvml on an H100
with driver 580). So the plugin never calls NVML itself: it runs this module as a child
and reads its report (`adapters.nvml._codec`); a crash or hang here is only a failed
probe there.

Fabric info: the legacy `nvmlDeviceGetGpuFabricInfo` is tried first. The versioned call
is tried only when `NVML_FABRIC_INFO_V=1` and the legacy call is missing, unsupported or
reports NOT_SUPPORTED.

The only module that imports `pynvml`. Exit status is 0 whenever a JSON report (success
or failure) was printed.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from typing import Any

from adapters.nvml import _codec

FABRIC_INFO_V_ENV = "NVML_FABRIC_INFO_V"
_FABRIC_STATE_NOT_SUPPORTED = 0


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
        return _report(pynvml, use_versioned=os.environ.get(FABRIC_INFO_V_ENV) == "1")
    except pynvml.NVMLError as exc:
        return _codec.ProbeFailure(reason=_codec.FailureReason.NVML_ERROR, message=str(exc))
    finally:
        pynvml.nvmlShutdown()


def _report(nvml: Any, *, use_versioned: bool) -> _codec.ProbeReport:
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            _gpu(
                nvml,
                handle,
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                name=_text(nvml.nvmlDeviceGetName(handle)),
                use_versioned=use_versioned,
            )
        )
    return _codec.ProbeReport(
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()), gpus=tuple(gpus)
    )


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
