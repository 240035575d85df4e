"""The real probe's GPU details, against a stand-in `pynvml` shaped like an A100 MIG node.

As in test_nvml_probe_fake_library.py, the stand-in is written to `tmp_path` and put first
on the child's PYTHONPATH; a fake host tree (sysfs links, numa_node files, the
nvidia-caps mig-minors file) sits under NVML_PROBE_HOST_ROOT. GPU 0 is in MIG mode with
a 3g.20gb and a 1g.5gb device, an empty slot, and a device of a profile no table knows;
GPU 1 is not in MIG mode and answers NOT_SUPPORTED to brand and module id (both to
addressing mode). This
pins: facts read and named as upstream does; unsupported calls degrade to empty fields
named in `skipped_calls`; the fabric records the ComputeDomain half reads are unchanged.
"""

from __future__ import annotations

import os
import pathlib
import textwrap

import pytest

from adapters import nvml
from adapters.nvml import probe, real
from core import models, ports
from core.gpu import devices, migprofiles

FAKE_PYNVML = textwrap.dedent(
    '''
    """Stand-in for pynvml: 2 x A100-SXM4-40GB, GPU 0 in MIG mode ({mode})."""
    import ctypes, types

    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value
        def __str__(self):
            return {{3: "Not Supported", 6: "Not Found", 2: "Invalid Argument"}}.get(
                self.value, "Unknown Error")

    class NVMLError_NotSupported(NVMLError):
        def __init__(self):
            super().__init__(3)

    class NVMLError_FunctionNotFound(NVMLError):
        def __init__(self):
            super().__init__(13)

    def _ns(**kw):
        return types.SimpleNamespace(**kw)

    # A100-40GB GPU instance profiles by NVML profile index: (id, memory MiB, SMs, CE, DEC).
    GI_PROFILES = {{0: (19, 4864, 14, 1, 0), 1: (14, 9856, 28, 2, 1), 2: (9, 19968, 42, 3, 2),
                   3: (5, 19968, 56, 4, 2), 4: (0, 40192, 98, 7, 5), 9: (15, 9856, 14, 1, 1)}}
    # Existing MIG devices of GPU 0 by slot: (GI id, GI profile id, start, size); slot 1 empty;
    # slot 3 has a GI profile id (77) no profile table knows.
    MIGS = {{0: (2, 9, 4, 4), 2: (9, 19, 2, 1), 3: (13, 77, 6, 1)}}

    def nvmlInit():
        pass

    def nvmlShutdown():
        pass

    def nvmlSystemGetDriverVersion():
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion():
        if "{mode}" == "no-cuda-version":
            raise NVMLError_NotSupported()
        return 13000

    def nvmlDeviceGetCount():
        return 2

    def nvmlDeviceGetHandleByIndex(index):
        return ("gpu", index)

    def nvmlDeviceGetUUID(handle):
        if handle[0] == "mig":
            return "MIG-%08d-0000-0000-0000-000000000000" % handle[2]
        return "GPU-%08d-0000-0000-0000-000000000000" % handle[1]

    def nvmlDeviceGetName(handle):
        return b"NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetGpuFabricInfo(handle, info_ref):
        info_ref._obj.state = 0

    class c_nvmlGpuFabricInfo_t(ctypes.Structure):
        _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_int),
                    ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]

    def nvmlDeviceGetMinorNumber(handle):
        return 4 + handle[1]  # minors need not be indices

    def nvmlDeviceGetBrand(handle):
        if handle[1] == 1:
            raise NVMLError_NotSupported()
        return 14

    def nvmlDeviceGetArchitecture(handle):
        return 7

    def nvmlDeviceGetCudaComputeCapability(handle):
        return (8, 0)

    def nvmlDeviceGetPciInfo(handle):
        return _ns(busId=[b"00000000:07:00.0", b"00000000:0F:00.0"][handle[1]])

    def nvmlDeviceGetMemoryInfo(handle):
        return _ns(total=40960 * 2**20)

    def nvmlDeviceGetAddressingMode(handle):
        raise NVMLError_NotSupported()

    def nvmlDeviceGetMigMode(handle):
        return [1, 1] if handle[1] == 0 else [0, 0]

    def nvmlDeviceGetModuleId(handle):
        if handle[1] != 0:
            raise NVMLError_NotSupported()
        return 3

    def nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version=2):
        if profile not in GI_PROFILES:
            raise NVMLError(2)
        pid, mem, sms, ce, dec = GI_PROFILES[profile]
        return _ns(id=pid, memorySizeMB=mem, multiprocessorCount=sms, copyEngineCount=ce,
                   decoderCount=dec, encoderCount=0, jpegCount=0, ofaCount=0)

    def nvmlDeviceGetMaxMigDeviceCount(handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(handle, slot):
        if slot not in MIGS:
            raise NVMLError(6)
        return ("mig", handle[1], slot)

    def nvmlDeviceGetGpuInstanceId(mig):
        return MIGS[mig[2]][0]

    def nvmlDeviceGetComputeInstanceId(mig):
        return 0

    def nvmlDeviceGetGpuInstanceById(handle, gi_id):
        return next(slot for slot, m in MIGS.items() if m[0] == gi_id)

    def nvmlGpuInstanceGetInfo(slot):
        gi_id, profile_id, start, size = MIGS[slot]
        return _ns(id=gi_id, profileId=profile_id, placement=_ns(start=start, size=size))

    def nvmlGpuInstanceGetComputeInstanceById(slot, ci_id):
        return (slot, ci_id)

    def nvmlComputeInstanceGetInfo(ci):
        # The full-GPU-instance compute profile: its id is the CI profile index of the slices.
        return _ns(id=ci[1], profileId={{0: 2, 2: 0, 3: 0}}[ci[0]] + 100)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(slot, profile, eng, version=2):
        return _ns(id=profile + 100)
    '''
)

