"""NvidiaSmiTimeSlicer against a stand-in nvidia-smi: a real child process per call.

The stand-in (`adapters.nvsmi.simulated`) records each argv and fails like the real tool for
a GPU it does not have, so these tests pin the exact command lines and the error mapping.
"""

from __future__ import annotations

import pathlib

import pytest

from adapters import nvsmi
from adapters.nvsmi import simulated
from core import errors, ports
from core.gpu import configs

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


@pytest.fixture
def smi_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    simulated.install(str(tmp_path / "bin"), gpu_uuids=(GPU_A, GPU_B))
    return tmp_path / "bin"


def _slicer(smi_dir: pathlib.Path) -> nvsmi.NvidiaSmiTimeSlicer:
    return nvsmi.NvidiaSmiTimeSlicer(str(smi_dir / "nvidia-smi"))


def test_the_slicer_is_a_time_slicer(smi_dir: pathlib.Path) -> None:
    slicer: ports.TimeSlicer = _slicer(smi_dir)
    assert "nvidia-smi" in repr(slicer)


@pytest.mark.parametrize(
    ("interval", "number"),
    [
        (configs.TimeSliceInterval.DEFAULT, "0"),
        (configs.TimeSliceInterval.SHORT, "1"),
        (configs.TimeSliceInterval.MEDIUM, "2"),
        (configs.TimeSliceInterval.LONG, "3"),
    ],
)
def test_each_interval_becomes_nvidia_smis_timeslice_number(
    smi_dir: pathlib.Path, interval: configs.TimeSliceInterval, number: str
) -> None:
    _slicer(smi_dir).set_time_slice((GPU_A,), interval)

    assert simulated.calls(str(smi_dir)) == (
        f"-i {GPU_A} -c DEFAULT",
        f"compute-policy -i {GPU_A} --set-timeslice {number}",
    )


def test_every_gpu_gets_compute_mode_default_before_any_time_slice(smi_dir: pathlib.Path) -> None:
    _slicer(smi_dir).set_time_slice((GPU_A, GPU_B), configs.TimeSliceInterval.LONG)

    assert simulated.calls(str(smi_dir)) == (
        f"-i {GPU_A} -c DEFAULT",
        f"-i {GPU_B} -c DEFAULT",
        f"compute-policy -i {GPU_A} --set-timeslice 3",
        f"compute-policy -i {GPU_B} --set-timeslice 3",
    )


def test_an_unknown_gpu_is_a_retryable_error_with_the_tools_output(smi_dir: pathlib.Path) -> None:
    unknown = "GPU-ffffffff-0000-0000-0000-00000000000f"

    with pytest.raises(errors.RetryableError) as raised:
        _slicer(smi_dir).set_time_slice((GPU_A, unknown), configs.TimeSliceInterval.SHORT)

    assert "No devices were found" in raised.value.message
    assert "exit code 6" in raised.value.message
    assert unknown in raised.value.message
    # Stopped at the failing GPU: no time-slice was set on any.
    assert not any("compute-policy" in call for call in simulated.calls(str(smi_dir)))


def test_no_gpus_runs_nothing(smi_dir: pathlib.Path) -> None:
    _slicer(smi_dir).set_time_slice((), configs.TimeSliceInterval.DEFAULT)

    assert simulated.calls(str(smi_dir)) == ()


def test_a_missing_nvidia_smi_is_a_permanent_error_naming_the_driver_root(
    tmp_path: pathlib.Path,
) -> None:
    slicer = nvsmi.NvidiaSmiTimeSlicer(str(tmp_path / "absent" / "nvidia-smi"))

    with pytest.raises(errors.PermanentError) as raised:
        slicer.set_time_slice((GPU_A,), configs.TimeSliceInterval.SHORT)

    assert "NVIDIA_DRIVER_ROOT" in raised.value.message


def test_a_hanging_nvidia_smi_is_a_retryable_timeout(tmp_path: pathlib.Path) -> None:
    hanging = tmp_path / "nvidia-smi"
    hanging.write_text("#!/bin/sh\nexec sleep 60\n", encoding="utf-8")
    hanging.chmod(0o755)

    with pytest.raises(errors.RetryableError, match=r"did not finish within 0\.2s"):
        nvsmi.NvidiaSmiTimeSlicer(str(hanging), timeout_s=0.2).set_time_slice(
            (GPU_A,), configs.TimeSliceInterval.SHORT
        )


def test_the_driver_library_is_preloaded_as_upstream_does(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = tmp_path / "nvidia-smi"
    recorder.write_text(f'#!/bin/sh\necho "$LD_PRELOAD" >> {tmp_path}/preload\n', encoding="utf-8")
    recorder.chmod(0o755)
    monkeypatch.setenv("LD_PRELOAD", "")
    # An empty file: the loader reports it cannot preload it and goes on, as the tool would.
    library = tmp_path / "libnvidia-ml.so.1"

    nvsmi.NvidiaSmiTimeSlicer(str(recorder), driver_library_path=str(library)).set_time_slice(
        (GPU_A,), configs.TimeSliceInterval.SHORT
    )

    assert (tmp_path / "preload").read_text(encoding="utf-8").splitlines() == [str(library)] * 2
