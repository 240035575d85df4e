"""Consumable shares under the real scheduler and kubelet: upstream's specs, placed as expected.

One simulated A100 node (`a100-mig`: GPU 0 in MIG mode, GPU 1 the one full GPU the
`gpu.nvidia.com` class selects), the chart with gate ConsumableShares and `consumableShares: 2`;
later tests switch the plugin to `memory` and `unlimited` as an operator would (the DaemonSet's
CONSUMABLE_SHARES). DRA consumable capacity is alpha in Kubernetes 1.34 and 1.35 (gate
DRAConsumableCapacity, turned on in every component here) and beta from 1.36: run the module
with KUBE_VERSION=v1.34.4 (default) and v1.37.2.

The claims are upstream's (tests/bats/specs/gpu-consumable-shares-{integer,memory}.yaml and the
e2e consumable-shares-{memory,unlimited} templates): both pods end up on the one GPU, each claim
with its own shareID, and one pod too many stays Pending with the scheduler's reason.
"""

from __future__ import annotations

import re
from typing import Any

import cluster_driver
import control_plane
import pytest
import workloads
from cluster_driver import NODE, Cluster
from kubernetes import client
from workloads import WORKLOAD_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_DRIVER = "gpu.nvidia.com"
CONFIG_API = "resource.nvidia.com/v1beta1"
GPU = "gpu-1"
MEMORY = "40Gi"  # the a100-mig profile's A100-SXM4-40GB


def kube_gates() -> dict[str, bool]:
    """DRAConsumableCapacity where it is alpha (1.34, 1.35); beta and on by default from 1.36."""
    found = re.match(r"v1\.(\d+)\.", control_plane.kube_version())
    minor = int(found.group(1)) if found else 0
    return {"DRAConsumableCapacity": True} if minor < 36 else {}


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {
        "resources": {"gpus": {"enabled": True}},
        "featureGates": {"ConsumableShares": True, "TimeSlicingSettings": True},
        "consumableShares": 2,
    }
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile="a100-mig",
                                      kube_gates=kube_gates())


def published_gpu(cluster: Cluster) -> dict[str, Any] | None:
    for slice_obj in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice"):
        if slice_obj["spec"]["driver"] != GPU_DRIVER or slice_obj["spec"].get("nodeName") != NODE:
            continue
        for device in slice_obj["spec"].get("devices") or ():
            if device["name"] == GPU:
                return dict(device)
    return None


def use_mode(cluster: Cluster, value: str, *, shows: str) -> dict[str, Any]:
    """Restart the GPU plugin with CONSUMABLE_SHARES=`value` (a DaemonSet edit); its device
    once the republished slice has capacity `shows`."""
    apps = client.AppsV1Api(cluster.admin_client())
    [daemonset] = [d for d in apps.list_namespaced_daemon_set(cluster_namespace()).items
                   if any(c.name == "gpu-kubelet-plugin" for c in d.spec.template.spec.containers)]
    apps.patch_namespaced_daemon_set(daemonset.metadata.name, cluster_namespace(), {
        "spec": {"template": {"spec": {"containers": [{
            "name": "gpu-kubelet-plugin", "env": [{"name": "CONSUMABLE_SHARES", "value": value}],
        }]}}}})

    def republished() -> dict[str, Any] | None:
        device = published_gpu(cluster)
        if device is None or set(device.get("capacity") or {}) != {"memory", *shows.split()}:
            return None
        policy = device["capacity"]["memory"].get("requestPolicy") or {}
        return device if policy.get("default") == (MEMORY if value == "memory" else "0") else None

    return dict(cluster.eventually(republished, what=f"the GPU republished for {value}",
                                   timeout_s=180))


def cluster_namespace() -> str:
    return cluster_driver.NAMESPACE


