"""Dynamic MIG under the real scheduler and kubelet: partitions placed without overlap.

One simulated HGX H100 node (`hgx-h100`: Hopper, MIG off, so every GPU is offered whole and as
partitions), the chart with gate DynamicMIG. Partitionable devices (KEP-4815, Kubernetes gate
DRAPartitionableDevices) are alpha in 1.34 (turned on in every component here) and beta, on by
default, from 1.36: run the module with KUBE_VERSION=v1.34.4 (default; counters beside their
devices) and v1.37.2 (counters in a slice of their own).

Covers: two claims for a 3g.40gb partition of GPU 0 get its two non-overlapping placements and
run with their created MIG devices; a third stays Pending with the scheduler's reason; the
full GPU 0 is never allocated while one of its partitions is, and is once they are gone.
"""

from __future__ import annotations

import re
from typing import Any

import cluster_driver
import control_plane
import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

from adapters import nvml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_DRIVER = "gpu.nvidia.com"
PROFILE = "3g.40gb"  # two placements on an H100 80GB: memory slices 0-3 and 4-7


def kube_minor() -> int:
    found = re.match(r"v1\.(\d+)\.", control_plane.kube_version())
    return int(found.group(1)) if found else 0


def kube_gates() -> dict[str, bool]:
    """DRAPartitionableDevices where it is alpha (1.34, 1.35); beta and on from 1.36."""
    return {"DRAPartitionableDevices": True} if kube_minor() < 36 else {}


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"resources": {"gpus": {"enabled": True}}, "featureGates": {"DynamicMIG": True}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile="hgx-h100",
                                      kube_gates=kube_gates())


def gpu0_uuid() -> str:
    return nvml.simulated_gpus("hgx-h100", node_name=NODE).gpu_inventory().gpus[0].uuid


def template(name: str, device_class: str, selector: str) -> dict[str, Any]:
    exactly = {"deviceClassName": device_class, "count": 1,
               "selectors": [{"cel": {"expression": selector}}]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def start_pod(cluster: Cluster, rct: str, name: str) -> None:
    workloads.create(cluster, workloads.pod(
        name, claims=[("gpu", {"resourceClaimTemplateName": rct})]))


def allocated(cluster: Cluster, pod_name: str) -> list[str]:
    pod = workloads.read_pod(cluster, pod_name)
    assert pod is not None
    (claim,) = workloads.claims_of(cluster, pod)
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
            if r["driver"] == GPU_DRIVER]


def gpu_cdi_devices(cluster: Cluster, pod_name: str) -> list[str]:
    return sorted({d for record in workloads.container_records(cluster, pod_name)
                   for d in record["cdi_devices"] if d.startswith(f"k8s.{GPU_DRIVER}/")})


def pending_reason(cluster: Cluster, pod_name: str) -> str:
    return str(cluster.eventually(lambda: workloads.unschedulable_reason(cluster, pod_name),
                                  what=f"the scheduler to leave {pod_name} Pending"))


def published_partitions(cluster: Cluster) -> list[str] | None:
    names = [d["name"]
             for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
             if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("nodeName") == NODE
             for d in s["spec"].get("devices") or ()
             if d.get("consumesCounters")]
    return names or None


def test_partitions_get_disjoint_placements_and_the_full_gpu_waits(cluster: Cluster) -> None:
    workloads.ensure_namespace(cluster)
    names = cluster.eventually(lambda: published_partitions(cluster),
                               what="the GPU plugin's partitions", timeout_s=180)
    # The API server kept consumesCounters (dropped without DRAPartitionableDevices).
    assert "gpu-0-mig-3g40gb-9-0" in names and "gpu-0-mig-3g40gb-9-4" in names
    with_counters = [
        s["spec"] for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
        if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("sharedCounters")]
    # The layout the plugin chose from the API server's version (upstream's rule).
    assert all(bool(spec.get("devices")) is (kube_minor() < 35) for spec in with_counters)
    uuid = gpu0_uuid()
    attrs = 'device.attributes["gpu.nvidia.com"]'
    workloads.create(cluster, template(
        "part", "mig.nvidia.com", f'{attrs}.profile == "{PROFILE}" && '
        f'{attrs}.parentUUID == "{uuid}"'))
    workloads.create(cluster, template("whole", "gpu.nvidia.com", f'{attrs}.uuid == "{uuid}"'))

    start_pod(cluster, "part", "part-0")
    start_pod(cluster, "part", "part-1")
    for name in ("part-0", "part-1"):
        workloads.running(cluster, name)
    placed = sorted(allocated(cluster, "part-0") + allocated(cluster, "part-1"))
    assert placed == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
    cdi = [gpu_cdi_devices(cluster, n) for n in ("part-0", "part-1")]
    assert all(len(ids) == 1 for ids in cdi) and cdi[0] != cdi[1]

    start_pod(cluster, "part", "part-2")
    assert "cannot allocate all claims" in pending_reason(cluster, "part-2")
    start_pod(cluster, "whole", "whole")
    assert "cannot allocate all claims" in pending_reason(cluster, "whole")

    workloads.delete_pod(cluster, "part-2")
    workloads.delete_pod(cluster, "part-0")
    workloads.delete_pod(cluster, "part-1")
    workloads.running(cluster, "whole")
    assert allocated(cluster, "whole") == ["gpu-0"]
    workloads.delete_pod(cluster, "whole")
