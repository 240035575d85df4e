"""Which published devices a prepared claim hides: a GPU and its passthrough function are one
physical device (gate PassthroughSupport).

Upstream removes the siblings of a prepared device from what it publishes: while `gpu-vfio-N`
is prepared (the GPU bound to vfio-pci for a VM), the full GPU `gpu-<minor>` on the same PCI
address is not offered, and while that full GPU is prepared its `gpu-vfio-N` is not; each
returns once the claim is unprepared. So the scheduler never allocates a GPU that a VM holds,
nor passes through one a container uses.

Upstream keeps that in memory (lost on restart until the next prepare); here it is derived
from the checkpoint at every publish, so a restarted plugin hides the same devices. A device
held with admin access hides nothing: it changed nothing on the GPU and conflicts with no
claim (`gpu.overlap`). MIG devices are out of scope, as upstream: a GPU showing MIG devices
offers no passthrough function at all (`gpu.slices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from core import checkpoint as checkpoints
from core.gpu import checkpoint_records as records
from core.gpu import devices, slices


def held_devices(checkpoint: records.Checkpoint) -> tuple[records.HeldDevice, ...]:
    """What every claim holding devices (PrepareStarted or PrepareCompleted) holds, in UID
    order: a started claim may already have bound its functions."""
    return tuple(
        held
        for _, entry in sorted(checkpoint.entries.items())
        if entry.state in checkpoints.HOLDING_STATES
        for held in entry.record.held
    )


def hidden_siblings(
    inventory: devices.GpuInventory, held: Iterable[records.HeldDevice]
) -> frozenset[str]:
    """Names of the devices not to publish: the passthrough function of each held full GPU
    and the full GPU of each held passthrough function (matched by PCI address, or by GPU
    minor where the record has no address). Deterministic; unknown devices are ignored."""
    hidden: set[str] = set()
    for device in held:
        if device.admin_access:
            continue
        if device.kind == devices.VFIO_TYPE:
            hidden.update(_gpus_of(inventory, device))
        elif device.kind == devices.GPU_TYPE:
            hidden.update(_vfios_of(inventory, device))
    return frozenset(hidden)


def _gpus_of(inventory: devices.GpuInventory, vfio: records.HeldDevice) -> set[str]:
    address = _address(vfio.pci_bus_id)
    return {
        gpu.name for gpu in inventory.gpus
        if (address and _address(gpu.pci_bus_id) == address)
        or (vfio.gpu_minor is not None and gpu.minor == vfio.gpu_minor)
    }


def _vfios_of(inventory: devices.GpuInventory, gpu: records.HeldDevice) -> set[str]:
    found = inventory.gpu_by_minor(gpu.gpu_minor) if gpu.gpu_minor is not None else None
    address = _address(found.pci_bus_id) if found is not None else ""
    return {
        vfio.name for vfio in inventory.vfios
        if (address and _address(vfio.pci_bus_id) == address)
        or (gpu.gpu_minor is not None and vfio.parent_minor == gpu.gpu_minor)
    }


def _address(text: str) -> str:
    """The PCI address in one spelling (NVML's and sysfs's differ); "" where unreadable."""
    if not text:
        return ""
    try:
        return slices.normalize_pci_bus_id(text)
    except ValueError:
        return ""


def with_parents(
    vfios: tuple[devices.VfioDeviceInfo, ...], gpus: tuple[devices.GpuInfo, ...]
) -> tuple[devices.VfioDeviceInfo, ...]:
    """The functions sysfs found, each with the minor of the GPU NVML shows at its PCI address
    (None while it is bound to vfio-pci: NVML does not see it then)."""
    minors = {_address(gpu.pci_bus_id): gpu.minor for gpu in gpus}
    return tuple(
        dataclasses.replace(vfio, parent_minor=minors.get(_address(vfio.pci_bus_id)))
        if vfio.parent_minor is None else vfio
        for vfio in vfios
    )
