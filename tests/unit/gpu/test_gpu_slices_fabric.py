"""Fabric Manager attributes in the published GPU devices (gate FabricManagerPartitioning).

Covers: with the gate and an NVSwitch fabric's partitions, each full GPU carries the int
attributes `gpuModuleID` and `partition1/2/4/8` of the HGX table, its MIG devices and its VFIO
function their GPU's; without the gate, without a fabric, or for a GPU without a module id
(or NVML's 0) nothing is added; a contradictory table stops the plan; the slices still
validate strictly against every ResourceSlice schema from Kubernetes 1.34 on; under
DynamicMIG every possible MIG device and full GPU carries its GPU's attributes too.
"""

from __future__ import annotations

import dataclasses

import gpu_slices_inventories as inv
import kubernetes_validate
import pytest
from test_gpu_slices_properties import VERSIONS

from core import errors, gates, models
from core.gpu import devices, fm_partitions, migprofiles, partitions
from core.gpu import slices as gpu_slices

HGX = fm_partitions.HGX_8GPU_PARTITIONS
_FM_KEYS = {"gpuModuleID", "partition1", "partition2", "partition4", "partition8"}


def _gates(**on: bool) -> models.FeatureGates:
    return gates.resolve_gates(on)


_WITH_FM = _gates(FabricManagerPartitioning=True, PassthroughSupport=True)


def _hgx(*, zero: bool = False) -> devices.GpuInventory:
    gpus = tuple(inv.h100_gpu(i, module_id=0 if zero else i + 1) for i in range(8))
    return dataclasses.replace(inv.HGX_H100_WITH_VFIO, gpus=gpus)


def _by_name(
    inventory: devices.GpuInventory, gate_values: models.FeatureGates = _WITH_FM,
    partitions: tuple[fm_partitions.Partition, ...] | None = HGX,
) -> dict[str, models.JSONObject]:
    planned = gpu_slices.plan_gpu_devices(
        inventory, gates=gate_values, fabric_partitions=partitions
    )
    return {str(d["name"]): d for d in planned}


def _fm(device: models.JSONObject) -> dict[str, object]:
    attributes = device["attributes"]
    assert isinstance(attributes, dict)
    return {k: v for k, v in attributes.items() if k in _FM_KEYS}


def test_each_gpu_carries_its_module_id_and_partition_of_each_size() -> None:
    found = _by_name(_hgx())
    assert _fm(found["gpu-0"]) == {
        "gpuModuleID": {"int": 1}, "partition1": {"int": 8}, "partition2": {"int": 4},
        "partition4": {"int": 2}, "partition8": {"int": 1},
    }
    assert _fm(found["gpu-5"]) == {
        "gpuModuleID": {"int": 6}, "partition1": {"int": 13}, "partition2": {"int": 7},
        "partition4": {"int": 2}, "partition8": {"int": 1},
    }
    attributes = found["gpu-0"]["attributes"]
    assert isinstance(attributes, dict)
    assert list(attributes) == sorted(attributes)


def test_a_vfio_function_carries_its_gpus_attributes() -> None:
    found = _by_name(_hgx())
    assert _fm(found["gpu-vfio-3"]) == _fm(found["gpu-3"])
    orphan = dataclasses.replace(inv.HGX_H100_WITH_VFIO.vfios[3], parent_minor=None)
    alone = dataclasses.replace(_hgx(), vfios=(orphan,))
    assert _fm(_by_name(alone)["gpu-vfio-3"]) == {}


def test_a_mig_device_carries_its_parent_gpus_attributes() -> None:
    node = inv.A100_MIG_NODE
    gpus = tuple(dataclasses.replace(g, module_id=g.minor + 1) for g in node.gpus)
    found = _by_name(dataclasses.replace(node, gpus=gpus))
    mig = next(name for name in found if name.startswith("gpu-0-mig-"))
    assert _fm(found[mig]) == {
        "gpuModuleID": {"int": 1}, "partition1": {"int": 8}, "partition2": {"int": 4},
        "partition4": {"int": 2}, "partition8": {"int": 1},
    }


@pytest.mark.parametrize(
    ("gate_values", "partitions", "inventory"),
    [
        (_gates(PassthroughSupport=True), HGX, _hgx()),
        (_WITH_FM, None, _hgx()),
        (_WITH_FM, HGX, inv.HGX_H100_WITH_VFIO),  # no module ids
        (_WITH_FM, HGX, _hgx(zero=True)),  # NVML's 0: unknown, as upstream reads it
    ],
    ids=["gate-off", "no-fabric", "no-module-ids", "module-id-zero"],
)
def test_nothing_is_added_without_gate_fabric_or_module_id(
    gate_values: models.FeatureGates,
    partitions: tuple[fm_partitions.Partition, ...] | None,
    inventory: devices.GpuInventory,
) -> None:
    assert all(_fm(d) == {} for d in _by_name(inventory, gate_values, partitions).values())


def test_a_contradictory_partition_table_stops_the_plan() -> None:
    twice = (*HGX, fm_partitions.Partition(partition_id=3, module_ids=frozenset({1})))
    with pytest.raises(errors.PermanentError, match="partition 3 twice"):
        _by_name(_hgx(), partitions=twice)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_slice_with_fabric_attributes_validates_strictly(version: str) -> None:
    built = gpu_slices.build_gpu_resource_slices(
        _hgx(), node_name="node-a", gates=_WITH_FM, generation=1, fabric_partitions=HGX
    )
    for resource_slice in built:
        assert kubernetes_validate.validate(resource_slice, version, strict=True) == version
    assert {"gpuModuleID", "partition8"} <= set(built[0]["spec"]["devices"][0]["attributes"])


def test_dynamic_mig_partitions_and_full_gpus_carry_their_gpus_attributes() -> None:
    """Under DynamicMIG too: every possible MIG device and the full GPU of a partitionable GPU,
    and the devices of a GPU that is not partitionable, carry their GPU's attributes."""
    partitionable = inv.h100_gpu(0, module_id=1, mig_profiles=migprofiles.H100_80GB)
    plain = inv.h100_gpu(1, module_id=2)  # no profiles listed: published as without the gate
    inventory = devices.GpuInventory(gpus=(partitionable, plain))
    contents = partitions.plan_partitioned_slices(
        inventory, layout=partitions.SliceLayout.SPLIT, fabric_partitions=HGX
    )
    found = {str(d["name"]): d for content in contents for d in content.devices}
    assert len(found) == 27  # 25 placements + the full GPU, then gpu-1
    expected_0 = _fm(_by_name(_hgx())["gpu-0"])
    assert all(_fm(d) == expected_0 for name, d in found.items() if name.startswith("gpu-0"))
    assert _fm(found["gpu-1"]) == _fm(_by_name(_hgx())["gpu-1"])
    without = partitions.plan_partitioned_slices(inventory, layout=partitions.SliceLayout.SPLIT)
    assert all(_fm(d) == {} for content in without for d in content.devices)
    built = partitions.build_partitioned_slices(contents, node_name="node-a", generation=1)
    assert "1.35" in VERSIONS
    for version in VERSIONS[1:]:  # NB: the split layout is 1.35's
        for resource_slice in built:
            assert kubernetes_validate.validate(resource_slice, version, strict=True) == version
