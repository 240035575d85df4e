"""The GPU half's `status.devices` data: identities from discovery, else from the record."""

from __future__ import annotations

import gpu_prep_fixtures as f

from core.gpu import checkpoint_records as records
from core.gpu import device_status, devices


def held(name: str, kind: str, **kw: object) -> records.HeldDevice:
    return records.HeldDevice(name=name, kind=kind, **kw)  # type: ignore[arg-type]


def test_a_full_gpu_shows_its_uuid_pci_address_and_product() -> None:
    record = records.GpuClaimRecord(held=(held("gpu-1", devices.GPU_TYPE, gpu_minor=1),))
    assert device_status.device_data(record, inventory=f.INVENTORY) == {"gpu-1": {
        "type": "gpu", "uuid": f.gpu(1).uuid, "pciBusID": "0000:19:00.0",
        "productName": "NVIDIA H100 80GB HBM3",
    }}


def test_a_mig_device_shows_its_own_uuid_and_its_parents() -> None:
    mig = f.mig(3, 1)
    parents = devices.GpuInventory(gpus=(f.gpu(3),), migs=(mig,))
    record = records.GpuClaimRecord(held=(held(mig.name, devices.MIG_TYPE, gpu_minor=3),))
    assert device_status.device_data(record, inventory=parents) == {mig.name: {
        "type": "mig", "uuid": "MIG-3-1", "profile": "1g.10gb", "parentUUID": "GPU-3",
        "pciBusID": "0000:1b:00.0",
    }}


def test_a_mig_device_without_its_parent_in_discovery_has_no_pci_address() -> None:
    mig = f.mig(3, 0)
    record = records.GpuClaimRecord(held=(held(mig.name, devices.MIG_TYPE),))
    data = device_status.device_data(record, inventory=f.INVENTORY)[mig.name]
    assert data["uuid"] == "MIG-3-0" and data["pciBusID"] == ""


def test_a_vfio_function_shows_its_pci_address() -> None:
    record = records.GpuClaimRecord(held=(held("gpu-vfio-0", devices.VFIO_TYPE),))
    assert device_status.device_data(record, inventory=f.INVENTORY) == {"gpu-vfio-0": {
        "type": "vfio", "pciBusID": "0000:40:00.0", "uuid": "GPU-vfio-0",
    }}


def test_devices_gone_from_discovery_fall_back_to_the_record() -> None:
    record = records.GpuClaimRecord(held=(
        held("gpu-7", devices.GPU_TYPE, uuid="GPU-seven"),
        held("gpu-3-mig-1g10gb-19-6", devices.MIG_TYPE),
        held("gpu-vfio-9", devices.VFIO_TYPE, pci_bus_id="0000:99:00.0"),
    ))
    data = device_status.device_data(record, inventory=devices.GpuInventory())
    assert data == {
        "gpu-7": {"type": "gpu", "uuid": "GPU-seven", "pciBusID": ""},
        "gpu-3-mig-1g10gb-19-6": {"type": "mig", "uuid": ""},
        "gpu-vfio-9": {"type": "vfio", "pciBusID": "0000:99:00.0", "uuid": ""},
    }
