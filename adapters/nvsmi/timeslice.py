"""Time-slicing of full GPUs through `nvidia-smi`, as the upstream driver applies it.

For each claim's GPUs the compute mode is first set to DEFAULT (`nvidia-smi -i <uuid> -c
DEFAULT`: a GPU left in EXCLUSIVE_PROCESS by MPS would refuse other clients), then the
interval (`nvidia-smi compute-policy -i <uuid> --set-timeslice <n>`). One child process per
GPU and step, each with a timeout. The same tool sets the compute mode MPS needs
(`set_compute_mode`: EXCLUSIVE_PROCESS while a claim's control daemon runs, DEFAULT after).
"""

from __future__ import annotations

import logging
import os
import subprocess

from core import errors
from core.gpu import configs, mps

log = logging.getLogger(__name__)

# nvidia-smi's --set-timeslice numbers for the config's intervals (upstream `Int()`).
TIMESLICE_NUMBERS: dict[configs.TimeSliceInterval, int] = {
    configs.TimeSliceInterval.DEFAULT: 0,
    configs.TimeSliceInterval.SHORT: 1,
    configs.TimeSliceInterval.MEDIUM: 2,
    configs.TimeSliceInterval.LONG: 3,
}
COMPUTE_MODE_DEFAULT = "DEFAULT"


class NvidiaSmiTimeSlicer:
    """`core.ports.TimeSlicer` and `core.ports.ComputeModeSetter` running the driver's nvidia-smi.

    `driver_library_path` (libnvidia-ml.so.1 under the driver root) is preloaded, as upstream
    does, so that an nvidia-smi taken from the driver root finds its NVML in the container.
    """

    def __init__(
        self,
        nvidia_smi: str,
        *,
        driver_library_path: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self._nvidia_smi = nvidia_smi
        self._driver_library_path = driver_library_path
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"NvidiaSmiTimeSlicer(nvidia_smi={self._nvidia_smi!r})"

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: configs.TimeSliceInterval
    ) -> None:
        """Set compute mode DEFAULT, then the interval, on every GPU (in the order given).

        RetryableError with the tool's output when it fails or times out; PermanentError when
        nvidia-smi cannot be run at all.
        """
        number = TIMESLICE_NUMBERS[interval]
        for uuid in gpu_uuids:
            self._run(("-i", uuid, "-c", COMPUTE_MODE_DEFAULT), purpose="set compute mode")
        for uuid in gpu_uuids:
            self._run(
                ("compute-policy", "-i", uuid, "--set-timeslice", str(number)),
                purpose=f"set time-slice {interval.value}",
            )
        log.info(
            "event=time_slice_set gpus=%s interval=%s number=%d",
            ",".join(gpu_uuids),
            interval.value,
            number,
        )

    def set_compute_mode(self, gpu_uuids: tuple[str, ...], mode: mps.ComputeMode) -> None:
        """`nvidia-smi -i <uuid> -c <mode>` on every GPU, in the order given (idempotent).

        RetryableError with the tool's output when it fails or times out; PermanentError when
        nvidia-smi cannot be run at all.
        """
        for uuid in gpu_uuids:
            self._run(("-i", uuid, "-c", mode.value), purpose=f"set compute mode {mode.value}")
        log.info("event=compute_mode_set gpus=%s mode=%s", ",".join(gpu_uuids), mode.value)

    def _run(self, args: tuple[str, ...], *, purpose: str) -> None:
        argv = [self._nvidia_smi, *args]
        command = " ".join(argv)
        try:
            done = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=self._timeout_s,
                env=self._environment(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise errors.RetryableError(
                f"{command} ({purpose}) did not finish within {self._timeout_s:g}s; the GPU "
                "or its driver may be busy: the kubelet retries the prepare"
            ) from None
        except OSError as exc:
            raise errors.PermanentError(
                f"cannot run {self._nvidia_smi} to {purpose} ({exc.strerror or exc}); time-"
                "slicing needs the driver's nvidia-smi: check nvidiaDriverRoot / "
                "NVIDIA_DRIVER_ROOT points at the driver installation"
            ) from exc
        if done.returncode != 0:
            output = done.stdout.strip()[:500] or "no output"
            raise errors.RetryableError(
                f"{command} ({purpose}) failed with exit code {done.returncode}: {output}"
            )

    def _environment(self) -> dict[str, str] | None:
        if self._driver_library_path is None:
            return None
        environment = dict(os.environ)
        preload = environment.get("LD_PRELOAD", "")
        environment["LD_PRELOAD"] = ":".join(
            part for part in (self._driver_library_path, preload) if part
        )
        return environment
