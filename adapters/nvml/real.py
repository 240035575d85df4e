"""The node's real GPUs, read through NVML in a child process that may crash without us.

`NvmlInventory` serves both halves from one probe: fabric records (`core.ports.DeviceInventory`)
for the ComputeDomain half and the GPU inventory (`core.ports.GpuDiscovery`) for the GPU half.
It runs `adapters.nvml.probe` (or an injected command) with a timeout and
turns every way it can go wrong into a typed error with a message an operator can act
on: NVML missing (`NvmlUnavailable`: no driver here; the app may treat it as "no GPUs"),
or the probe crashing, hanging or answering nonsense (`NvmlProbeFailed`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

from adapters.driverlib import child
from adapters.nvml import _codec
from core import errors, models
from core.gpu import devices

logger = logging.getLogger(__name__)

DEFAULT_PROBE_TIMEOUT_S = 30.0
PROBE_MODULE = "adapters.nvml.probe"
_STDERR_TAIL_CHARS = 800
_IMPORT_ROOT = child.IMPORT_ROOT


class NvmlError(errors.DriverError):
    """NVML could not tell us the node's GPUs."""


class NvmlUnavailable(NvmlError):
    """No usable NVML on this node (library or driver missing): there are no GPUs to see."""


class NvmlProbeFailed(NvmlError):
    """The NVML probe crashed, hung, failed an NVML call, or printed an unreadable report."""


# Where a driver root holds libnvidia-ml.so.1 (shared with every driver-library child).
DRIVER_LIBRARY_DIRS = child.LIBRARY_DIRS
driver_library_dirs = child.library_dirs
child_env = child.child_env
_signal_name = child.signal_name


def default_probe_command() -> tuple[str, ...]:
    return (sys.executable, "-m", PROBE_MODULE)


class NvmlInventory:
    """`core.ports.DeviceInventory` and `core.ports.GpuDiscovery` over real NVML.

    NVML is probed in a child process per call.

    `probe_command` replaces the child (tests inject stand-ins that crash or hang);
    `env` replaces the child's environment (default: ours, with this package importable;
    `NVML_FABRIC_INFO_V=1` there opts in to the versioned fabric-info call).
    `driver_root` is where the host's driver is mounted (the chart mounts it at
    `/driver-root`); unless it is "/", its library directories lead the child's
    LD_LIBRARY_PATH so that the child's NVML loads the host's libnvidia-ml.so.1.
    """

    def __init__(
        self,
        *,
        probe_command: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        driver_root: str = "/",
    ) -> None:
        self.probe_command = tuple(probe_command or default_probe_command())
        self.timeout_s = timeout_s
        self.driver_root = driver_root
        self._env = dict(env) if env is not None else None

    def __repr__(self) -> str:
        return f"NvmlInventory(probe_command={self.probe_command!r}, timeout_s={self.timeout_s})"

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        """One record per GPU, sorted by UUID. Raises NvmlUnavailable or NvmlProbeFailed."""
        report = self.probe()
        try:
            return _codec.fabric_records(report)
        except _codec.ProbeOutputError as exc:
            raise NvmlProbeFailed(f"NVML probe report is not usable: {exc}") from exc

    def driver_version(self) -> str:
        """What nvmlSystemGetDriverVersion reports. Raises as `fabric_records` does."""
        return self.probe().driver_version

    def gpu_inventory(self) -> devices.GpuInventory:
        """Every GPU and existing MIG device (no VFIO functions: sysfs discovery adds those).

        Raises NvmlUnavailable or NvmlProbeFailed, as `fabric_records` does; NVML calls a GPU
        does not support only leave fields empty (each logged as a warning).
        """
        report = self.probe()
        for gpu in report.gpus:
            for skipped in gpu.skipped_calls:
                logger.warning("event=nvml_call_skipped gpu=%s call=%r", gpu.uuid, skipped)
        try:
            return _codec.gpu_inventory(report)
        except _codec.ProbeOutputError as exc:
            raise NvmlProbeFailed(f"NVML probe report is not usable: {exc}") from exc

    def probe(self) -> _codec.ProbeReport:
        """The full probe report (driver version, GPU names, which call answered)."""
        command_text = " ".join(self.probe_command)
        stdout, stderr, returncode = self._run_probe(command_text)
        stderr_tail = stderr.strip()[-_STDERR_TAIL_CHARS:]
        if returncode < 0:
            raise NvmlProbeFailed(
                f"NVML probe crashed with {_signal_name(-returncode)} (command: {command_text}); "
                "the NVIDIA driver's NVML library failed inside a call. If NVML_FABRIC_INFO_V=1 "
                "is set, unset it (the versioned fabric-info call has crashed on some drivers); "
                f"otherwise check the driver with nvidia-smi. stderr: {stderr_tail or '(empty)'}"
            )
        if returncode != 0:
            raise NvmlProbeFailed(
                f"NVML probe exited with status {returncode} (command: {command_text}); "
                f"stderr: {stderr_tail or '(empty)'}"
            )
        try:
            outcome = _codec.decode_probe_output(stdout)
        except _codec.ProbeOutputError as exc:
            raise NvmlProbeFailed(
                f"NVML probe printed no readable report ({exc}; command: {command_text}); "
                f"stdout: {stdout.strip()[:_STDERR_TAIL_CHARS]!r}"
            ) from exc
        if isinstance(outcome, _codec.ProbeReport):
            logger.info(
                "nvml probed driver_version=%s gpus=%d", outcome.driver_version, len(outcome.gpus)
            )
            return outcome
        if outcome.reason is _codec.FailureReason.UNAVAILABLE:
            raise NvmlUnavailable(
                f"NVML is not available on this node ({outcome.message}): run the plugin on a "
                "node with the NVIDIA driver installed and libnvidia-ml.so.1 mounted into the "
                "container, or select simulated devices (--nvml=simulated:<profile>)"
            )
        raise NvmlProbeFailed(
            f"NVML probe failed ({outcome.reason.value}: {outcome.message}); check the GPUs "
            "and driver with nvidia-smi on the node"
        )

    def _run_probe(self, command_text: str) -> tuple[str, str, int]:
        """The one call site of this adapter's I/O: run the child, bounded by the timeout."""
        try:
            done = child.run(self.probe_command, timeout_s=self.timeout_s, env=self.child_env())
        except child.ChildTimedOut as exc:
            raise NvmlProbeFailed(
                f"NVML probe did not answer within {self.timeout_s:g}s and was killed "
                f"(command: {command_text}); NVML may be stuck on a GPU: check nvidia-smi and "
                "the driver logs (dmesg) on the node"
            ) from exc
        except child.ChildNotStarted as exc:
            raise NvmlProbeFailed(
                f"cannot start the NVML probe (command: {command_text}): {exc.__cause__}"
            ) from exc
        return done.stdout, done.stderr, done.returncode

    def child_env(self) -> dict[str, str]:
        """The environment NVML children get (this package importable, the driver's libraries)."""
        return child.child_env(driver_root=self.driver_root, env=self._env)

