"""The GPU half under a real scheduler and kubelet: users' pods, not hand-allocated claims.

One simulated A100 node (`a100-mig`: GPU 0 in MIG mode with four MIG devices, GPU 1 whole), the
chart with the GPU half and time-slicing on. Each test creates pods as a user would; the real
resourceclaim controller, scheduler and kubelet do the rest, and the stand-in runtime records
the CDI devices the kubelet passed to each container.
"""

from __future__ import annotations

from typing import Any

import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

# A cluster starts within the first test (about 30 s), and every step waits on real controllers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

GPU_DRIVER = "gpu.nvidia.com"
CONFIG_API = "resource.nvidia.com/v1beta1"


@pytest.fixture(scope="module")
def cluster(driver_managed: Cluster) -> Cluster:
    return driver_managed


@pytest.fixture(scope="module")
def published(cluster: Cluster) -> list[dict[str, Any]]:
    """The GPU plugin's slices for the node, once the plugin pod published them."""
    workloads.ensure_namespace(cluster)

    def gpu_slices() -> list[dict[str, Any]] | None:
        found = [s for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
                 if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("nodeName") == NODE]
        return found or None

    return list(cluster.eventually(gpu_slices, what="the GPU plugin's ResourceSlice",
                                   timeout_s=180))


def template(name: str, device_class: str, *, config: dict[str, Any] | None = None,
             selector: str = "", count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    spec: dict[str, Any] = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    if config is not None:
        spec["devices"]["config"] = [{"requests": ["gpu"], "opaque": {
            "driver": GPU_DRIVER, "parameters": config}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"spec": spec}}


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return [r["device"] for r in results if r["driver"] == GPU_DRIVER]


def gpu_cdi_devices(cluster: Cluster, pod_name: str) -> list[list[str]]:
    """Per container of the pod, the CDI device names of the GPU driver the kubelet passed."""
    return [[d for d in record["cdi_devices"] if d.startswith(f"k8s.{GPU_DRIVER}/")]
            for record in workloads.container_records(cluster, pod_name)]


def test_both_plugins_register_with_the_kubelet_and_publish_owned_slices(
    cluster: Cluster, published: list[dict[str, Any]]
) -> None:
    devices = {d["name"] for s in published for d in s["spec"]["devices"]}
    assert "gpu-1" in devices
    assert any(name.startswith("gpu-0-mig-") for name in devices), devices
    node = cluster.core().read_node(NODE)
    for slice_obj in published:
        assert slice_obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node.metadata.uid,
            "controller": True,
        }]
    log = cluster.kubelet.output() if cluster.kubelet is not None else ""
    for driver in (GPU_DRIVER, "compute-domain.nvidia.com"):
        assert driver in log



def test_both_plugins_find_the_runtime_applies_their_cdi_specs(cluster: Cluster) -> None:
    """The stand-in runtime answers a verbose Status like containerd with CDI on, reading the
    plugins' CDI root (cluster_driver): both plugins' runtime CDI check says so, and the Node
    condition is False."""
    assert cluster.runtime is not None
    runtime = cluster.runtime

    def applied() -> list[str] | None:
        lines = [line for log in sorted(runtime.state_dir.glob("**/*.log"))
                 for line in log.read_text(errors="replace").splitlines()
                 if "event=runtime_cdi_applied" in line]
        return lines if len(lines) >= 2 else None  # one per plugin process

    cluster.eventually(applied, what="both plugins' runtime CDI check", timeout_s=120)
    conditions = {c.type: (c.status, c.reason)
                  for c in cluster.core().read_node(NODE).status.conditions or []}
    assert conditions["ContainerRuntimeCDIDisabled"] == ("False", "CDIApplied")


def test_a_pod_gets_a_whole_gpu_prepared_by_the_kubelet(
    cluster: Cluster, published: list[dict[str, Any]]
) -> None:
    workloads.create(cluster, template("one-gpu", "gpu.nvidia.com"))
    workloads.create(cluster, workloads.pod(
        "gpu-pod", claims=[("gpu", {"resourceClaimTemplateName": "one-gpu"})]))
    running = workloads.running(cluster, "gpu-pod")
    (claim,) = workloads.claims_of(cluster, running)
    assert allocated_devices(claim) == ["gpu-1"]
    (cdi,) = gpu_cdi_devices(cluster, "gpu-pod")
    assert cdi and all(claim["metadata"]["uid"] in name for name in cdi)
    workloads.delete_pod(cluster, "gpu-pod")


