"""Gate ComputeDomainBindingConditions under a real scheduler, controllers and kubelet.

On Kubernetes 1.36+ (DRADeviceBindingConditions beta, on by default) the channel device goes
out with its binding conditions: the scheduler allocates the workload's claim to the node and
waits before binding the pod; our plugin labels the node for the ComputeDomain, its IMEX daemon
comes up there, the plugin sets the claim's ready condition, and only then is the pod bound —
so the kubelet's prepare succeeds at its first call: no FailedPrepareDynamicResources or any
other Warning Event on the pod. On 1.34 (the gate alpha and off) the API server drops the
binding conditions: the plugin says so once and publishes without them, and the workload runs
as it does without our gate. Run with KUBE_VERSION=v1.37.2 and v1.34.4.
"""

from __future__ import annotations

from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import Cluster
from test_controlplane_compute_domain import (
    CD_DRIVER,
    daemon_pods,
    node_label,
    read_cd,
    run_workload,
    status_nodes,
)
from test_controlplane_gpu_health import kube_minor, plugin_logs
from workloads import WORKLOAD_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

READY = "compute-domain.nvidia.com/imex-daemon-ready"
FAILED = "compute-domain.nvidia.com/imex-daemon-failed"


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"featureGates": {"ComputeDomainBindingConditions": True}}
    for started in cluster_driver.started("driverManaged", values=values):
        workloads.ensure_namespace(started)
        yield started


def channel_device(cluster: Cluster) -> dict[str, Any]:
    """The node's published `channel-0` ({} until published)."""
    for found in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice"):
        spec = found["spec"]
        if spec["driver"] != CD_DRIVER or spec.get("nodeName") != cluster_driver.NODE:
            continue
        for device in spec.get("devices") or ():
            if device["name"] == "channel-0":
                return dict(device)
    return {}


def pod_events(cluster: Cluster, name: str) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message or "")
            for e in cluster.core().list_namespaced_event(WORKLOAD_NAMESPACE).items
            if e.involved_object.name == name]


def our_conditions(claim: dict[str, Any]) -> dict[str, str]:
    for entry in (claim.get("status") or {}).get("devices") or ():
        if entry["driver"] == CD_DRIVER and entry["device"] == "channel-0":
            return {c["type"]: c["status"] for c in entry.get("conditions") or ()}
    return {}


@pytest.mark.skipif(kube_minor() < 36, reason="DRADeviceBindingConditions is off before 1.36")
def test_the_pod_is_bound_only_once_its_imex_daemon_is_ready(cluster: Cluster) -> None:
    published = cluster.eventually(lambda: channel_device(cluster) or None,
                                   what="the ComputeDomain plugin's channel device")
    assert published["bindingConditions"] == [READY]
    assert published["bindingFailureConditions"] == [FAILED]
    cd_uid, pod = run_workload(cluster, "bc-one")
    (claim,) = workloads.claims_of(cluster, pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == [READY]
    # NB: the prepare writes its Ready condition in the background: it joins ours.
    cluster.eventually(lambda: our_conditions(workloads.claims_of(cluster, pod)[0]) == {
        READY: "True", "Ready": "True"}, what="the prepare's Ready beside the binding condition")
    events = pod_events(cluster, "bc-one-worker")
    # NB: not ours, with the gate or without: MissingClusterDNS (this tier's kubelet runs
    # without cluster DNS) and FailedResourceClaimCreation (the resourceclaim controller's
    # informer had not seen the template yet; it retries).
    harness = {"MissingClusterDNS", "FailedResourceClaimCreation"}
    assert [e for e in events if e[0] == "Warning" and e[1] not in harness] == []
    assert "BindingConditionsPending" in [reason for _, reason, _ in events]
    assert node_label(cluster) == cd_uid
    (daemon,) = daemon_pods(cluster, cd_uid)
    assert daemon["status"]["phase"] == "Running"
    logs = plugin_logs(cluster)
    assert f"event=binding_conditions_served node={cluster_driver.NODE}" in logs
    assert f"event=binding_condition_set node={cluster_driver.NODE}" in logs
    assert "event=resource_slice_binding_conditions_dropped" not in logs


@pytest.mark.skipif(kube_minor() < 36, reason="DRADeviceBindingConditions is off before 1.36")
def test_deleting_the_workload_still_releases_the_node(cluster: Cluster) -> None:
    cd = read_cd(cluster, "bc-one")
    assert cd is not None
    cd_uid = cd["metadata"]["uid"]
    workloads.delete_pod(cluster, "bc-one-worker")
    cluster.eventually(lambda: node_label(cluster) is None,
                       what="the plugin to remove the node's ComputeDomain label")
    cluster.eventually(lambda: not daemon_pods(cluster, cd_uid),
                       what="the IMEX daemon pod to leave the released node")
    cluster.eventually(lambda: cluster_driver.NODE not in status_nodes(cluster, "bc-one"),
                       what="the ComputeDomain to drop the released node")
    workloads.resources(cluster, "resource.nvidia.com/v1beta1", "ComputeDomain").delete(
        name="bc-one", namespace=WORKLOAD_NAMESPACE)


@pytest.mark.skipif(kube_minor() >= 36, reason="DRADeviceBindingConditions is on from 1.36")
def test_without_the_kubernetes_feature_the_workload_runs_as_before(cluster: Cluster) -> None:
    cluster.eventually(
        lambda: "event=resource_slice_binding_conditions_dropped" in plugin_logs(cluster),
        what="the plugin to notice that the API server dropped the binding conditions")
    assert "bindingConditions" not in channel_device(cluster)
    cd_uid, pod = run_workload(cluster, "bc-old")
    (claim,) = workloads.claims_of(cluster, pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert "bindingConditions" not in result
    assert node_label(cluster) == cd_uid
    assert plugin_logs(cluster).count("event=resource_slice_binding_conditions_dropped") == 1


@pytest.mark.skipif(kube_minor() < 36, reason="DRADeviceBindingConditions is off before 1.36")
def test_a_claim_for_a_missing_domain_is_never_bound_to_the_node(cluster: Cluster) -> None:
    """The plugin sets the failure condition at once; the scheduler frees the allocation and
    tries again instead of binding a pod whose prepare could only fail."""
    missing = "5b2f0e1c-cd09-4b7a-9d3e-000000000009"
    workloads.create(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "orphan-ch", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {
                "deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
            "config": [{"requests": ["channel"], "opaque": {
                "driver": CD_DRIVER, "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "ComputeDomainChannelConfig", "domainID": missing}}}],
        }},
    })
    workloads.create(cluster, workloads.pod(
        "orphan", claims=[("channel", {"resourceClaimName": "orphan-ch"})]))

    def refused() -> str | None:
        for _, reason, message in pod_events(cluster, "orphan"):
            if reason == "FailedScheduling" and "ComputeDomainNotFound" in message:
                return message
        return None

    message = cluster.eventually(refused, what="the scheduler to give up binding the pod",
                                 timeout_s=120)
    assert missing in message
    pod = workloads.read_pod(cluster, "orphan")
    assert pod is not None and not pod["spec"].get("nodeName")
    assert node_label(cluster) is None
    assert "reason=ComputeDomainNotFound" in plugin_logs(cluster)
    workloads.delete_pod(cluster, "orphan")
