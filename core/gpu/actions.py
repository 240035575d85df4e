"""Side effects on GPUs that a GPU prepare or unprepare plans and the driver executes.

The planner in `core.gpu.preparing` returns these beside the shared plugin steps
(`models.WriteCheckpoint`, `models.WriteCDISpec`, ...), in the order they must run; the
driver carries each out through a port (`TimeSlicer`, `VfioBinder`, `ComputeModeSetter`,
`MpsDaemons`). Each is idempotent:
running it again after a crash between it and the next step changes nothing.
"""

from __future__ import annotations

import dataclasses

from core.gpu import configs, mps


@dataclasses.dataclass(frozen=True, kw_only=True)
class SetTimeSlice:
    """Set the compute time-slice of these full GPUs (through the driver's own tool)."""

    gpu_uuids: tuple[str, ...]
    interval: configs.TimeSliceInterval


@dataclasses.dataclass(frozen=True, kw_only=True)
class BindVfio:
    """Move the PCI function at `pci_bus_id` from the nvidia driver to vfio-pci."""

    pci_bus_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnbindVfio:
    """Give the PCI function at `pci_bus_id` back to the nvidia driver."""

    pci_bus_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SetComputeMode:
    """Set the compute mode of these full GPUs (EXCLUSIVE_PROCESS for MPS, DEFAULT after)."""

    gpu_uuids: tuple[str, ...]
    mode: mps.ComputeMode


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartMpsDaemon:
    """Create the daemon's directories (shm a tmpfs) and its Deployment, if not there yet."""

    daemon: mps.MpsDaemon


@dataclasses.dataclass(frozen=True, kw_only=True)
class AwaitMpsDaemon:
    """Wait until the daemon is Ready (it took its settings); RetryableError if not yet."""

    daemon_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopMpsDaemon:
    """Delete the daemon's Deployment, wait until it is gone, then remove its directories."""

    daemon_id: str


GpuAction = (
    SetTimeSlice | BindVfio | UnbindVfio | SetComputeMode | StartMpsDaemon | AwaitMpsDaemon
    | StopMpsDaemon
)