def test_two_pods_share_one_claim(cluster: Cluster, published: list[dict[str, Any]]) -> None:
    workloads.create(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared-gpu", "namespace": WORKLOAD_NAMESPACE},
        "spec": template("unused", "gpu.nvidia.com")["spec"]["spec"],
    })
    for name in ("shared-a", "shared-b"):
        workloads.create(cluster, workloads.pod(
            name, claims=[("gpu", {"resourceClaimName": "shared-gpu"})]))
    first = workloads.running(cluster, "shared-a")
    workloads.running(cluster, "shared-b")
    (claim,) = workloads.claims_of(cluster, first)
    assert len(claim["status"]["reservedFor"]) == 2
    assert gpu_cdi_devices(cluster, "shared-a") == gpu_cdi_devices(cluster, "shared-b")
    for name in ("shared-a", "shared-b"):
        workloads.delete_pod(cluster, name)


def test_a_pod_gets_a_mig_device(cluster: Cluster, published: list[dict[str, Any]]) -> None:
    workloads.create(cluster, template("one-mig", "mig.nvidia.com"))
    workloads.create(cluster, workloads.pod(
        "mig-pod", claims=[("mig", {"resourceClaimTemplateName": "one-mig"})]))
    running = workloads.running(cluster, "mig-pod")
    (claim,) = workloads.claims_of(cluster, running)
    (device,) = allocated_devices(claim)
    assert device.startswith("gpu-0-mig-")
    (cdi,) = gpu_cdi_devices(cluster, "mig-pod")
    assert cdi
    workloads.delete_pod(cluster, "mig-pod")


def test_time_slicing_with_its_gate(cluster: Cluster, published: list[dict[str, Any]]) -> None:
    config = {"apiVersion": CONFIG_API, "kind": "GpuConfig",
              "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    workloads.create(cluster, template("ts-gpu", "gpu.nvidia.com", config=config))
    workloads.create(cluster, workloads.pod(
        "ts-pod", containers=2, claims=[("gpu", {"resourceClaimTemplateName": "ts-gpu"})]))
    workloads.running(cluster, "ts-pod")
    per_container = gpu_cdi_devices(cluster, "ts-pod")
    assert len(per_container) == 2 and per_container[0] == per_container[1] != []
    workloads.delete_pod(cluster, "ts-pod")


def test_a_selector_that_matches_nothing_stays_pending_with_the_schedulers_reason(
    cluster: Cluster, published: list[dict[str, Any]]
) -> None:
    selector = f"device.attributes['{GPU_DRIVER}'].productName == 'NVIDIA H9000'"
    workloads.create(cluster, template("no-match", "gpu.nvidia.com", selector=selector))
    workloads.create(cluster, workloads.pod(
        "no-match-pod", claims=[("gpu", {"resourceClaimTemplateName": "no-match"})]))
    reason = cluster.eventually(lambda: workloads.unschedulable_reason(cluster, "no-match-pod"),
                                what="the scheduler to give up on the pod")
    assert "cannot allocate all claims" in reason
    workloads.delete_pod(cluster, "no-match-pod")


def test_admin_access_gets_a_gpu_another_pod_holds(
    cluster: Cluster, published: list[dict[str, Any]]
) -> None:
    """A monitoring pod with admin access (its namespace allows it) is given the GPU a workload
    holds exclusively: the scheduler allocates it in use, and the plugin prepares it beside the
    workload's claim instead of refusing it as already prepared."""
    workloads.create(cluster, template("held-gpu", "gpu.nvidia.com"))
    workloads.create(cluster, workloads.pod(
        "holder", claims=[("gpu", {"resourceClaimTemplateName": "held-gpu"})]))
    (held,) = workloads.claims_of(cluster, workloads.running(cluster, "holder"))
    ops = "ops"
    workloads.ensure_namespace(cluster, ops)
    cluster.core().patch_namespace(
        ops, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}})
    monitor = template("monitor-gpu", "gpu.nvidia.com")
    monitor["metadata"]["namespace"] = ops
    monitor["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    workloads.create(cluster, monitor)
    workloads.create(cluster, workloads.pod(
        "monitor", namespace=ops, claims=[("gpu", {"resourceClaimTemplateName": "monitor-gpu"})]))
    (watching,) = workloads.claims_of(cluster, workloads.running(cluster, "monitor", ops))
    assert allocated_devices(watching) == allocated_devices(held) == ["gpu-1"]
    assert watching["status"]["allocation"]["devices"]["results"][0]["adminAccess"] is True
    workloads.delete_pod(cluster, "monitor", ops)
    workloads.delete_pod(cluster, "holder")
