"""The embedded API server stands in for one without gate DRADeviceBindingConditions (its
scheduler never waits for binding conditions): as kube-apiserver then does, it drops a
ResourceSlice device's `bindingConditions`, `bindingFailureConditions` and `bindsToNode`, and
a claim's allocation results' binding conditions, without an error."""

from __future__ import annotations

from typing import Any

from adapters.memory import cluster as memory_cluster

BINDING = {"bindingConditions": ["example.com/ready"],
           "bindingFailureConditions": ["example.com/failed"], "bindsToNode": True}


def _slice(device: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "node-1-cd"},
            "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "node-1",
                     "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [device]}}


def test_slice_devices_lose_their_binding_conditions_on_create_and_patch() -> None:
    cluster = memory_cluster.InMemoryCluster()
    made = cluster.create("ResourceSlice", _slice({"name": "channel-0", **BINDING}))
    assert made["spec"]["devices"] == [{"name": "channel-0"}]
    patched = cluster.patch("ResourceSlice", namespace="", name="node-1-cd", patch={"spec": {
        "devices": [{"name": "channel-0", **BINDING}]}})
    assert patched["spec"]["devices"] == [{"name": "channel-0"}]


def test_claim_allocation_results_lose_their_binding_conditions() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create("ResourceClaim", {"metadata": {"name": "c", "namespace": "ns"},
                                     "spec": {"devices": {"requests": []}}})
    result = {"request": "channel", "driver": "compute-domain.nvidia.com", "pool": "node-1",
              "device": "channel-0"}
    patched = cluster.patch("ResourceClaim", namespace="ns", name="c", subresource="status",
                            patch={"status": {"allocation": {"devices": {"results": [
                                {**result, "bindingConditions": ["example.com/ready"],
                                 "bindingFailureConditions": ["example.com/failed"]}]}}}})
    assert patched["status"]["allocation"]["devices"]["results"] == [result]
