"""Node inventories the slice tests publish: an 8-GPU HGX H100, an A100 node with MIG devices,
a GB200 tray, and VFIO functions. Values as NVML and sysfs report them on such hosts."""

from __future__ import annotations

from core.gpu import devices

H100_UUIDS = tuple(f"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c1{i:02x}" for i in range(8))
# HGX H100 bus IDs as NVML spells them (8-digit domain, upper case).
H100_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)


def h100_gpu(position: int, **changes: object) -> devices.GpuInfo:
    """GPU `position` of an HGX H100 node (minor = index = position), with `changes`."""
    fields: dict[str, object] = {
        "minor": position,
        "index": position,
        "uuid": H100_UUIDS[position],
        "product_name": "NVIDIA H100 80GB HBM3",
        "brand": "Nvidia",
        "architecture": "Hopper",
        "cuda_compute_capability": "9.0",
        "driver_version": "580.65.06",
        "cuda_driver_version": "13.0",
        "pci_bus_id": H100_BUS_IDS[position],
        "memory_bytes": 85520809984,
        "pcie_root": f"pci0000:{H100_BUS_IDS[position][9:11].lower()}",
        "numa_node": 0 if position < 4 else 1,
        "mig_capable": True,
    }
    fields.update(changes)
    return devices.GpuInfo(**fields)  # type: ignore[arg-type]


HGX_H100 = devices.GpuInventory(gpus=tuple(h100_gpu(i) for i in range(8)))

A100_UUIDS = (
    "GPU-a100a100-0000-1111-2222-333333333300",
    "GPU-a100a100-0000-1111-2222-333333333301",
)


def a100_gpu(index: int, *, mig_enabled: bool) -> devices.GpuInfo:
    """GPU `index` of a 2-GPU A100 80GB node."""
    return devices.GpuInfo(
        minor=index,
        index=index,
        uuid=A100_UUIDS[index],
        product_name="NVIDIA A100-SXM4-80GB",
        brand="Nvidia",
        architecture="Ampere",
        cuda_compute_capability="8.0",
        driver_version="570.172.08",
        cuda_driver_version="12.8",
        pci_bus_id=("00000000:07:00.0", "00000000:0F:00.0")[index],
        memory_bytes=85899345920,
        pcie_root="pci0000:00",
        numa_node=0,
        mig_capable=True,
        mig_enabled=mig_enabled,
    )


def a100_mig(
    profile: str,
    *,
    gi_profile_id: int,
    start: int,
    size: int,
    memory_mib: int,
    multiprocessors: int,
    gi_id: int,
) -> devices.MigDeviceInfo:
    """A MIG device on GPU 0 of the A100 node."""
    return devices.MigDeviceInfo(
        uuid=f"MIG-7a1c5c4e-3c5e-5f43-9d4b-0d6f3e1b2a{gi_id:02x}",
        profile=profile,
        parent_uuid=A100_UUIDS[0],
        parent_minor=0,
        gi_profile_id=gi_profile_id,
        gi_id=gi_id,
        ci_id=0,
        placement_start=start,
        placement_size=size,
        memory_bytes=memory_mib * 1024 * 1024,
        multiprocessors=multiprocessors,
        copy_engines=size,
        decoders=size,
        encoders=0,
        jpeg_engines=1 if size >= 4 else 0,
        ofa_engines=1 if size == 8 else 0,
    )


# GPU 0 in MIG mode as 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb; GPU 1 a full GPU.
A100_MIGS = (
    a100_mig(
        "3g.40gb", gi_profile_id=9, start=4, size=4, memory_mib=40192, multiprocessors=42, gi_id=2
    ),
    a100_mig(
        "2g.20gb", gi_profile_id=14, start=0, size=2, memory_mib=19968, multiprocessors=28, gi_id=3
    ),
    a100_mig(
        "1g.10gb", gi_profile_id=19, start=3, size=1, memory_mib=9856, multiprocessors=14, gi_id=9
    ),
    a100_mig(
        "1g.10gb", gi_profile_id=19, start=2, size=1, memory_mib=9856, multiprocessors=14, gi_id=10
    ),
)
A100_MIG_NODE = devices.GpuInventory(
    gpus=(a100_gpu(0, mig_enabled=True), a100_gpu(1, mig_enabled=False)), migs=A100_MIGS
)

GB200_TRAY = devices.GpuInventory(
    gpus=tuple(
        devices.GpuInfo(
            minor=i,
            index=i,
            uuid=f"GPU-gb200gb2-0000-1111-2222-3333333333{i:02x}",
            product_name="NVIDIA GB200",
            brand="Nvidia",
            architecture="Blackwell",
            cuda_compute_capability="10.0",
            driver_version="580.82.07",
            cuda_driver_version="13.0",
            pci_bus_id=(
                "00000008:01:00.0",
                "00000009:01:00.0",
                "00000018:01:00.0",
                "00000019:01:00.0",
            )[i],
            memory_bytes=196502093824,
            pcie_root=("pci0008:00", "pci0009:00", "pci0018:00", "pci0019:00")[i],
            numa_node=(0, 0, 1, 1)[i],
            mig_capable=True,
            addressing_mode="ATS",
        )
        for i in range(4)
    )
)


def vfio(index: int, *, pci_bus_id: str, parent_minor: int | None = None) -> devices.VfioDeviceInfo:
    """An H100 PCI function that can be passed through."""
    return devices.VfioDeviceInfo(
        index=index,
        uuid=f"5b0f3c1e-8d6a-5c77-9f1e-0a2b3c4d5e{index:02x}",
        device_id="0x2330",
        vendor_id="0x10de",
        product_name="GH100 [H100 SXM5 80GB]",
        pci_bus_id=pci_bus_id,
        iommu_group=20 + index,
        addressable_memory_bytes=137438953472,
        pcie_root="pci0000:00",
        numa_node=0,
        parent_minor=parent_minor,
    )


HGX_H100_WITH_VFIO = devices.GpuInventory(
    gpus=HGX_H100.gpus,
    vfios=tuple(
        vfio(i, pci_bus_id="0000:" + H100_BUS_IDS[i][9:].lower(), parent_minor=i) for i in range(8)
    ),
)

PROFILES = {
    "hgx-h100": HGX_H100,
    "hgx-h100-vfio": HGX_H100_WITH_VFIO,
    "a100-mig": A100_MIG_NODE,
    "gb200-tray": GB200_TRAY,
}
