"""Fabric Manager partitions in the GPU plugin's published slice (gate
FabricManagerPartitioning), on a simulated HGX H100 node with the simulated Fabric Manager.

Covers: the node the plugin publishes (in-process, registered with the kubelet emulator)
carries on every GPU the int attributes `gpuModuleID` and `partition1/2/4/8` of the HGX
table, and its slice validates strictly against every ResourceSlice schema from 1.34 on;
without the gate, or on a profile without NVSwitches, no Fabric Manager is made and nothing is
added. (Activation at prepare: test_gpuplugin_fabric_partitions_prepare.py.)
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes_validate import utils as kv_utils

from apps.cli import gpu_demo
from apps.gpuplugin import settings as gpu_settings
from core import kinds

GATE = "FabricManagerPartitioning=true"
_FM_KEYS = ("gpuModuleID", "partition1", "partition2", "partition4", "partition8")


def _versions() -> list[str]:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    minors = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=key)
    return [v for v in minors if key(v) >= (1, 34)]


def _slices(node: gpu_demo.GpuNode) -> list[dict[str, object]]:
    return [
        dict(s) for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"].get("driver") == gpu_settings.DRIVER_NAME
    ]


def _fabric(node: gpu_demo.GpuNode) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for resource_slice in _slices(node):
        spec = resource_slice["spec"]
        assert isinstance(spec, dict)
        for device in spec["devices"]:
            attributes = device["attributes"]
            found[device["name"]] = {
                key: attributes[key]["int"] for key in _FM_KEYS if key in attributes
            }
    return found


def test_an_hgx_node_publishes_each_gpus_partitions_and_the_slice_validates() -> None:
    node = gpu_demo.start_gpu_node("", profile="hgx-h100", feature_gates=GATE)
    try:
        assert node.fabric is not None
        found = _fabric(node)
        slices = _slices(node)
    finally:
        node.stop()
    assert found["gpu-0"] == {
        "gpuModuleID": 1, "partition1": 8, "partition2": 4, "partition4": 2, "partition8": 1,
    }
    assert found["gpu-6"] == {
        "gpuModuleID": 7, "partition1": 14, "partition2": 6, "partition4": 3, "partition8": 1,
    }
    # Every 2-GPU partition id is shared by exactly two GPUs: matchAttribute picks a pair.
    pairs = sorted(attrs["partition2"] for attrs in found.values())
    assert pairs == [4, 4, 5, 5, 6, 6, 7, 7]
    for version in _versions():
        for resource_slice in slices:
            assert kubernetes_validate.validate(resource_slice, version, strict=True) == version


@pytest.mark.parametrize(("profile", "gates"), [("hgx-h100", ""), ("gb200", GATE)])
def test_no_gate_or_no_nvswitch_means_no_fabric_manager_and_no_attributes(
    profile: str, gates: str
) -> None:
    node = gpu_demo.start_gpu_node("", profile=profile, feature_gates=gates)
    try:
        assert node.fabric is None
        found = _fabric(node)
    finally:
        node.stop()
    assert found and all(attrs == {} for attrs in found.values())
