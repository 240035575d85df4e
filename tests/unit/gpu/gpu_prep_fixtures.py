"""Builders for the GPU prepare planner's tests: a small node, claims, and the CDI schema.

Every CDI spec a test builds goes through `check_cdi`, which validates it against the
reference CDI JSON schema (../shared/reference/cdi) with the two quirks fixed the same way
tests/integration/cdi/test_cdi_schema.py fixes them (fileMode undeclared; env items use `ref`).
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema

from core import gates, models, names
from core.gpu import devices, fm_partitions

_SHARED = Path(os.environ.get("SHARED_DIR", Path(__file__).parents[3] / ".." / "shared"))
CDI_DIR = _SHARED / "reference" / "cdi"

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
ALL_GATES = models.FeatureGates(values={
    gates.TIME_SLICING_SETTINGS: True, gates.PASSTHROUGH_SUPPORT: True,
})
NO_GATES = models.FeatureGates(values={})
FILES = devices.DriverFiles(
    control_nodes=(
        devices.DeviceNode(path="/dev/nvidiactl", major=195, minor=255),
        devices.DeviceNode(path="/dev/nvidia-uvm", major=507, minor=0),
        devices.DeviceNode(path="/dev/nvidia-uvm-tools", major=507, minor=1),
    ),
    libraries=(
        ("/run/nvidia/driver/usr/lib64/libcuda.so.580.65.06", "/usr/lib64/libcuda.so.580.65.06"),
        ("/run/nvidia/driver/usr/lib64/libnvidia-ml.so.580.65.06",
         "/usr/lib64/libnvidia-ml.so.580.65.06"),
    ),
    binaries=(("/run/nvidia/driver/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),),
    firmware=(("/run/nvidia/driver/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin",
               "/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin"),),
    nvidia_major=195,
    caps_major=511,
)


def gpu(minor: int, **kw: Any) -> devices.GpuInfo:
    values: dict[str, Any] = {
        "minor": minor, "index": minor, "uuid": f"GPU-{minor:08d}-0000-0000-0000-000000000000",
        "product_name": "NVIDIA H100 80GB HBM3", "brand": "Nvidia", "architecture": "Hopper",
        "cuda_compute_capability": "9.0", "driver_version": "580.65.06",
        "cuda_driver_version": "13.0", "pci_bus_id": f"0000:{minor + 0x18:02x}:00.0",
        "memory_bytes": 80 * 2**30,
    }
    values.update(kw)
    return devices.GpuInfo(**values)


def mig(parent: int, start: int, **kw: Any) -> devices.MigDeviceInfo:
    values: dict[str, Any] = {
        "uuid": f"MIG-{parent}-{start}", "profile": "1g.10gb", "parent_uuid": f"GPU-{parent}",
        "parent_minor": parent, "gi_profile_id": 19, "gi_id": start + 1, "ci_id": 0,
        "placement_start": start, "placement_size": 1, "memory_bytes": 10 * 2**30,
        "gi_cap_minor": 100 + start * 2, "ci_cap_minor": 101 + start * 2,
    }
    values.update(kw)
    return devices.MigDeviceInfo(**values)


def vfio(index: int, **kw: Any) -> devices.VfioDeviceInfo:
    values: dict[str, Any] = {
        "index": index, "uuid": f"GPU-vfio-{index}", "device_id": "0x2330", "vendor_id": "0x10de",
        "product_name": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"0000:{index + 0x40:02x}:00.0",
        "iommu_group": 30 + index, "addressable_memory_bytes": 80 * 2**30,
        "parent_minor": 10 + index,
    }
    values.update(kw)
    return devices.VfioDeviceInfo(**values)


INVENTORY = devices.GpuInventory(
    gpus=(gpu(0), gpu(1), gpu(2)),
    migs=(mig(3, 0), mig(3, 1)),
    vfios=(vfio(0),),
)


def config(
    parameters: Mapping[str, Any],
    *,
    requests: Sequence[str] = (),
    source: models.ConfigSource = models.ConfigSource.CLAIM,
    driver: str = DRIVER,
) -> models.RawOpaqueConfig:
    return models.RawOpaqueConfig(
        source=source, requests=tuple(requests), driver=driver, parameters=parameters
    )


def gpu_config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", **fields}


def time_slicing(interval: str = "Default") -> dict[str, Any]:
    return gpu_config(sharing={"strategy": "TimeSlicing",
                               "timeSlicingConfig": {"interval": interval}})


def claim(
    *devices_: str | tuple[str, str],
    uid: str = "c0ffee00-0000-4000-8000-000000000001",
    name: str = "train",
    configs: Sequence[models.RawOpaqueConfig] = (),
    pool: str = NODE,
    allocated: bool = True,
    admin_access: bool = False,
) -> models.ResourceClaim:
    """A claim allocated these devices (each with `admin_access`); a bare name gets request
    `r<i>`."""
    results = []
    for i, device in enumerate(devices_):
        request, dev = device if isinstance(device, tuple) else (f"r{i}", device)
        results.append(models.DeviceResult(request=request, driver=DRIVER, pool=pool, device=dev,
                                           admin_access=admin_access))
    return models.ResourceClaim(
        uid=names.ClaimUID(uid), namespace="ml", name=name, allocated=allocated,
        results=tuple(results), configs=tuple(configs),
    )


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((CDI_DIR / "schema.json").read_text())
    defs = copy.deepcopy(json.loads((CDI_DIR / "defs.json").read_text()))
    definitions = defs["definitions"]
    definitions["DeviceNode"]["properties"]["fileMode"] = {
        "type": "integer", "minimum": 0, "maximum": 0o7777,
    }
    definitions["containerEdits"]["properties"]["env"]["items"] = {"type": "string"}
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        "defs.json", referencing.jsonschema.DRAFT7.create_resource(defs)
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


def check_cdi(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` as a runtime reads it back, after validating it against the CDI schema."""
    loaded: dict[str, Any] = json.loads(json.dumps(spec))
    if CDI_DIR.joinpath("schema.json").is_file() or os.environ.get("CI") == "true":
        _validator().validate(loaded)
    return loaded


def _partition(partition_id: int, *module_ids: int) -> fm_partitions.Partition:
    return fm_partitions.Partition(partition_id=partition_id, module_ids=frozenset(module_ids))


# An 8-GPU board whose Fabric Manager partition ids start at 0 (the planners take whatever
# table Fabric Manager reports; the HGX H100 one, `fm_partitions.HGX_8GPU_PARTITIONS`, starts
# at 1): the whole board, halves (1-4) and (5-8), pairs (1,3), (2,4), (5,7), (6,8), and each
# GPU alone as partition 6 + module id.
ZERO_BASED_BOARD: tuple[fm_partitions.Partition, ...] = (
    _partition(0, 1, 2, 3, 4, 5, 6, 7, 8),
    _partition(1, 1, 2, 3, 4),
    _partition(2, 5, 6, 7, 8),
    _partition(3, 1, 3),
    _partition(4, 2, 4),
    _partition(5, 5, 7),
    _partition(6, 6, 8),
    *(_partition(6 + module_id, module_id) for module_id in range(1, 9)),
)
