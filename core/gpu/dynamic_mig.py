"""Dynamic MIG (gate DynamicMIG): which existing MIG devices the plugin must tear down.

At start-up, upstream's DestroyUnknownMIGDevices keeps only the MIG devices that a claim in
PrepareCompleted holds and destroys every other: ones made out of band, and ones a prepare
created before the plugin stopped (its entry still PrepareStarted; the kubelet retries the
prepare, which creates the device again). This module decides; the plugin destroys through
`core.ports.MigPartitioner`. Pure: no NVML here.
"""

from __future__ import annotations

from collections.abc import Iterator

from core import models
from core.gpu import checkpoint_records as records
from core.gpu import devices


def kept_mig_names(checkpoint: records.Checkpoint) -> frozenset[str]:
    """Names of the MIG devices held by claims whose prepare completed."""
    return frozenset(_completed_device_names(checkpoint))


def unknown_mig_devices(
    inventory: devices.GpuInventory, checkpoint: records.Checkpoint
) -> tuple[devices.MigPlacement, ...]:
    """The existing MIG devices no completed claim holds, sorted: the ones to destroy."""
    kept = kept_mig_names(checkpoint)
    return tuple(sorted(
        devices.MigPlacement.of(mig) for mig in inventory.migs if mig.name not in kept
    ))


def _completed_device_names(checkpoint: records.Checkpoint) -> Iterator[str]:
    for entry in checkpoint.entries.values():
        if entry.state is not models.ClaimState.PREPARE_COMPLETED:
            continue
        yield from (device.device_name for device in entry.devices)
        yield from (held.name for held in entry.record.held)
