"""Figures on the real control plane: the path a user's pod takes, end to end.

The control-plane tier's harness (`tests/integration/controlplane`): kube-apiserver,
kube-scheduler, kube-controller-manager and a kubelet with the stand-in runtime, the chart
installed, every app of ours run by the kubelet. Three figures, each from the user's create or
delete call to the state being visible through the API (polled every 50 ms, so each sample
carries up to that much extra):

- `gpu_pod_to_running`: a pod with a one-GPU claim template created -> Running (claim made,
  scheduled, prepared, container started);
- `cd_to_workload_running`: a driver-managed ComputeDomain and its workload pod created ->
  the workload Running (RCT, channel claim, node label, IMEX daemon pod Ready, domain Ready);
- `workload_deleted_to_node_released`: the workload pod deleted -> the node's ComputeDomain
  label gone and the domain no longer listing the node.

Skipped (with the reason in the JSON) when `make kube-components` has not built the binaries.
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

from bench import stats

_TIER = pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"


def load_harness() -> tuple[Any, Any, Any]:
    for directory in ("controlplane", "realkube", "helm"):
        sys.path.insert(0, str(_TIER / directory))
    import cluster_driver
    import test_controlplane_compute_domain as cd_steps
    import workloads

    return cluster_driver, workloads, cd_steps


def _gpu_template(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}}


def run(*, gpu_runs: int, cd_runs: int) -> dict[str, Any]:
    """All three figures on one freshly started cluster (driverManaged, GPU half on)."""
    cluster_driver, workloads, cd_steps = load_harness()
    if cluster_driver.control_plane.binaries_dir() is None:
        return {"skipped": cluster_driver.control_plane.MISSING}
    values = {"resources": {"gpus": {"enabled": True}}}
    cluster = cluster_driver.Cluster("driverManaged", values=values, gpu_profile="hgx-h100")
    try:
        cluster.start()
        workloads.ensure_namespace(cluster)
        workloads.create(cluster, _gpu_template("bench-gpu"))
        gpu_samples: list[float] = []
        for i in range(gpu_runs):
            name = f"bench-gpu-{i}"
            started = time.monotonic()
            workloads.create(cluster, workloads.pod(
                name, claims=[("gpu", {"resourceClaimTemplateName": "bench-gpu"})]))
            workloads.running(cluster, name, timeout_s=180)
            gpu_samples.append(time.monotonic() - started)
            workloads.delete_pod(cluster, name)
        cd_samples: list[float] = []
        release_samples: list[float] = []
        for i in range(cd_runs):
            cd_name = f"bench-cd-{i}"
            started = time.monotonic()
            cd_steps.run_workload(cluster, cd_name)
            cd_samples.append(time.monotonic() - started)
            started = time.monotonic()
            cluster.core().delete_namespaced_pod(f"{cd_name}-worker", "team-a")
            cluster.eventually(
                lambda name=cd_name: cd_steps.node_label(cluster) is None
                and cluster_driver.NODE not in cd_steps.status_nodes(cluster, name),
                what="the node released", timeout_s=120)
            release_samples.append(time.monotonic() - started)
            workloads.resources(cluster, cd_steps.CD_API, "ComputeDomain").delete(
                name=cd_name, namespace="team-a")
            cluster.eventually(lambda name=cd_name: cd_steps.read_cd(cluster, name) is None,
                               what="the ComputeDomain deleted", timeout_s=120)
        return {
            "kubernetes": cluster_driver.control_plane.kube_version(),
            "gpu_pod_to_running": stats.summarize(gpu_samples),
            "cd_to_workload_running": stats.summarize(cd_samples),
            "workload_deleted_to_node_released": stats.summarize(release_samples),
            "poll_interval_ms": 50,
        }
    finally:
        cluster.stop()
        cluster.remove()
