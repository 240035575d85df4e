"""The embedded scheduler honours KEP-5055 device taints as kube-scheduler does: a device with a
NoSchedule (or NoExecute) taint is not allocated unless the request tolerates it; effect None
only informs; the refusal names the taint."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.memory import _taints
from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster

DRIVER = "gpu.nvidia.com"
NS = "team"
CLASS = "gpu.nvidia.com"
XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


def _gpu(name: str, *taints: dict[str, str]) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": {"type": {"string": "gpu"}}}
    if taints:
        device["taints"] = list(taints)
    return device


def _cluster(*devices: dict[str, Any]) -> memory_cluster.InMemoryCluster:
    cluster = memory_cluster.InMemoryCluster(seed=7)
    cluster.create("DeviceClass", {"metadata": {"name": CLASS}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    cluster.create("ResourceSlice", {
        "metadata": {"name": "node-a-gpu"},
        "spec": {"driver": DRIVER, "pool": {"name": "node-a", "generation": 1,
                                            "resourceSliceCount": 1},
                 "nodeName": "node-a", "devices": list(devices)}})
    return cluster


def _schedule(cluster: memory_cluster.InMemoryCluster, name: str,
              tolerations: list[dict[str, str]] | None = None) -> str:
    exactly: dict[str, Any] = {"deviceClassName": CLASS}
    if tolerations is not None:
        exactly["tolerations"] = tolerations
    cluster.create("ResourceClaim", {"metadata": {"name": name, "namespace": NS}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    pod = {"metadata": {"name": f"{name}-pod", "namespace": NS}, "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}}
    scheduled = memory_allocator.Allocator(cluster).schedule_pod(pod)
    [result] = scheduled.claims[0]["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


def test_a_device_tainted_no_schedule_is_passed_over() -> None:
    cluster = _cluster(_gpu("gpu-0", XID), _gpu("gpu-1"))
    assert _schedule(cluster, "a") == "gpu-1"


def test_when_only_tainted_devices_are_left_the_refusal_names_the_taint() -> None:
    cluster = _cluster(_gpu("gpu-0", XID))
    with pytest.raises(memory_allocator.AllocationError,
                       match=r"not tolerated: gpu-0 \(gpu.nvidia.com/xid=79:NoSchedule"):
        _schedule(cluster, "a")


def test_effect_none_only_informs() -> None:
    cluster = _cluster(_gpu("gpu-0", {"key": "gpu.nvidia.com/xid", "value": "13",
                                      "effect": "None"}))
    assert _schedule(cluster, "a") == "gpu-0"


@pytest.mark.parametrize("toleration", [
    {"key": "gpu.nvidia.com/xid", "operator": "Exists"},
    {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "79", "effect": "NoSchedule"},
    {"operator": "Exists"},
])
def test_a_tolerating_request_may_get_the_tainted_device(toleration: dict[str, str]) -> None:
    cluster = _cluster(_gpu("gpu-0", XID))
    assert _schedule(cluster, "a", [toleration]) == "gpu-0"


@pytest.mark.parametrize("toleration", [
    {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "48"},
    {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists"},
    {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoExecute"},
])
def test_a_toleration_of_something_else_does_not_help(toleration: dict[str, str]) -> None:
    taint = _taints.Taint(key=XID["key"], value=XID["value"], effect=XID["effect"])
    assert _taints.untolerated((taint,), _taints.tolerations_of({"tolerations": [toleration]}))


@pytest.mark.parametrize(("version", "accepted"), [("v1.34.4", False), ("v1.35.0", True)])
def test_the_embedded_api_server_takes_effect_none_from_1_35_as_the_real_one(
    version: str, accepted: bool
) -> None:
    from core import errors

    cluster = memory_cluster.InMemoryCluster(server_version=version)
    informational = {"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}
    slice_ = {"metadata": {"name": "node-a-gpu"}, "spec": {
        "driver": DRIVER, "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-a", "devices": [_gpu("gpu-0", informational)]}}
    if accepted:
        cluster.create("ResourceSlice", slice_)
    else:
        with pytest.raises(errors.ClusterError, match=r"Unsupported value: 'None'"):
            cluster.create("ResourceSlice", slice_)
    cluster.create("ResourceSlice", {**slice_, "metadata": {"name": "other"}, "spec": {
        **slice_["spec"], "devices": [_gpu("gpu-0", XID)]}})
