"""Side effects on GPUs that a GPU prepare or unprepare plans and the driver executes.

The planner in `core.gpu.preparing` returns these beside the shared plugin steps
(`models.WriteCheckpoint`, `models.WriteCDISpec`, ...), in the order they must run; the
driver carries each out through a port (`TimeSlicer`, `VfioBinder`). Each is idempotent:
running it again after a crash between it and the next step changes nothing.
"""

from __future__ import annotations

import dataclasses

from core.gpu import configs


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


GpuAction = SetTimeSlice | BindVfio | UnbindVfio
