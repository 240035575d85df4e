"""Side effects on GPUs that a GPU prepare or unprepare plans and the driver executes.

The planner in `core.gpu.preparing` returns these beside the shared plugin steps
(`models.WriteCheckpoint`, `models.WriteCDISpec`, ...), in the order they must run; the
driver carries each out through a port (`TimeSlicer`, `VfioBinder`, `ComputeModeSetter`,
`MpsDaemons`, `MigPartitioner`, `FabricManager`). Each is idempotent:
running it again after a crash between it and the next step changes nothing.

Dynamic MIG (gate DynamicMIG): a MIG device's CDI nodes (its capability minors) exist only
once it is created, so a claim holding one gets `WriteMigCDISpec` in place of the shared
`models.WriteCDISpec`: the planner renders every other device, and the executor adds the MIG
devices from what `CreateMigDevice` returned, in the same run.
"""

from __future__ import annotations

import dataclasses

from core import models, names
from core.gpu import configs, devices, mps


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateMigDevice:
    """Create the MIG device at `placement` (replacing one an earlier try of the same claim
    left there: the planner refused the placement if another claim holds it)."""

    placement: devices.MigPlacement


@dataclasses.dataclass(frozen=True, kw_only=True)
class DestroyMigDevice:
    """Destroy the MIG device at `placement`; nothing there counts as done."""

    placement: devices.MigPlacement


@dataclasses.dataclass(frozen=True, kw_only=True)
class IommufdFunction:
    """A passthrough function given to the container by its iommufd node
    (`/dev/vfio/devices/vfio<N>`, VfioDeviceConfig `PreferIommuFD`), which exists only once
    the function is bound to vfio-pci: rendered after the bind (`WriteMigCDISpec`)."""

    name: str
    pci_bus_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteMigCDISpec:
    """Write the claim's CDI spec once the devices it names exist (`dynamic_mig.created_spec`).

    `cdi_devices` are the claim's CDI devices in spec order: rendered ones as JSON, the
    placements of MIG devices this prepare created, rendered from the created devices, and
    passthrough functions given by their iommufd node, rendered once bound.
    """

    claim_uid: names.ClaimUID
    cdi_devices: tuple[models.JSONObject | devices.MigPlacement | IommufdFunction, ...]
    files: devices.DriverFiles
    # The IOMMU API device the spec gives ("" none).
    vfio_api: str = ""
    # False for a claim of passthrough functions alone: no host driver files (`cdi`).
    driver_files: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActivateFabricPartition:
    """Activate the Fabric Manager partition `partition_id` (an active one stays as it is)."""

    partition_id: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeactivateFabricPartition:
    """Deactivate the Fabric Manager partition `partition_id` (an inactive one stays so)."""

    partition_id: int


GpuAction = (
    SetTimeSlice | BindVfio | UnbindVfio | SetComputeMode | StartMpsDaemon | AwaitMpsDaemon
    | StopMpsDaemon | CreateMigDevice | DestroyMigDevice | WriteMigCDISpec
    | ActivateFabricPartition | DeactivateFabricPartition
)
