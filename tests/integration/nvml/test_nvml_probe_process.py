"""The real NVML adapter's child-process probe, and how it survives a probe that misbehaves.

On a machine without libnvidia-ml the real probe must report "NVML unavailable" and
nothing else; stand-in probe commands show that a segfault, a hang, a non-zero exit or
garbage output in the child become `NvmlProbeFailed` in the caller, never a crash.
On a GPU host the last test checks what real NVML reports.
"""

from __future__ import annotations

import ctypes.util
import pathlib
import re
import signal
import sys
import time

import pytest

from adapters import nvml
from adapters.nvml import _codec
from core import models, ports
from core.computedomain import cliques

HAS_NVML = ctypes.util.find_library("nvidia-ml") is not None


def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


@pytest.mark.skipif(HAS_NVML, reason="this host has libnvidia-ml")
def test_real_probe_without_nvml_reports_nvml_unavailable() -> None:
    inventory: ports.DeviceInventory = nvml.NvmlInventory()
    with pytest.raises(nvml.NvmlUnavailable, match="NVML is not available on this node") as caught:
        inventory.fabric_records()
    assert "NVML Shared Library Not Found" in caught.value.message
    assert "--nvml=simulated:<profile>" in caught.value.message


def test_probe_that_segfaults_is_reported_not_fatal() -> None:
    crashing = nvml.NvmlInventory(
        probe_command=_python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    )
    with pytest.raises(nvml.NvmlProbeFailed, match="crashed with SIGSEGV") as caught:
        crashing.fabric_records()
    assert "NVML_FABRIC_INFO_V" in caught.value.message


def test_probe_that_hangs_is_killed_after_the_timeout() -> None:
    hanging = nvml.NvmlInventory(
        probe_command=_python("import time; time.sleep(60)"), timeout_s=0.5
    )
    started = time.monotonic()
    with pytest.raises(nvml.NvmlProbeFailed, match=r"did not answer within 0\.5s"):
        hanging.fabric_records()
    assert time.monotonic() - started < 10


def test_probe_that_exits_nonzero_is_reported_with_its_stderr() -> None:
    failing = nvml.NvmlInventory(
        probe_command=_python("import sys; sys.stderr.write('boom from probe'); sys.exit(3)")
    )
    with pytest.raises(nvml.NvmlProbeFailed, match=r"exited with status 3.*boom from probe"):
        failing.fabric_records()


def test_probe_that_prints_garbage_is_reported() -> None:
    garbage = nvml.NvmlInventory(probe_command=_python("print('hello')"))
    with pytest.raises(nvml.NvmlProbeFailed, match="printed no readable report"):
        garbage.fabric_records()


def test_probe_command_that_cannot_start_is_reported() -> None:
    missing = nvml.NvmlInventory(probe_command=("/nonexistent/nvml-probe",))
    with pytest.raises(nvml.NvmlProbeFailed, match="cannot start the NVML probe"):
        missing.fabric_records()


def test_probe_nvml_error_is_reported_as_probe_failure() -> None:
    failure = _codec.ProbeFailure(
        reason=_codec.FailureReason.NVML_ERROR, message="nvmlDeviceGetCount: GPU is lost"
    )
    printing = _python(f"print({_codec.encode_failure(failure)!r})")
    stand_in = nvml.NvmlInventory(probe_command=printing)
    with pytest.raises(nvml.NvmlProbeFailed, match="nvml-error: nvmlDeviceGetCount: GPU is lost"):
        stand_in.fabric_records()


def test_probe_report_becomes_fabric_records() -> None:
    report = _codec.ProbeReport(
        driver_version="580.65.06",
        gpus=(
            _codec.ProbeGpu(
                index=0,
                uuid="GPU-1",
                name="NVIDIA GB200",
                call=_codec.FabricCall.LEGACY,
                state=3,
                cluster_uuid=bytes(range(16)),
                clique_id=32766,
            ),
        ),
    )
    stand_in = nvml.NvmlInventory(probe_command=_python(f"print({_codec.encode_report(report)!r})"))
    assert cliques.clique_id_from_fabric(stand_in.fabric_records()) == (
        "00010203-0405-0607-0809-0a0b0c0d0e0f.32766"
    )


def test_signal_names_are_readable_for_other_crashes() -> None:
    aborting = nvml.NvmlInventory(
        probe_command=_python(f"import os; os.kill(os.getpid(), {int(signal.SIGABRT)})")
    )
    with pytest.raises(nvml.NvmlProbeFailed, match="crashed with SIGABRT"):
        aborting.fabric_records()


@pytest.mark.skipif(not HAS_NVML, reason="needs an NVIDIA GPU host with libnvidia-ml")
def test_real_probe_on_a_gpu_host_reports_every_gpu() -> None:
    inventory = nvml.NvmlInventory()
    report = inventory.probe()
    print(_codec.encode_report(report))  # what this GPU host reported, for the record
    records = inventory.fabric_records()
    assert records
    assert all(re.fullmatch(r"GPU-[0-9a-f-]{36}", r.gpu_uuid) for r in records)
    assert all(isinstance(r.state, models.FabricState) for r in records)
    clique = cliques.clique_id_from_fabric(records)
    assert clique == "" or re.fullmatch(r"[0-9a-f-]{36}\.\d+", clique)


def test_probe_child_loads_nvml_from_the_mounted_driver_root(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "driver-root"
    for library_dir in ("usr/lib64", "usr/lib/x86_64-linux-gnu"):
        (root / library_dir).mkdir(parents=True)
    seen = tmp_path / "seen"
    code = (
        f"import os; open({str(seen)!r}, 'w').write(os.environ.get('LD_LIBRARY_PATH', ''))"
    )
    inventory = nvml.NvmlInventory(
        probe_command=_python(code), driver_root=str(root), env={"LD_LIBRARY_PATH": "/opt/x"}
    )
    with pytest.raises(nvml.NvmlProbeFailed):
        inventory.fabric_records()  # the stand-in prints no report
    assert seen.read_text().split(":") == [
        str(root / "usr/lib64"), str(root / "usr/lib/x86_64-linux-gnu"), str(root / "usr/lib"),
        "/opt/x",
    ]


def test_probe_child_keeps_the_loader_path_for_the_root_driver_root(
    tmp_path: pathlib.Path,
) -> None:
    seen = tmp_path / "seen"
    code = f"import os; open({str(seen)!r}, 'w').write(os.environ.get('LD_LIBRARY_PATH', '-'))"
    inventory = nvml.NvmlInventory(probe_command=_python(code), driver_root="/", env={})
    with pytest.raises(nvml.NvmlProbeFailed):
        inventory.fabric_records()
    assert seen.read_text() == "-"


def test_the_real_inventory_spec_passes_the_driver_root_on() -> None:
    inventory = nvml.inventory_from_spec("real", node_name="n", driver_root="/driver-root")
    assert isinstance(inventory, nvml.NvmlInventory)
    assert inventory.driver_root == "/driver-root"
