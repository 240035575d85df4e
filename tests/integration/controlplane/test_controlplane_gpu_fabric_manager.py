"""Fabric Manager partitions under the real scheduler and kubelet (gate FabricManagerPartitioning).

One simulated HGX H100 node (`hgx-h100`: eight GPUs on an NVSwitch board, module ids 1..8, the
nvswitch driver's devices in its /proc), the chart with both halves and the gate on (the
ComputeDomain plugin starts with it, as upstream's); the GPU plugin talks to the simulated Fabric
Manager, whose activations the test reads from its state file in the driver root. Run the
module with KUBE_VERSION=v1.37.2 and v1.34.4.

Covers: claims of 2, 4 and 8 GPUs constrained with `matchAttribute: gpu.nvidia.com/partition<N>`
are allocated one partition's GPUs by the scheduler (two pairs, then both halves, side by
side), their pods run with that partition active, and deleting a pod deactivates its partition
and no other; a claim of 3 GPUs (which form no partition) is refused at
prepare, with the message in the pod's events, and activates nothing.
"""

from __future__ import annotations

from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

from adapters import fabricmanager
from adapters.nvml import gpu_simulation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_DRIVER = "gpu.nvidia.com"


@pytest.fixture(scope="module")
def cluster() -> Any:
    # Both halves: the gate reaches the ComputeDomain plugin too (one FEATURE_GATES), which
    # starts with it as upstream's does.
    values = {"resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
              "featureGates": {"FabricManagerPartitioning": True}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile="hgx-h100")


active = cluster_driver.active_fabric_partitions


def module_ids() -> dict[str, int]:
    """Each GPU device's module id on the simulated board."""
    inventory = gpu_simulation.simulated_gpus("hgx-h100", node_name=NODE).gpu_inventory()
    return {g.name: g.module_id for g in inventory.gpus if g.module_id}


def template(name: str, count: int, *, partition_size: int | None) -> dict[str, Any]:
    exactly = {"deviceClassName": "gpu.nvidia.com", "count": count}
    request: dict[str, Any] = {"name": "gpus", "exactly": exactly}
    devices: dict[str, Any] = {"requests": [request]}
    if partition_size is not None:
        devices["constraints"] = [{
            "requests": ["gpus"], "matchAttribute": f"{GPU_DRIVER}/partition{partition_size}"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"spec": {"devices": devices}}}


def start_pod(cluster: Cluster, rct: str, name: str) -> None:
    workloads.create(cluster, workloads.pod(
        name, claims=[("gpus", {"resourceClaimTemplateName": rct})]))


def allocated(cluster: Cluster, pod_name: str) -> list[str]:
    pod = workloads.read_pod(cluster, pod_name)
    assert pod is not None
    (claim,) = workloads.claims_of(cluster, pod)
    return sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
                  if r["driver"] == GPU_DRIVER)


def partition_of(devices: list[str]) -> int:
    """The HGX table's partition whose modules are exactly those of `devices`."""
    modules = frozenset(module_ids()[d] for d in devices)
    (found,) = [p.partition_id for p in fabricmanager.SimulatedFabricManager().partitions()
                if p.module_ids == modules]
    return found


def published(cluster: Cluster) -> dict[str, dict[str, Any]] | None:
    found = {d["name"]: d.get("attributes", {})
             for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
             if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("nodeName") == NODE
             for d in s["spec"].get("devices") or ()}
    return found or None


def pod_events(cluster: Cluster, pod_name: str) -> list[str]:
    events = cluster.core().list_namespaced_event(
        WORKLOAD_NAMESPACE, field_selector=f"involvedObject.name={pod_name}")
    return [f"{e.reason}: {e.message}" for e in events.items]


def test_partition_constrained_claims_run_with_their_partition_active(cluster: Cluster) -> None:
    workloads.ensure_namespace(cluster)
    devices = cluster.eventually(lambda: published(cluster), what="the GPU plugin's slice",
                                 timeout_s=180)
    assert devices["gpu-0"]["partition2"] == {"int": 4}
    assert active(cluster) == set()
    for size in (2, 4, 8):
        workloads.create(cluster, template(f"p{size}", size, partition_size=size))

    # On an HGX H100 board every 2-GPU pair spans both 4-GPU halves, so pairs run beside pairs
    # and halves beside halves, never a pair beside a half (Fabric Manager would refuse it).
    for size, names in ((2, ("pair-a", "pair-b")), (4, ("half-a", "half-b"))):
        for name in names:
            start_pod(cluster, f"p{size}", name)
        for name in names:
            workloads.running(cluster, name)
        first, second = (allocated(cluster, name) for name in names)
        assert len(first) == len(second) == size and not set(first) & set(second)
        assert active(cluster) == {partition_of(first), partition_of(second)}

        kept = {partition_of(second)}
        workloads.delete_pod(cluster, names[0])
        cluster.eventually(lambda: active(cluster) == kept or None,  # noqa: B023 - used at once
                           what=f"{names[0]}'s partition deactivated, {names[1]}'s kept")
        workloads.delete_pod(cluster, names[1])
        cluster.eventually(lambda: active(cluster) == set() or None,
                           what=f"{names[1]}'s partition deactivated")

    start_pod(cluster, "p8", "all")
    workloads.running(cluster, "all")
    assert len(allocated(cluster, "all")) == 8
    assert active(cluster) == {partition_of(sorted(allocated(cluster, "all")))}
    workloads.delete_pod(cluster, "all")
    cluster.eventually(lambda: active(cluster) == set() or None,
                       what="the 8-GPU partition deactivated")


def test_three_gpus_are_refused_at_prepare_with_the_message_in_the_pod_events(
    cluster: Cluster,
) -> None:
    workloads.ensure_namespace(cluster)
    workloads.create(cluster, template("three", 3, partition_size=None))

    start_pod(cluster, "three", "three")

    def refused() -> str | None:
        return next((e for e in pod_events(cluster, "three")
                     if "do not form a Fabric Manager partition" in e), None)

    message = cluster.eventually(refused, what="the failed prepare in the pod's events",
                                 timeout_s=120)
    assert "matchAttribute gpu.nvidia.com/partition<N>" in message
    assert active(cluster) == set()
    workloads.delete_pod(cluster, "three")
