"""The embedded scheduler's shared counters (KEP-4815 partitionable devices), as kube-scheduler.

Covers: a full GPU and a partition that overlaps it are never both allocated (either order);
partitions never overlap, and disjoint ones fit side by side until the counters are spent,
with the refusal naming the counter; counter sets published in a slice of their own (v1.35
layout) count too; a device of several claims (consumable capacity) consumes once; a request
for two devices never picks two that overlap each other; releasing a claim gives its counters
back.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster

DRIVER = "gpu.nvidia.com"
NS = "team"
CLASS = "gpu.nvidia.com"
SLICES = 4  # memory slices of the one GPU


def _device(name: str, slices: range, *, shares: int | None = None) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name, "attributes": {"profile": {"string": f"{len(slices)}g"}},
        "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {
            **{f"memory-slice-{i}": {"value": "1"} for i in slices},
            "memory": {"value": f"{10 * len(slices)}Gi"}}}],
    }
    if shares is not None:
        device["allowMultipleAllocations"] = True
        device["capacity"] = {"shares": {"value": str(shares), "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": str(shares), "step": "1"}}}}
    return device


def _counter_set() -> dict[str, Any]:
    return {"name": "gpu-0-counter-set", "counters": {
        **{f"memory-slice-{i}": {"value": "1"} for i in range(SLICES)},
        "memory": {"value": "40Gi"}}}


def _cluster(*devices: dict[str, Any], separate: bool = False) -> memory_cluster.InMemoryCluster:
    # Counter sets beside devices: the v1.34 layout; in a slice of their own from v1.35.
    cluster = memory_cluster.InMemoryCluster(
        seed=7, server_version="v1.35.0" if separate else "v1.34.0")
    cluster.create("DeviceClass", {"metadata": {"name": CLASS}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    pool = {"name": "node-a", "generation": 1, "resourceSliceCount": 2 if separate else 1}
    spec: dict[str, Any] = {"driver": DRIVER, "pool": pool, "nodeName": "node-a",
                            "devices": list(devices)}
    if separate:
        cluster.create("ResourceSlice", {"metadata": {"name": "node-a-counters"}, "spec": {
            "driver": DRIVER, "pool": pool, "nodeName": "node-a",
            "sharedCounters": [_counter_set()]}})
    else:
        spec["sharedCounters"] = [_counter_set()]
    cluster.create("ResourceSlice", {"metadata": {"name": "node-a-gpu"}, "spec": spec})
    return cluster


def _schedule(cluster: memory_cluster.InMemoryCluster, name: str, *, profile: str = "",
              count: int = 1) -> list[str]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": count}
    if profile:
        exactly["selectors"] = [{"cel": {
            "expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}]
    cluster.create("ResourceClaim", {"metadata": {"name": name, "namespace": NS}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    pod = {"metadata": {"name": f"{name}-pod", "namespace": NS}, "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}}
    scheduled = memory_allocator.Allocator(cluster).schedule_pod(pod)
    results = scheduled.claims[0]["status"]["allocation"]["devices"]["results"]
    return [str(r["device"]) for r in results]


FULL = _device("gpu-0", range(SLICES))
LOW_2G = _device("mig-2g-0", range(0, 2))
HIGH_2G = _device("mig-2g-2", range(2, 4))
MID_2G = _device("mig-2g-1", range(1, 3))


@pytest.mark.parametrize("separate", [False, True])
def test_a_full_gpu_and_a_partition_of_it_are_never_both_allocated(separate: bool) -> None:
    cluster = _cluster(FULL, LOW_2G, separate=separate)
    assert _schedule(cluster, "whole", profile="4g") == ["gpu-0"]
    with pytest.raises(memory_allocator.AllocationError,
                       match="mig-2g-0 would exceed counter memory of counter set"):
        _schedule(cluster, "part", profile="2g")


def test_a_partition_first_leaves_no_room_for_the_full_gpu() -> None:
    cluster = _cluster(FULL, LOW_2G)
    assert _schedule(cluster, "part", profile="2g") == ["mig-2g-0"]
    with pytest.raises(memory_allocator.AllocationError, match="gpu-0 would exceed"):
        _schedule(cluster, "whole", profile="4g")


def test_partitions_never_overlap_and_disjoint_ones_fit_until_spent() -> None:
    cluster = _cluster(LOW_2G, MID_2G, HIGH_2G)
    assert _schedule(cluster, "a", profile="2g") == ["mig-2g-0"]
    # mig-2g-1 (slices 1-2) overlaps mig-2g-0: the scheduler takes mig-2g-2.
    assert _schedule(cluster, "b", profile="2g") == ["mig-2g-2"]
    with pytest.raises(memory_allocator.AllocationError, match="only 0 are free"):
        _schedule(cluster, "c", profile="2g")


def test_one_request_for_two_devices_never_picks_overlapping_ones() -> None:
    cluster = _cluster(LOW_2G, MID_2G, HIGH_2G)
    assert _schedule(cluster, "pair", profile="2g", count=2) == ["mig-2g-0", "mig-2g-2"]


def test_a_device_of_several_claims_consumes_its_counters_once() -> None:
    cluster = _cluster(_device("gpu-0", range(SLICES), shares=2))
    assert _schedule(cluster, "a") == ["gpu-0"]
    assert _schedule(cluster, "b") == ["gpu-0"]


def test_a_released_claim_gives_its_counters_back() -> None:
    cluster = _cluster(FULL, LOW_2G)
    _schedule(cluster, "whole", profile="4g")
    cluster.delete("ResourceClaim", namespace=NS, name="whole")
    assert _schedule(cluster, "part", profile="2g") == ["mig-2g-0"]
