"""Claim device status (KEP-4817) through a real API server, with the chart's RBAC.

Each kubelet plugin runs with its pod's projected ServiceAccount token, so the API server's
own authorization decides whether it may write `status.devices` (on 1.37 also the per-driver
`resourceclaims/driver` check for claims allocated on the writer's node). A GPU pod's claim
gets a Ready entry with the GPU's UUID and PCI address, a ComputeDomain workload's claim one
with its domain and IMEX channel; once the pod is gone, our entries are too.
"""

from __future__ import annotations

from typing import Any

import pytest
import workloads
from cluster_driver import Cluster
from test_controlplane_compute_domain import run_workload
from workloads import WORKLOAD_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"


@pytest.fixture(scope="module")
def cluster(driver_managed: Cluster) -> Cluster:
    workloads.ensure_namespace(driver_managed)
    return driver_managed


def read_claim(cluster: Cluster, name: str) -> dict[str, Any] | None:
    found = [c for c in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceClaim",
                                               WORKLOAD_NAMESPACE)
             if c["metadata"]["name"] == name]
    return found[0] if found else None


def entries(claim: dict[str, Any] | None, driver: str) -> list[dict[str, Any]]:
    devices = ((claim or {}).get("status") or {}).get("devices") or []
    return [d for d in devices if d["driver"] == driver]


def ready(entry: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in entry["conditions"])


def test_a_gpu_claim_shows_its_gpu_until_the_pod_is_gone(cluster: Cluster) -> None:
    workloads.create(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "status-gpu", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com"}}]}},
    })
    workloads.create(cluster, workloads.pod(
        "status-gpu-pod", claims=[("gpu", {"resourceClaimName": "status-gpu"})]))
    workloads.running(cluster, "status-gpu-pod", timeout_s=180)
    (entry,) = cluster.eventually(
        lambda: entries(read_claim(cluster, "status-gpu"), GPU_DRIVER) or None,
        what="the GPU plugin's entry in status.devices")
    claim = read_claim(cluster, "status-gpu")
    assert claim is not None
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (entry["pool"], entry["device"]) == (result["pool"], result["device"])
    assert ready(entry)
    assert entry["data"]["type"] == "gpu"
    assert entry["data"]["uuid"].startswith("GPU-") and entry["data"]["pciBusID"]
    workloads.delete_pod(cluster, "status-gpu-pod")
    # Unprepared: our entry goes (the claim itself stays, it is not the pod's).
    cluster.eventually(lambda: not entries(read_claim(cluster, "status-gpu"), GPU_DRIVER),
                       what="the GPU plugin's entry cleared")


def test_a_compute_domain_claim_shows_its_domain_and_channel(cluster: Cluster) -> None:
    cd_uid, pod = run_workload(cluster, "status-cd")
    (claim,) = workloads.claims_of(cluster, pod)
    name = claim["metadata"]["name"]
    (entry,) = cluster.eventually(lambda: entries(read_claim(cluster, name), CD_DRIVER) or None,
                                  what="the ComputeDomain plugin's entry in status.devices")
    assert ready(entry) and entry["device"] == "channel-0"
    assert entry["data"]["domainID"] == cd_uid
    assert entry["data"]["channelIDs"] == [0]
    assert entry["data"]["type"] == "channel"
    workloads.delete_pod(cluster, "status-cd-worker", timeout_s=180)
    # A claim made from a template goes with its pod.
    cluster.eventually(lambda: not entries(read_claim(cluster, name), CD_DRIVER),
                       what="the workload claim's entry gone")
