"""MPS under a real control plane: a user's pod with an MPS claim, the daemon as a Deployment.

One simulated H100 node, the chart with the GPU half and MPSSupport on. A pod asks for a GPU
with `strategy: MPS`; the real scheduler allocates it, the kubelet calls the plugin, and the
plugin: puts the GPU in EXCLUSIVE_PROCESS (the stand-in nvidia-smi records it), creates the
`mps-control-daemon-<claimUID>-<hash>` Deployment, which the real deployment controller and
kubelet turn into a pod that the stand-in runtime runs as our wrapper with the stand-in
`nvidia-cuda-mps-control`, and answers only once that pod is Ready. Deleting the pod stops the
daemon (it got `quit`), deletes the Deployment and restores DEFAULT.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NAMESPACE, Cluster

from adapters.mps import simulated as simulated_mps
from adapters.nvsmi import simulated as simulated_smi
from core.gpu import cdi as gpu_cdi
from core.gpu import mps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

GPU_DRIVER = "gpu.nvidia.com"
MPS_VALUES: dict[str, Any] = {
    "resources": {"gpus": {"enabled": True}},
    "featureGates": {"MPSSupport": True},
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_driver.started("driverManaged", values=MPS_VALUES, gpu_profile="hgx-h100")


def gpu_plugin_dir(cluster: Cluster) -> pathlib.Path:
    return cluster.kubelet_dir / "plugins" / GPU_DRIVER


def mps_template(name: str) -> dict[str, Any]:
    config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
              "sharing": {"strategy": "MPS", "mpsConfig": {
                  "defaultActiveThreadPercentage": 50,
                  "defaultPinnedDeviceMemoryLimit": "1Gi"}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": workloads.WORKLOAD_NAMESPACE},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_DRIVER}}],
                "config": [{"requests": ["gpu"],
                            "opaque": {"driver": GPU_DRIVER, "parameters": config}}]}}}}


def daemon_deployments(cluster: Cluster) -> list[dict[str, Any]]:
    return [d for d in workloads.list_objects(cluster, "apps/v1", "Deployment", NAMESPACE)
            if d["metadata"]["name"].startswith(mps.DAEMON_NAME_PREFIX)]


def smi_calls(cluster: Cluster) -> tuple[str, ...]:
    return simulated_smi.calls(str(pathlib.Path(cluster.files.gpu.nvidia_smi).parent))


def test_an_mps_pod_runs_beside_its_ready_daemon_and_unprepare_stops_it(
    cluster: Cluster,
) -> None:
    workloads.ensure_namespace(cluster)
    workloads.create(cluster, mps_template("mps-gpu"))
    workloads.create(cluster, workloads.pod(
        "mps-pod", containers=2, claims=[("gpu", {"resourceClaimTemplateName": "mps-gpu"})]))
    running = workloads.running(cluster, "mps-pod", timeout_s=180)
    (claim,) = workloads.claims_of(cluster, running)
    uid = claim["metadata"]["uid"]
    (device,) = [r for r in claim["status"]["allocation"]["devices"]["results"]
                 if r["driver"] == GPU_DRIVER]

    # The daemon: upstream's name, pinned to the node, Ready before the pod ran.
    (deployment,) = daemon_deployments(cluster)
    name = deployment["metadata"]["name"]
    assert name.startswith(f"mps-control-daemon-{uid}-")
    daemon_id = name.removeprefix(mps.DAEMON_NAME_PREFIX)
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == cluster_driver.NODE and pod_spec["hostPID"] is True
    assert deployment["status"]["readyReplicas"] == 1

    # The daemon took the claim's settings, for the claim's GPU only.
    dirs = mps.daemon_dirs(str(gpu_plugin_dir(cluster) / "mps"), daemon_id)
    state = simulated_mps.state(dirs.log)
    assert state is not None
    (gpu_uuid,) = state["visibleDevices"].split(",")  # type: ignore[union-attr]
    assert state["activeThreadPercentage"] == 50
    assert state["pinnedMemLimits"] == {gpu_uuid: "1024M"}
    assert f"-i {gpu_uuid} -c EXCLUSIVE_PROCESS" in smi_calls(cluster)

    # Both containers were given the claim's device; its CDI spec connects them to the daemon.
    spec = json.loads((cluster.cdi_root / gpu_cdi.spec_file_name(uid)).read_text())
    (cdi_device,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device['device']}"]
    edits = cdi_device["containerEdits"]
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in edits["env"]
    assert {m["hostPath"] for m in edits["mounts"]} == {dirs.pipe, dirs.shm}
    records = workloads.container_records(cluster, "mps-pod")
    assert len(records) == 2
    assert all(any(uid in d for d in r["cdi_devices"]) for r in records)

    # Unprepare: the daemon quits, its Deployment and directories go, the GPU is DEFAULT again.
    workloads.delete_pod(cluster, "mps-pod")
    cluster.eventually(lambda: not daemon_deployments(cluster) or None,
                       what="the MPS daemon's Deployment to be deleted", timeout_s=120)
    cluster.eventually(lambda: not pathlib.Path(dirs.root).exists() or None,
                       what="the daemon's directories to be removed", timeout_s=60)
    assert simulated_mps.state(dirs.log) is None
    calls = smi_calls(cluster)
    exclusive = calls.index(f"-i {gpu_uuid} -c EXCLUSIVE_PROCESS")
    assert f"-i {gpu_uuid} -c DEFAULT" in calls[exclusive + 1:]
