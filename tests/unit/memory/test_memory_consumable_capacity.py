"""The embedded scheduler's consumable capacity: devices several claims share, as kube-scheduler.

Covers: quantities; what a request consumes under a range policy, valid values, a default or
none; two claims on one shareable device, each with a shareID and its consumedCapacity, until the
capacity is spent; capacity asked of an exclusive device or beyond a policy's max never fits.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.memory import _capacity
from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster

DRIVER = "gpu.nvidia.com"
NS = "team"
CLASS = "gpu.nvidia.com"


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("2", 2), ("+3", 3), ("1Mi", 2**20), ("80Gi", 80 * 2**30), ("4k", 4000),
])
def test_whole_quantities_parse(text: str, value: int) -> None:
    assert _capacity.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.5Gi", "100m", "-1", "Gi"])
def test_other_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a whole quantity"):
        _capacity.parse_quantity(text)


MIB = 2**20
RANGE = _capacity.Capacity(value=80 * MIB, default=0, low=MIB, high=80 * MIB, step=MIB)


@pytest.mark.parametrize(("requested", "capacity", "consumed"), [
    (None, _capacity.Capacity(value=8), 8),                       # no policy: all of it
    (None, RANGE, 0),                                             # the policy's default
    (3 * MIB, RANGE, 3 * MIB),
    (1, RANGE, MIB),                                              # raised to min
    (MIB + 1, RANGE, 2 * MIB),                                    # rounded up to a step
    (81 * MIB, RANGE, None),                                      # above max
    (3, _capacity.Capacity(value=8, valid_values=(2, 4, 8)), 4),  # next valid value
    (9, _capacity.Capacity(value=8, valid_values=(2, 4, 8)), None),
    (5, _capacity.Capacity(value=8), 5),                          # no policy: as asked
])
def test_what_a_request_consumes(requested: int | None, capacity: _capacity.Capacity,
                                 consumed: int | None) -> None:
    assert _capacity.consumed(requested, capacity) == consumed


def _gpu(name: str, *, shares: int | None) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": {"type": {"string": "gpu"}},
                              "capacity": {"memory": {"value": "40Gi"}}}
    if shares is not None:
        device["allowMultipleAllocations"] = True
        device["capacity"]["shares"] = {"value": str(shares), "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": str(shares), "step": "1"}}}
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": "0", "validRange": {"min": "0", "max": "40Gi", "step": "1Mi"}}
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
              capacity: dict[str, str] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS}
    if capacity is not None:
        exactly["capacity"] = {"requests": capacity}
    cluster.create("ResourceClaim", {"metadata": {"name": name, "namespace": NS}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    pod = {"metadata": {"name": f"{name}-pod", "namespace": NS}, "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}}
    scheduled = memory_allocator.Allocator(cluster).schedule_pod(pod)
    [result] = scheduled.claims[0]["status"]["allocation"]["devices"]["results"]
    return dict(result)


def test_two_claims_share_a_device_until_its_shares_are_spent() -> None:
    cluster = _cluster(_gpu("gpu-0", shares=2), _gpu("gpu-1", shares=None))
    first = _schedule(cluster, "a", {"shares": "1"})
    second = _schedule(cluster, "b", {"shares": "1"})
    assert first["device"] == second["device"] == "gpu-0"
    assert first["shareID"] != second["shareID"]
    assert first["consumedCapacity"] == {"memory": "0", "shares": "1"}
    # gpu-0's shares are spent, and gpu-1 is exclusive: capacity cannot be asked of it.
    with pytest.raises(memory_allocator.AllocationError, match="capacity left"):
        _schedule(cluster, "c", {"shares": "1"})


def test_a_claim_without_capacity_requests_takes_the_defaults_or_a_whole_device() -> None:
    cluster = _cluster(_gpu("gpu-0", shares=None), _gpu("gpu-1", shares=2))
    whole = _schedule(cluster, "a")
    assert whole["device"] == "gpu-0" and "shareID" not in whole
    share = _schedule(cluster, "b")
    assert share["device"] == "gpu-1" and share["consumedCapacity"]["shares"] == "1"


def test_more_than_a_policy_allows_never_fits() -> None:
    cluster = _cluster(_gpu("gpu-0", shares=2))
    with pytest.raises(memory_allocator.AllocationError, match="only 0 are free"):
        _schedule(cluster, "a", {"memory": "41Gi"})


def test_a_malformed_capacity_request_is_reported() -> None:
    cluster = _cluster(_gpu("gpu-0", shares=2))
    with pytest.raises(memory_allocator.AllocationError, match="capacity: 'lots' is not"):
        _schedule(cluster, "a", {"memory": "lots"})
