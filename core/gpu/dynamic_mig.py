"""Dynamic MIG (gate DynamicMIG): which existing MIG devices the plugin must tear down.

At start-up, upstream's DestroyUnknownMIGDevices keeps only the MIG devices that a claim in
PrepareCompleted holds and destroys every other: ones made out of band, and ones a prepare
created before the plugin stopped (its entry still PrepareStarted; the kubelet retries the
prepare, which creates the device again). This module decides; the plugin destroys through
`core.ports.MigPartitioner`. Pure: no NVML here.

At prepare, the MIG device's CDI nodes are known only once it is created: `created_spec`
builds the claim's spec from what the creates returned (`actions.WriteMigCDISpec`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from core import errors, models
from core.gpu import actions, devices
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as records


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


def created_spec(
    action: actions.WriteMigCDISpec,
    created: Mapping[devices.MigPlacement, devices.MigDeviceInfo],
    *,
    iommufd_nodes: Callable[[str], Sequence[devices.DeviceNode]] | None = None,
) -> models.JSONObject:
    """The claim's CDI spec once its MIG devices exist: `action`'s rendered devices as they
    are, each placement as the MIG device `created` holds for it (its parent's node and its
    GPU- and compute-instance capability nodes, as for a MIG device made out of band).

    A passthrough function given by iommufd gets the node `iommufd_nodes` finds for its PCI
    address now that it is bound (TypeError where none is wired: a wiring bug).

    Raises PermanentError when a placement was not created by this run (or the node shows no
    capability minors for it): the prepare fails, and its unprepare destroys what it created.
    """
    listed: list[models.JSONObject] = []
    for item in action.cdi_devices:
        if isinstance(item, actions.IommufdFunction):
            if iommufd_nodes is None:
                raise TypeError("an iommufd function was planned but no vfio nodes are wired")
            nodes = iommufd_nodes(item.pci_bus_id)
            listed.append({
                "name": gpu_cdi.device_name(action.claim_uid, item.name),
                "containerEdits": {"deviceNodes": [gpu_cdi.node_json(n) for n in nodes]},
            })
            continue
        if not isinstance(item, devices.MigPlacement):
            listed.append(item)
            continue
        mig = created.get(item)
        if mig is None:
            raise errors.PermanentError(
                f"the MIG device at GPU {item.parent_minor}, profile {item.gi_profile_id}, "
                f"placement {item.placement_start} of claim {action.claim_uid} was not created "
                "before its CDI spec; the prepare is retried by the kubelet"
            )
        listed.append(gpu_cdi.mig_device(action.claim_uid, mig, files=action.files))
    edits = gpu_cdi.common_edits(
        action.files, driver_files=action.driver_files, vfio_api=action.vfio_api
    )
    return gpu_cdi.claim_spec(devices_json=listed, edits=edits)
