"""Child process creating or destroying one MIG device through NVML (dynamic MIG).

`python -m adapters.nvml.migctl create|destroy <gpu minor> <GI profile id> <placement start>`
prints one JSON line: `{"ok": true, "changed": <bool>}` or `{"ok": false, "error": "..."}`.
Like `adapters.nvml.probe` (the other module importing `pynvml`), it runs in its own process
so that an NVML crash or hang cannot take the plugin down. Written after NVML's MIG API
(and upstream's createMigDevice / deleteMigDevice); it needs a MIG-capable GPU to run.
"""

from __future__ import annotations

import ctypes
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

USAGE = "usage: migctl create|destroy <gpu minor> <GI profile id> <placement start>"


class Refused(Exception):
    """NVML cannot do what was asked (the message says why)."""


def main(argv: Sequence[str]) -> int:
    """Run one action; exit 0 whenever a JSON answer was printed, 2 on bad arguments."""
    if len(argv) != 4 or argv[0] not in ("create", "destroy"):
        print(USAGE, file=sys.stderr)
        return 2
    action, numbers = argv[0], argv[1:]
    try:
        minor, profile_id, start = (int(n) for n in numbers)
    except ValueError:
        print(USAGE, file=sys.stderr)
        return 2
    print(json.dumps(_run(action, minor=minor, profile_id=profile_id, start=start)), flush=True)
    return 0


def _run(action: str, *, minor: int, profile_id: int, start: int) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError as exc:
        return {"ok": False, "error": f"the pynvml Python package is not installed ({exc})"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"ok": False, "error": f"nvmlInit: {exc}"}
    try:
        handle = _handle_by_minor(pynvml, minor)
        if action == "create":
            _create(pynvml, handle, profile_id=profile_id, start=start)
            return {"ok": True, "changed": True}
        return {"ok": True, "changed": _destroy(pynvml, handle, profile_id=profile_id, start=start)}
    except (pynvml.NVMLError, Refused) as exc:
        return {"ok": False, "error": str(exc)}
    finally:
        pynvml.nvmlShutdown()


def _handle_by_minor(nvml: Any, minor: int) -> Any:
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        if int(nvml.nvmlDeviceGetMinorNumber(handle)) == minor:
            return handle
    raise Refused(f"no GPU with minor number {minor}")


def _gi_profile(nvml: Any, handle: Any, profile_id: int) -> Any:
    """The GPU instance profile info whose `id` is `profile_id` (found by profile index)."""
    for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except nvml.NVMLError:
            continue
        if int(info.id) == profile_id:
            return info
    raise Refused(f"the GPU has no GPU instance profile with id {profile_id}")


def _placement(nvml: Any, handle: Any, info: Any, start: int) -> Any:
    count = ctypes.c_uint(int(info.instanceCount))
    placements = (nvml.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, info.id, placements, ctypes.byref(count)
    )
    for placement in placements[: count.value]:
        if int(placement.start) == start:
            return placement
    starts = [int(p.start) for p in placements[: count.value]]
    raise Refused(f"GPU instance profile {info.id} has no placement at {start} (starts: {starts})")


def _create(nvml: Any, handle: Any, *, profile_id: int, start: int) -> None:
    current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    if int(current) != nvml.NVML_DEVICE_MIG_ENABLE:
        nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_ENABLE)
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        if int(current) != nvml.NVML_DEVICE_MIG_ENABLE:
            raise Refused("MIG mode is pending until the GPU is reset; reset it and retry")
    info = _gi_profile(nvml, handle, profile_id)
    gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, info.id, _placement(nvml, handle, info, start)
    )
    try:
        ci_info = _full_ci_profile(nvml, gpu_instance, slices=int(info.sliceCount))
        nvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, ci_info.id)
    except BaseException:
        nvml.nvmlGpuInstanceDestroy(gpu_instance)  # NB: no half-made device left behind
        raise


def _full_ci_profile(nvml: Any, gpu_instance: Any, *, slices: int) -> Any:
    """The compute instance profile taking every compute slice of the GPU instance."""
    for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        if index == nvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1:
            continue
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, index, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except nvml.NVMLError:
            continue
        if int(info.sliceCount) == slices:
            return info
    raise Refused(f"no compute instance profile fills a {slices}-slice GPU instance")


def _destroy(nvml: Any, handle: Any, *, profile_id: int, start: int) -> bool:
    current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    if int(current) != nvml.NVML_DEVICE_MIG_ENABLE:
        return False  # MIG off: no MIG device can exist (as upstream treats NOT_SUPPORTED)
    info = _gi_profile(nvml, handle, profile_id)
    count = ctypes.c_uint(int(info.instanceCount))
    instances = (nvml.c_nvmlGpuInstance_t * max(1, count.value))()
    nvml.nvmlDeviceGetGpuInstances(handle, info.id, instances, ctypes.byref(count))
    for gpu_instance in instances[: count.value]:
        if int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).placement.start) != start:
            continue
        for ci_profile in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            for compute_instance in _compute_instances(nvml, gpu_instance, ci_profile):
                nvml.nvmlComputeInstanceDestroy(compute_instance)
        nvml.nvmlGpuInstanceDestroy(gpu_instance)
        _leave_mig_mode_if_empty(nvml, handle)
        return True
    return False


def _compute_instances(nvml: Any, gpu_instance: Any, ci_profile: int) -> list[Any]:
    try:
        info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gpu_instance, ci_profile, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        )
    except nvml.NVMLError:
        return []
    count = ctypes.c_uint(int(info.instanceCount))
    found = (nvml.c_nvmlComputeInstance_t * max(1, count.value))()
    nvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, found, ctypes.byref(count))
    return list(found[: count.value])


def _leave_mig_mode_if_empty(nvml: Any, handle: Any) -> None:
    """Leave MIG mode once no GPU instance is left, on Hopper and later only (no reset)."""
    if int(nvml.nvmlDeviceGetArchitecture(handle)) < nvml.NVML_DEVICE_ARCH_HOPPER:
        return
    for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except nvml.NVMLError:
            continue
        count = ctypes.c_uint(int(info.instanceCount))
        instances = (nvml.c_nvmlGpuInstance_t * max(1, count.value))()
        nvml.nvmlDeviceGetGpuInstances(handle, info.id, instances, ctypes.byref(count))
        if count.value:
            return
    nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_DISABLE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