def template(name: str, *, capacity: dict[str, str] | None = None, count: int | None = None,
             config: dict[str, Any] | None = None, requests: int = 1) -> dict[str, Any]:
    """Upstream's ResourceClaimTemplate shape: one `gpu` request of class gpu.nvidia.com."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    if capacity is not None:
        exactly["capacity"] = {"requests": capacity}
    if count is not None:
        exactly["count"] = count
    names = ["gpu"] if requests == 1 else [f"gpu{i}" for i in range(requests)]
    spec: dict[str, Any] = {"devices": {"requests": [{"name": n, "exactly": exactly}
                                                     for n in names]}}
    if config is not None:
        spec["devices"]["config"] = [{"opaque": {"driver": GPU_DRIVER, "parameters": config}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE}, "spec": {"spec": spec}}


def start_pods(cluster: Cluster, rct: str, *names: str) -> None:
    for name in names:
        workloads.create(cluster, workloads.pod(
            name, claims=[("gpu", {"resourceClaimTemplateName": rct})]))


def results_of(cluster: Cluster, pod_name: str) -> list[dict[str, Any]]:
    pod = workloads.read_pod(cluster, pod_name)
    assert pod is not None
    (claim,) = workloads.claims_of(cluster, pod)
    return [r for r in claim["status"]["allocation"]["devices"]["results"]
            if r["driver"] == GPU_DRIVER]


def gpu_cdi_devices(cluster: Cluster, pod_name: str) -> list[str]:
    return sorted({d for record in workloads.container_records(cluster, pod_name)
                   for d in record["cdi_devices"] if d.startswith(f"k8s.{GPU_DRIVER}/")})


def assert_share_one_gpu(cluster: Cluster, *pods: str) -> None:
    """Every pod Running on the one GPU, each claim with its own share and CDI device."""
    for name in pods:
        workloads.running(cluster, name)
    results = [r for name in pods for r in results_of(cluster, name)]
    assert {r["device"] for r in results} == {GPU}
    share_ids = [r.get("shareID") for r in results]
    assert all(share_ids) and len(set(share_ids)) == len(share_ids), share_ids
    cdi = [gpu_cdi_devices(cluster, name) for name in pods]
    assert all(len(ids) == 1 for ids in cdi) and len({ids[0] for ids in cdi}) == len(pods)


def pending_reason(cluster: Cluster, pod_name: str) -> str:
    return str(cluster.eventually(lambda: workloads.unschedulable_reason(cluster, pod_name),
                                  what=f"the scheduler to leave {pod_name} Pending"))


def delete_pods(cluster: Cluster, *names: str) -> None:
    for name in names:
        workloads.delete_pod(cluster, name)


def test_gpus_are_published_for_several_claims_with_upstreams_policies(cluster: Cluster) -> None:
    workloads.ensure_namespace(cluster)
    device = cluster.eventually(lambda: published_gpu(cluster), what="the GPU plugin's slice",
                                timeout_s=180)
    # The API server kept every field (an alpha field without its gate would be dropped).
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        "memory": {"value": MEMORY, "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "max": MEMORY, "step": "1Mi"}}},
        "shares": {"value": "2", "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": "2", "step": "1"}}},
    }


def test_integer_shares_put_two_pods_on_one_gpu_and_a_third_stays_pending(
    cluster: Cluster,
) -> None:
    """Upstream's gpu-consumable-shares-integer spec, with one pod more than the 2 shares."""
    workloads.create(cluster, template("rct-share-integer-gpu", capacity={"shares": "1"}))
    start_pods(cluster, "rct-share-integer-gpu", "pod-share-integer-0", "pod-share-integer-1")
    assert_share_one_gpu(cluster, "pod-share-integer-0", "pod-share-integer-1")
    consumed = [r.get("consumedCapacity") for n in ("pod-share-integer-0", "pod-share-integer-1")
                for r in results_of(cluster, n)]
    assert consumed == [{"memory": "0", "shares": "1"}] * 2
    start_pods(cluster, "rct-share-integer-gpu", "pod-share-integer-2")
    assert "cannot allocate all claims" in pending_reason(cluster, "pod-share-integer-2")
    # A share freed, the pending pod gets it.
    delete_pods(cluster, "pod-share-integer-0")
    workloads.running(cluster, "pod-share-integer-2")
    delete_pods(cluster, "pod-share-integer-1", "pod-share-integer-2")


