"""The GPU half's lasting device actions, each marked as a fault point before it runs.

`make faults` (bench/faults.py) kills the plugin process right before a compute mode is set,
an MPS daemon is started, awaited or stopped, a MIG device created or destroyed, a Fabric
Manager partition activated (and right after) or deactivated, as it does
before each durable file step, and checks that the restarted plugin leaves nothing running
or misconfigured. Unarmed (the `CD_DRA_FAULT*` variables unset), each mark is a no-op.
"""

from __future__ import annotations

from adapters.fs import faults
from core import ports
from core.gpu import devices, fm_partitions, mps


class MarkedComputeMode:
    """A `ports.ComputeModeSetter` whose every call is the fault point `gpu.compute-mode`."""

    def __init__(self, inner: ports.ComputeModeSetter) -> None:
        self._inner = inner

    def set_compute_mode(self, gpu_uuids: tuple[str, ...], mode: mps.ComputeMode) -> None:
        """Mark, then set `mode` on each GPU."""
        faults.fault_point(faults.COMPUTE_MODE)
        self._inner.set_compute_mode(gpu_uuids, mode)


class MarkedMpsDaemons:
    """A `ports.MpsDaemons` whose start, await and stop are fault points `mps.*`."""

    def __init__(self, inner: ports.MpsDaemons) -> None:
        self._inner = inner

    def start(self, daemon: mps.MpsDaemon) -> None:
        """Mark, then start the daemon."""
        faults.fault_point(faults.MPS_START)
        self._inner.start(daemon)

    def await_ready(self, daemon_id: str) -> None:
        """Mark, then wait until the daemon is Ready."""
        faults.fault_point(faults.MPS_AWAIT)
        self._inner.await_ready(daemon_id)

    def stop(self, daemon_id: str) -> None:
        """Mark, then stop the daemon."""
        faults.fault_point(faults.MPS_STOP)
        self._inner.stop(daemon_id)


class MarkedMigPartitioner:
    """A `ports.MigPartitioner` whose creates and destroys are fault points `mig.*`."""

    def __init__(self, inner: ports.MigPartitioner) -> None:
        self._inner = inner

    def create_mig_device(self, placement: devices.MigPlacement) -> devices.MigDeviceInfo:
        """Mark, then create the MIG device at `placement`."""
        faults.fault_point(faults.MIG_CREATE)
        return self._inner.create_mig_device(placement)

    def destroy_mig_device(self, placement: devices.MigPlacement) -> bool:
        """Mark, then destroy the MIG device at `placement` (False: there was none)."""
        faults.fault_point(faults.MIG_DESTROY)
        return self._inner.destroy_mig_device(placement)


class MarkedFabricManager:
    """A `ports.FabricManager` whose activations and deactivations are fault points `fm.*`
    (`fm.activated` once an activation returned, before the plugin goes on)."""

    def __init__(self, inner: ports.FabricManager) -> None:
        self._inner = inner

    def partitions(self) -> tuple[fm_partitions.Partition, ...]:
        """Fabric Manager's partitions (no mark: reading changes nothing)."""
        return self._inner.partitions()

    def activate(self, partition_id: int) -> None:
        """Mark, activate the partition, mark again."""
        faults.fault_point(faults.FM_ACTIVATE)
        self._inner.activate(partition_id)
        faults.fault_point(faults.FM_ACTIVATED)

    def deactivate(self, partition_id: int) -> None:
        """Mark, then deactivate the partition."""
        faults.fault_point(faults.FM_DEACTIVATE)
        self._inner.deactivate(partition_id)
