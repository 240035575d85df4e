"""The GPU half's data in `ResourceClaim.status.devices` (see `core.device_status`).

For each device a claim holds: its type, and the identity an operator matches against
`nvidia-smi` and the node: a full GPU's UUID and PCI address, a MIG device's UUID with its
parent GPU's, a VFIO function's PCI address. Taken from discovery when it still shows the
device, else from what the checkpoint recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from core import device_status
from core.gpu import checkpoint_records, devices


def _gpu_data(
    held: checkpoint_records.HeldDevice, inventory: devices.GpuInventory
) -> dict[str, object]:
    gpu = next((g for g in inventory.gpus if g.name == held.name), None)
    data: dict[str, object] = {"type": devices.GPU_TYPE, "uuid": held.uuid, "pciBusID": ""}
    if gpu is not None:
        data.update(uuid=gpu.uuid, pciBusID=gpu.pci_bus_id, productName=gpu.product_name)
    return data


def _mig_data(
    held: checkpoint_records.HeldDevice, inventory: devices.GpuInventory
) -> dict[str, object]:
    mig = next((m for m in inventory.migs if m.name == held.name), None)
    if mig is None:
        return {"type": devices.MIG_TYPE, "uuid": held.uuid}
    parent = inventory.gpu_by_minor(mig.parent_minor)
    return {
        "type": devices.MIG_TYPE, "uuid": mig.uuid, "profile": mig.profile,
        "parentUUID": mig.parent_uuid,
        "pciBusID": parent.pci_bus_id if parent is not None else "",
    }


def _vfio_data(
    held: checkpoint_records.HeldDevice, inventory: devices.GpuInventory
) -> dict[str, object]:
    vfio = next((v for v in inventory.vfios if v.name == held.name), None)
    return {
        "type": devices.VFIO_TYPE,
        "pciBusID": vfio.pci_bus_id if vfio is not None else held.pci_bus_id,
        "uuid": vfio.uuid if vfio is not None else held.uuid,
    }


def device_data(
    record: checkpoint_records.GpuClaimRecord, *, inventory: devices.GpuInventory
) -> Mapping[str, device_status.DeviceData]:
    """Device name -> its status data, for every device the claim holds."""
    out: dict[str, device_status.DeviceData] = {}
    for held in record.held:
        if held.kind == devices.MIG_TYPE:
            out[held.name] = _mig_data(held, inventory)
        elif held.kind == devices.VFIO_TYPE:
            out[held.name] = _vfio_data(held, inventory)
        else:
            out[held.name] = _gpu_data(held, inventory)
    return out
