"""A driver-managed ComputeDomain's whole life under a real scheduler, controllers and kubelet.

ComputeDomain created → our controller makes its ResourceClaimTemplate, daemon RCT and DaemonSet
→ a user's pod takes a channel from the template (real resourceclaim controller and scheduler)
→ the kubelet prepares it and our plugin labels the node → the DaemonSet controller puts an IMEX
daemon pod there → its claim is prepared and our `compute-domain-daemon` runs (with the stand-in
`nvidia-imex`) as the container's process → the domain goes Ready → the workload starts. Then the
workload is deleted: the node must be released (label, daemon, the domain's node list), a second
ComputeDomain must be able to use the same node, and once both are deleted nothing of them may be
left: no label, no ComputeDomainClique, no ResourceClaimTemplate, no DaemonSet.
"""

from __future__ import annotations

from typing import Any

import pytest
import workloads
from cluster_driver import NAMESPACE, NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

# A cluster starts within the first test (about 30 s), and every step waits on real controllers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

CD_API = "resource.nvidia.com/v1beta1"
CD_LABEL = "resource.nvidia.com/computeDomain"
CD_DRIVER = "compute-domain.nvidia.com"


def compute_domain(name: str) -> dict[str, Any]:
    return {"apiVersion": CD_API, "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}}}


def read_cd(cluster: Cluster, name: str) -> dict[str, Any] | None:
    found = [cd for cd in workloads.list_objects(cluster, CD_API, "ComputeDomain",
                                                 WORKLOAD_NAMESPACE)
             if cd["metadata"]["name"] == name]
    return found[0] if found else None


def node_label(cluster: Cluster) -> str | None:
    labels = cluster.core().read_node(NODE).metadata.labels or {}
    return labels.get(CD_LABEL)


def daemon_pods(cluster: Cluster, cd_uid: str) -> list[dict[str, Any]]:
    return [p for p in workloads.list_objects(cluster, "v1", "Pod", NAMESPACE)
            if p["metadata"].get("labels", {}).get(CD_LABEL) == cd_uid]


def status_nodes(cluster: Cluster, name: str) -> list[str]:
    cd = read_cd(cluster, name) or {}
    return [n["name"] for n in (cd.get("status") or {}).get("nodes") or []]


def run_workload(cluster: Cluster, cd_name: str) -> tuple[str, dict[str, Any]]:
    """CD created, its workload pod Running; (CD uid, the pod)."""
    cd = workloads.create(cluster, compute_domain(cd_name))
    cd_uid = str(cd["metadata"]["uid"])
    cluster.eventually(
        lambda: [t for t in workloads.list_objects(
            cluster, "resource.k8s.io/v1", "ResourceClaimTemplate", WORKLOAD_NAMESPACE)
            if t["metadata"]["name"] == f"{cd_name}-ch"],
        what=f"the controller to create {cd_name}'s ResourceClaimTemplate")
    workloads.create(cluster, workloads.pod(
        f"{cd_name}-worker", claims=[("channel", {"resourceClaimTemplateName": f"{cd_name}-ch"})]))
    pod = workloads.running(cluster, f"{cd_name}-worker", timeout_s=240)
    return cd_uid, pod


@pytest.fixture(scope="module")
def cluster(driver_managed: Cluster) -> Cluster:
    workloads.ensure_namespace(driver_managed)
    return driver_managed


def test_a_workload_runs_with_its_domains_channel_once_the_daemon_is_ready(
    cluster: Cluster
) -> None:
    cd_uid, pod = run_workload(cluster, "cd-one")
    (claim,) = workloads.claims_of(cluster, pod)
    (record,) = workloads.container_records(cluster, "cd-one-worker")
    assert [d for d in record["cdi_devices"] if d.startswith(f"k8s.{CD_DRIVER}/")] == [
        f"k8s.{CD_DRIVER}/claim={claim['metadata']['uid']}-channel-0"]
    assert [n["path"] for n in record["device_nodes"]] == [
        "/dev/nvidia-caps-imex-channels/channel0"]
    assert node_label(cluster) == cd_uid
    (daemon,) = daemon_pods(cluster, cd_uid)
    assert daemon["status"]["phase"] == "Running"
    cd = read_cd(cluster, "cd-one")
    assert cd is not None and cd["status"]["status"] == "Ready"
    assert status_nodes(cluster, "cd-one") == [NODE]


def test_deleting_the_workload_releases_the_node(cluster: Cluster) -> None:
    cd = read_cd(cluster, "cd-one")
    assert cd is not None
    cd_uid = cd["metadata"]["uid"]
    workloads.delete_pod(cluster, "cd-one-worker")
    cluster.eventually(lambda: node_label(cluster) is None,
                       what="the plugin to remove the node's ComputeDomain label")
    cluster.eventually(lambda: not daemon_pods(cluster, cd_uid),
                       what="the IMEX daemon pod to leave the released node")
    cluster.eventually(lambda: NODE not in status_nodes(cluster, "cd-one"),
                       what="the ComputeDomain to drop the released node")


def test_a_second_domain_can_use_the_released_node(cluster: Cluster) -> None:
    cd_uid, _ = run_workload(cluster, "cd-two")
    assert node_label(cluster) == cd_uid
    workloads.delete_pod(cluster, "cd-two-worker")


def test_deleted_domains_leave_nothing_behind(cluster: Cluster) -> None:
    api = workloads.resources(cluster, CD_API, "ComputeDomain")
    uids = []
    for name in ("cd-one", "cd-two"):
        cd = read_cd(cluster, name)
        assert cd is not None
        uids.append(cd["metadata"]["uid"])
        api.delete(name=name, namespace=WORKLOAD_NAMESPACE)

    def leftovers() -> dict[str, list[str]]:
        def named(objs: list[dict[str, Any]]) -> list[str]:
            return [o["metadata"]["name"] for o in objs
                    if o["metadata"].get("labels", {}).get(CD_LABEL) in uids
                    or any(uid in o["metadata"]["name"] for uid in uids)]

        found = {
            "ComputeDomain": [n for n in ("cd-one", "cd-two") if read_cd(cluster, n)],
            "ComputeDomainClique": named(workloads.list_objects(
                cluster, CD_API, "ComputeDomainClique", NAMESPACE)),
            "ResourceClaimTemplate": named(
                workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceClaimTemplate"))
            + [t["metadata"]["name"] for t in workloads.list_objects(
                cluster, "resource.k8s.io/v1", "ResourceClaimTemplate", WORKLOAD_NAMESPACE)
               if t["metadata"]["name"] in ("cd-one-ch", "cd-two-ch")],
            "DaemonSet": named(workloads.list_objects(cluster, "apps/v1", "DaemonSet", NAMESPACE)),
            "Pod": named(workloads.list_objects(cluster, "v1", "Pod", NAMESPACE)),
            "node label": [label] if (label := node_label(cluster)) else [],
        }
        return {kind: names for kind, names in found.items() if names}

    cluster.eventually(lambda: not leftovers(), what="every object of both domains to go",
                       timeout_s=120)
    # NB: the garbage collector works in the background: nothing may come back.
    assert leftovers() == {}
