"""The plugins' container-runtime CDI check under a real kubelet, with the stand-in runtime.

The stand-in answers a verbose CRI Status with what its status-info file says (cluster_driver
writes one like containerd with CDI on). Each step rewrites the file and rolls the plugin
DaemonSet, so the new plugin pods judge it at their start: with CDI off a GPU pod stays
ContainerCreating and the kubelet's events on it carry the plugins' message, the Node condition
says why; with other spec dirs the condition says that; answering like CRI-O (its version-info
file), 1.22 has no CDI, and 1.31 has it but reports no spec dirs, so with the tier's CDI root
(not a CRI-O default) the check cannot tell: the kubelet's next prepare succeeds and the pod
runs. Last, containerd with CDI on again.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NAMESPACE, NODE, Cluster
from test_controlplane_gpu import template
from workloads import WORKLOAD_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PLUGIN_COMPONENT = "kubelet-plugin"
CONDITION = "ContainerRuntimeCDIDisabled"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for started in cluster_driver.started(
        "driverManaged", values={"resources": {"gpus": {"enabled": True}}},
        gpu_profile="a100-mig",
    ):
        workloads.ensure_namespace(started)
        yield started


def answer_like_containerd(cluster: Cluster, *, enable_cdi: bool, spec_dirs: list[str]) -> None:
    info = cluster_driver.containerd_status_info(enable_cdi=enable_cdi, spec_dirs=tuple(spec_dirs))
    (cluster.node_root / "status-info.json").write_text(json.dumps(info), encoding="utf-8")


def answer_like_crio(cluster: Cluster, version: str) -> None:
    """CRI-O's answers: its name and version; no config in the verbose status."""
    (cluster.node_root / "version-info.json").write_text(json.dumps(
        {"runtimeName": "cri-o", "runtimeVersion": version}), encoding="utf-8")
    (cluster.node_root / "status-info.json").write_text("{}", encoding="utf-8")


def running_plugin_uid(cluster: Cluster) -> str | None:
    pods = [p for p in workloads.list_objects(cluster, "v1", "Pod", NAMESPACE)
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            == PLUGIN_COMPONENT]
    if len(pods) != 1 or pods[0].get("status", {}).get("phase") != "Running":
        return None
    statuses = pods[0]["status"].get("containerStatuses", [])
    return str(pods[0]["metadata"]["uid"]) if statuses and all(
        s.get("ready") for s in statuses) else None


def roll_plugins(cluster: Cluster) -> None:
    """Replace the plugin pod (as `kubectl rollout restart`): its plugins check at start."""
    old = cluster.eventually(lambda: running_plugin_uid(cluster), what="the plugin pod")
    workloads.resources(cluster, "apps/v1", "DaemonSet").patch(
        name=f"{cluster_driver.RELEASE}-compute-domain-dra-driver-kubelet-plugin",
        namespace=NAMESPACE, content_type="application/merge-patch+json",
        body={"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt":
                datetime.datetime.now(datetime.UTC).isoformat()}}}}})
    cluster.eventually(lambda: running_plugin_uid(cluster) not in (None, old),
                       what="the rolled plugin pod Running", timeout_s=180)


def node_condition(cluster: Cluster) -> tuple[str, str] | None:
    for condition in cluster.core().read_node(NODE).status.conditions or []:
        if condition.type == CONDITION:
            return condition.status, condition.reason
    return None


def wait_condition(cluster: Cluster, expected: tuple[str, str]) -> None:
    cluster.eventually(lambda: node_condition(cluster) == expected,
                       what=f"Node condition {CONDITION}={expected}", timeout_s=120)


def pod_event_messages(cluster: Cluster, pod_name: str) -> list[str]:
    events = cluster.core().list_namespaced_event(WORKLOAD_NAMESPACE).items
    return [e.message or "" for e in events if e.involved_object.name == pod_name]


def test_prepares_wait_for_a_runtime_that_applies_cdi_specs(cluster: Cluster) -> None:
    wait_condition(cluster, ("False", "CDIApplied"))  # cluster_driver's default answer

    answer_like_containerd(cluster, enable_cdi=False, spec_dirs=[str(cluster.cdi_root)])
    roll_plugins(cluster)
    wait_condition(cluster, ("True", "CDIOff"))
    workloads.create(cluster, template("cdi-gpu", "gpu.nvidia.com"))
    workloads.create(cluster, workloads.pod(
        "cdi-pod", claims=[("gpu", {"resourceClaimTemplateName": "cdi-gpu"})]))

    def refused() -> list[str] | None:
        found = [m for m in pod_event_messages(cluster, "cdi-pod")
                 if "has CDI disabled (enableCDI=false)" in m]
        return found or None

    (message, *_) = cluster.eventually(refused, what="the prepare error on the pod",
                                       timeout_s=120)
    assert "enable_cdi = true" in message
    pod: dict[str, Any] = workloads.read_pod(cluster, "cdi-pod") or {}
    assert pod.get("status", {}).get("phase") == "Pending"
    assert not list(cluster.cdi_root.glob("k8s.gpu.nvidia.com-claim_*"))

    answer_like_containerd(cluster, enable_cdi=True, spec_dirs=["/etc/cdi"])
    roll_plugins(cluster)
    wait_condition(cluster, ("True", "CDIRootNotWatched"))

    answer_like_crio(cluster, "1.22.5")
    roll_plugins(cluster)
    wait_condition(cluster, ("True", "CDIOff"))

    answer_like_crio(cluster, "1.31.2")
    roll_plugins(cluster)
    wait_condition(cluster, ("Unknown", "RuntimeNotUnderstood"))
    workloads.running(cluster, "cdi-pod", timeout_s=180)
    workloads.delete_pod(cluster, "cdi-pod")

    (cluster.node_root / "version-info.json").unlink()
    answer_like_containerd(cluster, enable_cdi=True, spec_dirs=[str(cluster.cdi_root)])
    roll_plugins(cluster)
    wait_condition(cluster, ("False", "CDIApplied"))
