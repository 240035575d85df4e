"""The real probe module against a stand-in `pynvml` that behaves like an H100 on driver 580.

The stand-in (written to `tmp_path` and put first on the child's PYTHONPATH) answers the
legacy fabric-info call with state NOT_SUPPORTED and segfaults in the versioned call, as
the real library did. This pins: legacy first; the versioned call only when
NVML_FABRIC_INFO_V=1; and its crash surfaces as an error, not a dead plugin.
"""

from __future__ import annotations

import os
import pathlib
import textwrap

import pytest

from adapters import nvml
from adapters.nvml import real
from core import models
from core.computedomain import cliques

FAKE_PYNVML = textwrap.dedent(
    '''
    """Stand-in for pynvml: an H100 node (driver 580) with {gpus} GPUs; {mode} fabric."""
    import ctypes, os, signal

    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value
        def __str__(self):
            return {{9: "Driver Not Loaded", 3: "Not Supported"}}.get(self.value, "Unknown")

    class NVMLError_NotSupported(NVMLError):
        def __init__(self):
            super().__init__(3)

    class NVMLError_FunctionNotFound(NVMLError):
        def __init__(self):
            super().__init__(13)

    class c_nvmlGpuFabricInfo_t(ctypes.Structure):
        _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_int),
                    ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]

    class c_nvmlGpuFabricInfoV_t(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16),
                    ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint32),
                    ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]

    def nvmlInit():
        if "{mode}" == "no-driver":
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown():
        pass

    def nvmlSystemGetDriverVersion():
        return "580.95.05"

    def nvmlDeviceGetCount():
        return {gpus}

    def nvmlDeviceGetHandleByIndex(index):
        return index

    def nvmlDeviceGetUUID(handle):
        return "GPU-%08d-0000-0000-0000-000000000000" % handle

    def nvmlDeviceGetName(handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetGpuFabricInfo(handle, info_ref):
        if "{mode}" == "legacy-missing":
            raise NVMLError_FunctionNotFound()
        info = info_ref._obj
        info.state = 3 if "{mode}" == "gb200" else 0
        if "{mode}" == "gb200":
            info.clusterUuid[:] = list(range(16))
            info.cliqueId = 32766

    def nvmlDeviceGetGpuFabricInfoV(handle, info_ref):
        os.kill(os.getpid(), signal.SIGSEGV)
    '''
)


def _inventory(
    tmp_path: pathlib.Path, *, mode: str, gpus: int = 8, versioned: bool = False
) -> nvml.NvmlInventory:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML.format(mode=mode, gpus=gpus))
    env = {key: value for key, value in os.environ.items() if key != "NVML_FABRIC_INFO_V"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), real._IMPORT_ROOT])
    if versioned:
        env["NVML_FABRIC_INFO_V"] = "1"
    return nvml.NvmlInventory(env=env, timeout_s=30)


def test_legacy_call_reporting_not_supported_gives_no_clique(tmp_path: pathlib.Path) -> None:
    inventory = _inventory(tmp_path, mode="h100")
    report = inventory.probe()
    assert report.driver_version == "580.95.05"
    assert {gpu.name for gpu in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    records = inventory.fabric_records()
    assert len(records) == 8
    assert {r.state for r in records} == {models.FabricState.NOT_SUPPORTED}
    assert cliques.clique_id_from_fabric(records) == ""


def test_versioned_call_is_not_made_unless_enabled(tmp_path: pathlib.Path) -> None:
    # The stand-in's versioned call segfaults: reaching it would fail this test.
    inventory = _inventory(tmp_path, mode="legacy-missing")
    records = inventory.fabric_records()
    assert {r.state for r in records} == {models.FabricState.NOT_SUPPORTED}
    assert {gpu.call.value for gpu in inventory.probe().gpus} == {"none"}


def test_enabled_versioned_call_that_segfaults_is_an_error_not_a_crash(
    tmp_path: pathlib.Path,
) -> None:
    inventory = _inventory(tmp_path, mode="h100", versioned=True)
    with pytest.raises(nvml.NvmlProbeFailed, match="crashed with SIGSEGV"):
        inventory.fabric_records()


def test_legacy_call_reports_a_gb200_clique(tmp_path: pathlib.Path) -> None:
    records = _inventory(tmp_path, mode="gb200", gpus=4).fabric_records()
    assert cliques.clique_id_from_fabric(records) == "00010203-0405-0607-0809-0a0b0c0d0e0f.32766"


def test_driver_not_loaded_is_nvml_unavailable(tmp_path: pathlib.Path) -> None:
    with pytest.raises(nvml.NvmlUnavailable, match="Driver Not Loaded"):
        _inventory(tmp_path, mode="no-driver").fabric_records()


def test_driver_version_is_what_nvml_reports(tmp_path: pathlib.Path) -> None:
    assert _inventory(tmp_path, mode="h100").driver_version() == "580.95.05"
