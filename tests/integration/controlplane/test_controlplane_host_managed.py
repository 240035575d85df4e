"""Host-managed IMEX with channel isolation, through a real rolling update of the plugin.

Two ComputeDomains on one node get distinct channels; between them the kubelet-plugin DaemonSet
is rolled (a new template, as `kubectl rollout restart` does): the DaemonSet controller replaces
the plugin pod, the kubelet stops the old plugin and starts the new one, which must keep the
first workload's claim prepared and give the second domain its own channel. Last, the node goes
away: its Node object deleted, its ResourceSlices must follow (they are owned by the Node).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NAMESPACE, NODE, Cluster
from test_controlplane_compute_domain import CD_DRIVER, compute_domain, read_cd

# A cluster starts within the first test (about 30 s), and every step waits on real controllers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

PLUGIN_COMPONENT = "kubelet-plugin"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for started in cluster_driver.started("hostManaged-channel"):
        workloads.ensure_namespace(started)
        yield started


def plugin_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in workloads.list_objects(cluster, "v1", "Pod", NAMESPACE)
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            == PLUGIN_COMPONENT]


def running_plugin_uid(cluster: Cluster) -> str | None:
    """The uid of the only plugin pod when it is Running and ready."""
    pods = plugin_pods(cluster)
    if len(pods) != 1 or pods[0].get("status", {}).get("phase") != "Running":
        return None
    statuses = pods[0]["status"].get("containerStatuses", [])
    return str(pods[0]["metadata"]["uid"]) if statuses and all(
        s.get("ready") for s in statuses) else None


def channel_of(cluster: Cluster, pod_name: str) -> list[str]:
    (record,) = workloads.container_records(cluster, pod_name)
    return [n["path"] for n in record["device_nodes"]]


def start_workload(cluster: Cluster, cd_name: str) -> dict[str, Any]:
    workloads.create(cluster, compute_domain(cd_name))
    cluster.eventually(
        lambda: (read_cd(cluster, cd_name) or {}).get("status", {}).get("status") == "Ready",
        what=f"{cd_name} Ready")
    workloads.create(cluster, workloads.pod(
        f"{cd_name}-worker", claims=[("channel", {"resourceClaimTemplateName": f"{cd_name}-ch"})]))
    return workloads.running(cluster, f"{cd_name}-worker", timeout_s=180)


def test_two_domains_get_distinct_channels_across_a_rolling_update(cluster: Cluster) -> None:
    first = start_workload(cluster, "iso-a")
    first_channel = channel_of(cluster, "iso-a-worker")
    (first_claim,) = workloads.claims_of(cluster, first)
    first_uid = first_claim["metadata"]["uid"]

    old_plugin = cluster.eventually(lambda: running_plugin_uid(cluster), what="the plugin pod")
    restarted = datetime.datetime.now(datetime.UTC).isoformat()
    workloads.resources(cluster, "apps/v1", "DaemonSet").patch(
        name=f"{cluster_driver.RELEASE}-compute-domain-dra-driver-kubelet-plugin",
        namespace=NAMESPACE, content_type="application/merge-patch+json",
        body={"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": restarted}}}}})
    cluster.eventually(lambda: running_plugin_uid(cluster) not in (None, old_plugin),
                       what="the rolled plugin pod Running", timeout_s=180)

    second = start_workload(cluster, "iso-b")
    second_channel = channel_of(cluster, "iso-b-worker")
    assert first_channel and second_channel and first_channel != second_channel
    assert "channel0" not in "".join(first_channel + second_channel)
    assert workloads.read_pod(cluster, "iso-a-worker") is not None
    # The new plugin kept the first claim prepared (its CDI spec is still there).
    assert [p.name for p in cluster.cdi_root.glob(f"k8s.{CD_DRIVER}-claim_{first_uid}.*")]

    for name in (first, second):
        workloads.delete_pod(cluster, name["metadata"]["name"])
    cluster.eventually(lambda: not any(cluster.cdi_root.glob("*claim_*")),
                       what="the new plugin to unprepare both claims (CDI files gone)")


def test_a_deleted_node_takes_its_resource_slices_with_it(cluster: Cluster) -> None:
    # The machine is gone (kubelet, runtime and plugins with it), then its Node object.
    cluster.stop_node()
    cluster.core().delete_node(NODE)

    def node_slices() -> list[str]:
        return [s["metadata"]["name"]
                for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
                if s["spec"].get("nodeName") == NODE]

    cluster.eventually(lambda: not node_slices(),
                       what="the garbage collector to delete the node's ResourceSlices")