def test_a_share_under_another_config_is_refused_by_the_plugin_naming_both(
    cluster: Cluster,
) -> None:
    """The scheduler knows nothing of opaque configs: it puts both claims on the GPU, and the
    plugin refuses the second, whose config differs, until the first is gone."""
    sliced = {"apiVersion": CONFIG_API, "kind": "GpuConfig",
              "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    workloads.create(cluster, template("share-sliced", config=sliced))
    workloads.create(cluster, template("share-plain"))
    start_pods(cluster, "share-sliced", "sliced")
    workloads.running(cluster, "sliced")
    start_pods(cluster, "share-plain", "plain")

    def refusal() -> str | None:
        for event in cluster.core().list_namespaced_event(WORKLOAD_NAMESPACE).items:
            if (event.involved_object.name == "plain"
                    and "as a consumable share with another config" in (event.message or "")):
                return str(event.message)
        return None

    message = cluster.eventually(refusal, what="the plugin to refuse the second share")
    assert '"interval":"Long"' in message and "give this claim the same opaque config" in message
    delete_pods(cluster, "sliced")
    workloads.running(cluster, "plain")
    delete_pods(cluster, "plain")


def test_one_claim_may_hold_two_shares_of_the_gpu(cluster: Cluster) -> None:
    """Two requests of one claim, both given the one GPU: one CDI device, both shares
    answered to the kubelet (share_id), the pod runs."""
    workloads.create(cluster, template("two-shares", capacity={"shares": "1"}, requests=2))
    start_pods(cluster, "two-shares", "two-shares")
    workloads.running(cluster, "two-shares")
    results = results_of(cluster, "two-shares")
    assert [r["device"] for r in results] == [GPU, GPU]
    assert len({r["shareID"] for r in results}) == 2
    (pod_claim,) = workloads.claims_of(cluster, workloads.read_pod(cluster, "two-shares") or {})
    assert gpu_cdi_devices(cluster, "two-shares") == [
        f"k8s.{GPU_DRIVER}/claim={pod_claim['metadata']['uid']}-{GPU}"]
    delete_pods(cluster, "two-shares")


def test_memory_shares_put_two_pods_on_one_gpu_and_one_too_big_stays_pending(
    cluster: Cluster,
) -> None:
    """Upstream's gpu-consumable-shares-memory spec (2Gi each), then a claim for more memory
    than is left of the GPU's 40Gi."""
    device = use_mode(cluster, "memory", shows="")
    assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["min"] == "1Mi"
    workloads.create(cluster, template("rct-share-memory-gpu", capacity={"memory": "2Gi"}))
    start_pods(cluster, "rct-share-memory-gpu", "pod-share-memory-0", "pod-share-memory-1")
    assert_share_one_gpu(cluster, "pod-share-memory-0", "pod-share-memory-1")
    workloads.create(cluster, template("too-big", capacity={"memory": "37Gi"}))
    start_pods(cluster, "too-big", "too-big")
    assert "cannot allocate all claims" in pending_reason(cluster, "too-big")
    # Without a request a claim takes all memory (the policy's default): it waits too.
    workloads.create(cluster, template("whole-gpu"))
    start_pods(cluster, "whole-gpu", "whole-gpu")
    assert "cannot allocate all claims" in pending_reason(cluster, "whole-gpu")
    delete_pods(cluster, "too-big", "whole-gpu", "pod-share-memory-0", "pod-share-memory-1")


def test_unlimited_shares_put_upstreams_e2e_pods_on_one_gpu(cluster: Cluster) -> None:
    """Upstream's e2e consumable-shares-unlimited template (count 1, no capacity request)."""
    use_mode(cluster, "unlimited", shows="")
    workloads.create(cluster, template("unlimited-gpu", count=1))
    start_pods(cluster, "unlimited-gpu", "pod1", "pod2")
    assert_share_one_gpu(cluster, "pod1", "pod2")
    delete_pods(cluster, "pod1", "pod2")
