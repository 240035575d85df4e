"""VFIO passthrough under a real API server, scheduler and kubelet (gates PassthroughSupport
and DeviceMetadata): a GPU handed to a VM leaves the slice the scheduler reads.

One simulated HGX H100 node whose GPUs also show as NVIDIA functions in a kernel-shaped sysfs
under a stand-in host root (`--host-root`, with an IOMMU group per GPU and vfio-pci loaded).

Covers: a pod's VFIO claim is prepared; the real API server then serves the node's slice
without the full GPU at that function's PCI address, so a second pod whose claim selects that
GPU stays unschedulable; once the first pod is gone (unprepare) the GPU is back and the second
pod runs on it. The VM pod's container gets the claim's device metadata file mounted
read-only at the KEP-5304 path for a template's claim.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

from adapters.nvml import gpu_simulation
from core.gpu import slices as gpu_slices

_UNIT = pathlib.Path(__file__).resolve().parents[2] / "unit" / "gpu"
if str(_UNIT) not in sys.path:
    sys.path.insert(0, str(_UNIT))

import test_gpu_vfio_sysfs as sysfs_fixtures  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

GPU_DRIVER = "gpu.nvidia.com"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
VALUES: dict[str, Any] = {
    "resources": {"gpus": {"enabled": True}},
    "featureGates": {"PassthroughSupport": True, "DeviceMetadata": True},
}


@pytest.fixture(scope="module")
def host_root() -> Iterator[pathlib.Path]:
    """The stand-in host root: its /sys shows each simulated GPU as a function on nvidia."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="vfio-host-", dir="/tmp"))
    sysfs = sysfs_fixtures.FakeSysfs(root / "sys")
    gpus = gpu_simulation.simulated_gpus("hgx-h100", node_name=NODE).gpu_inventory().gpus
    for index, gpu in enumerate(gpus):
        sysfs.add_function(gpu_slices.normalize_pci_bus_id(gpu.pci_bus_id), group=40 + index)
    (root / "sys/module/vfio_pci").mkdir(parents=True)  # loaded: no modprobe
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(host_root: pathlib.Path) -> Iterator[Cluster]:
    yield from cluster_driver.started(
        "driverManaged", values=VALUES, gpu_profile="hgx-h100",
        gpu_env={"HOST_ROOT": str(host_root), "SYSFS_ROOT": str(host_root / "sys")},
    )


def slice_devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {
        d["name"]: d
        for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
        if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("nodeName") == NODE
        for d in s["spec"].get("devices") or ()
    }


def template(name: str, device_class: str, *, selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def test_a_passed_through_gpu_is_not_allocated_until_its_vm_is_gone(cluster: Cluster) -> None:
    workloads.ensure_namespace(cluster)

    def published() -> dict[str, dict[str, Any]] | None:
        found = slice_devices(cluster)
        return found if any(n.startswith("gpu-vfio-") for n in found) else None

    before = cluster.eventually(published, what="the GPU plugin's slice with VFIO functions",
                                timeout_s=180)
    workloads.create(cluster, template("vm-gpu", "vfio.gpu.nvidia.com"))
    workloads.create(cluster, workloads.pod(
        "vm", claims=[("gpu", {"resourceClaimTemplateName": "vm-gpu"})]))
    (claim,) = workloads.claims_of(cluster, workloads.running(cluster, "vm"))
    (function,) = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
    bus_id = before[function]["attributes"][PCI_BUS_ID]["string"]
    (sibling,) = [n for n, d in before.items()
                  if d["attributes"]["type"]["string"] == "gpu"
                  and d["attributes"][PCI_BUS_ID]["string"] == bus_id]
    assert sibling not in slice_devices(cluster)

    # The VM's container got the metadata file, read-only, at the template claim's path.
    (record,) = workloads.container_records(cluster, "vm")
    mounts = {m["container_path"]: m for m in record["mounts"]}
    path = ("/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/"
            "gpu.nvidia.com-metadata.json")
    assert mounts[path]["readonly"] is True
    assert f"{GPU_DRIVER}/metadata={claim['metadata']['uid']}_gpu" in record["cdi_devices"]

    selector = f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus_id}'"
    workloads.create(cluster, template("same-gpu", GPU_DRIVER, selector=selector))
    workloads.create(cluster, workloads.pod(
        "same-gpu", claims=[("gpu", {"resourceClaimTemplateName": "same-gpu"})]))
    reason = cluster.eventually(lambda: workloads.unschedulable_reason(cluster, "same-gpu"),
                                what="the scheduler to give up on the pod for the VM's GPU")
    assert "cannot allocate all claims" in reason

    workloads.delete_pod(cluster, "vm")
    cluster.eventually(lambda: sibling in slice_devices(cluster),
                       what=f"{sibling} back in the slice after the VM's unprepare")
    (second,) = workloads.claims_of(cluster, workloads.running(cluster, "same-gpu"))
    assert [r["device"] for r in second["status"]["allocation"]["devices"]["results"]] == [
        sibling]
    workloads.delete_pod(cluster, "same-gpu")