MIG_MINORS = "config 1\nmonitor 2\ngpu4/gi2/access 557\ngpu4/gi2/ci0/access 558\n"


def _host(tmp_path: pathlib.Path) -> pathlib.Path:
    host = tmp_path / "host"
    for bus_id, root, numa in (("0000:07:00.0", "pci0000:00", "0"), ("0000:0f:00.0", "", "-1")):
        device = host / "sys/devices" / (root or "platform") / "0000:00:01.0" / bus_id
        device.mkdir(parents=True)
        (device / "numa_node").write_text(numa + "\n")
        link = host / "sys/bus/pci/devices" / bus_id
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(device)
    caps = host / "proc/driver/nvidia-caps"
    caps.mkdir(parents=True)
    (caps / "mig-minors").write_text(MIG_MINORS)
    return host


def _inventory(tmp_path: pathlib.Path, *, mode: str = "a100") -> nvml.NvmlInventory:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML.format(mode=mode))
    env = {key: value for key, value in os.environ.items() if key != "NVML_FABRIC_INFO_V"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), real._IMPORT_ROOT])
    env[probe.HOST_ROOT_ENV] = str(_host(tmp_path))
    return nvml.NvmlInventory(env=env, timeout_s=30)


def test_gpus_are_reported_with_upstreams_facts(tmp_path: pathlib.Path) -> None:
    discovery: ports.GpuDiscovery = _inventory(tmp_path)
    gpu0, gpu1 = discovery.gpu_inventory().gpus
    assert gpu0 == devices.GpuInfo(
        minor=4,
        index=0,
        uuid="GPU-00000000-0000-0000-0000-000000000000",
        product_name="NVIDIA A100-SXM4-40GB",
        brand="Nvidia",
        architecture="Ampere",
        cuda_compute_capability="8.0",
        driver_version="580.65.06",
        cuda_driver_version="13.0",
        pci_bus_id="0000:07:00.0",
        memory_bytes=40960 * 2**20,
        pcie_root="pci0000:00",
        numa_node=0,
        mig_capable=True,
        mig_enabled=True,
        addressing_mode=None,
        mig_profiles=migprofiles.A100_40GB,
        module_id=3,
    )
    assert (gpu1.name, gpu1.pci_bus_id, gpu1.mig_enabled) == ("gpu-5", "0000:0f:00.0", False)


def test_unsupported_calls_leave_fields_empty_and_are_named(tmp_path: pathlib.Path) -> None:
    inventory = _inventory(tmp_path)
    gpu1 = inventory.probe().gpus[1]
    assert gpu1.brand is None
    assert "nvmlDeviceGetBrand: Not Supported" in gpu1.skipped_calls
    assert gpu1.addressing_mode is None
    assert not any("AddressingMode" in s for s in gpu1.skipped_calls)  # normal on x86: no noise
    # No board position off an NVSwitch baseboard: normal too, so no noise either.
    assert gpu1.module_id is None
    assert not any("ModuleId" in s for s in gpu1.skipped_calls)
    # No PCIe root complex in its sysfs path, and NUMA node -1: both unknown, not errors.
    assert (gpu1.pcie_root, gpu1.numa_node) == (None, None)
    assert inventory.gpu_inventory().gpus[1].brand == "Unknown"


def test_existing_mig_devices_are_walked_and_named(tmp_path: pathlib.Path) -> None:
    inventory = _inventory(tmp_path)
    migs = inventory.gpu_inventory().migs
    assert [mig.name for mig in migs] == ["gpu-4-mig-3g20gb-9-4", "gpu-4-mig-1g5gb-19-2"]
    three_g = migs[0]
    assert three_g == devices.MigDeviceInfo(
        uuid="MIG-00000000-0000-0000-0000-000000000000",
        profile="3g.20gb",
        parent_uuid="GPU-00000000-0000-0000-0000-000000000000",
        parent_minor=4,
        gi_profile_id=9,
        gi_id=2,
        ci_id=0,
        placement_start=4,
        placement_size=4,
        memory_bytes=19968 * 2**20,
        multiprocessors=42,
        copy_engines=3,
        decoders=2,
        gi_cap_minor=557,
        ci_cap_minor=558,
    )
    assert (migs[1].gi_cap_minor, migs[1].ci_cap_minor) == (None, None)  # not in mig-minors
    skipped = inventory.probe().gpus[0].skipped_calls
    assert any("MIG device in slot 3" in s and "GPU instance profile id 77" in s for s in skipped)


def test_fabric_records_are_unchanged_by_the_gpu_details(tmp_path: pathlib.Path) -> None:
    records = _inventory(tmp_path).fabric_records()
    assert len(records) == 2
    assert {record.state for record in records} == {models.FabricState.NOT_SUPPORTED}


def test_missing_cuda_driver_version_fails_the_gpu_inventory_only(
    tmp_path: pathlib.Path,
) -> None:
    inventory = _inventory(tmp_path, mode="no-cuda-version")
    assert len(inventory.fabric_records()) == 2
    with pytest.raises(nvml.NvmlProbeFailed, match="could not read cuda_driver_version"):
        inventory.gpu_inventory()
