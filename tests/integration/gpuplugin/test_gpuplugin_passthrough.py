"""VFIO passthrough in the running GPU plugin (in-process, registered with the kubelet
emulator, on the embedded API server): a passed-through GPU leaves the published slice, and
what the claim's containers get.

The node is a simulated HGX H100 whose eight GPUs also show as NVIDIA functions in a
kernel-shaped sysfs (tests/unit/gpu/test_gpu_vfio_sysfs.py's `FakeSysfs`, at the PCI
addresses NVML reports), driven by the real sysfs binder.

Covers: prepare of `gpu-vfio-0` binds it and republishes at once without its full GPU (the
one at its PCI address), so a claim that selects that GPU stays unallocated while another GPU
is still offered; the hiding survives a plugin restart (read from the checkpoint, published
afresh after the slices are gone); unprepare brings the GPU back; a prepared full GPU hides its
function. Gate DeviceMetadata: the metadata file (attributes of the function), its CDI spec
and the id in the kubelet's answer, removed at unprepare. Gate DRAListTypeAttributes: the slice
carries `numaNode` as a list on a 1.37 server with that gate (dynamic MIG's partitions too),
and is refused on 1.34.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.fs import vfio as fs_vfio
from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster
from adapters.nvml import gpu_simulation
from apps.cli import embedded, gpu_demo
from core import errors, kinds, models
from core.gpu import slices as gpu_slices

_UNIT = pathlib.Path(__file__).resolve().parents[2] / "unit" / "gpu"
if str(_UNIT) not in sys.path:
    sys.path.insert(0, str(_UNIT))

import test_gpu_vfio_sysfs as sysfs_fixtures  # noqa: E402

DRIVER = "gpu.nvidia.com"
PASSTHROUGH = "PassthroughSupport=true"
METADATA = "PassthroughSupport=true,DeviceMetadata=true"
NAMESPACE = gpu_demo.NAMESPACE
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


@pytest.fixture
def root() -> Iterator[pathlib.Path]:
    # NB: short, for the unix sockets under it.
    made = pathlib.Path(tempfile.mkdtemp(prefix="vfio-", dir="/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def binder(root: pathlib.Path) -> fs_vfio.SysfsVfio:
    """The sysfs binder over a tree with a function at each simulated GPU's address."""
    sysfs = sysfs_fixtures.FakeSysfs(root / "sys")
    gpus = gpu_simulation.simulated_gpus("hgx-h100", node_name=gpu_demo.NODE_NAME)
    for index, gpu in enumerate(gpus.gpu_inventory().gpus):
        sysfs.add_function(
            gpu_slices.normalize_pci_bus_id(gpu.pci_bus_id), group=40 + index, numa_node="1"
        )
    return fs_vfio.SysfsVfio(str(root / "sys"), str(root / "devroot"))


def start(
    root: pathlib.Path, gates: str, cluster: memory_cluster.InMemoryCluster | None = None
) -> gpu_demo.GpuNode:
    return gpu_demo.start_gpu_node(
        str(root / "node"), profile="hgx-h100", feature_gates=gates, cluster=cluster,
        vfio=binder(root),
    )


def devices(node: gpu_demo.GpuNode) -> dict[str, dict[str, Any]]:
    return {
        d["name"]: d
        for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"].get("driver") == DRIVER
        for d in s["spec"].get("devices") or ()
    }


def address(device: dict[str, Any]) -> str:
    return str(device["attributes"][PCI_BUS_ID]["string"])


def gpu_at(node: gpu_demo.GpuNode, bus_id: str) -> str:
    """The full GPU published at `bus_id` (from the slice before anything is hidden)."""
    return next(
        name for name, d in devices(node).items()
        if d["attributes"]["type"]["string"] == "gpu" and address(d) == bus_id
    )


def claim(name: str, device_class: str, *, selector: str = "") -> dict[str, Any]:
    obj = gpu_demo.claim_object(name, device_class)
    if selector:
        obj["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": selector}}
        ]
    return obj


def schedule(node: gpu_demo.GpuNode, name: str, device_class: str, *, selector: str = "") -> (
    memory_allocator.ScheduledPod
):
    node.cluster.create(kinds.RESOURCE_CLAIM.kind, claim(name, device_class, selector=selector))
    return node.allocator.schedule_pod(gpu_demo.pod_object(f"{name}-pod", name))


def prepare(node: gpu_demo.GpuNode, pod: memory_allocator.ScheduledPod) -> models.ClaimResult:
    [result] = node.kubelet.prepare(DRIVER, embedded.claim_refs(pod.claims)).values()
    assert not result.error, result.error
    return result


def unprepare(node: gpu_demo.GpuNode, pod: memory_allocator.ScheduledPod) -> None:
    embedded.unprepare_and_delete_pods(
        node.kubelet, node.allocator, node.cluster, [pod], driver=DRIVER, namespace=NAMESPACE
    )


def allocated(pod: memory_allocator.ScheduledPod) -> str:
    return str(pod.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"])


def json_stream(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    found, at = [], 0
    while text[at:].strip():
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
        at += 1
    return found


def on_gpu(bus_id: str) -> str:
    return f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus_id}'"


def test_a_passed_through_gpu_leaves_the_slice_until_unprepared(root: pathlib.Path) -> None:
    node = start(root, PASSTHROUGH)
    try:
        before = devices(node)
        assert {"gpu-vfio-0", "gpu-0"} <= set(before)
        vm = schedule(node, "vm", "vfio.gpu.nvidia.com")
        function = allocated(vm)
        bus_id = address(before[function])
        sibling = gpu_at(node, bus_id)
        prepare(node, vm)
        # Published again before the kubelet got its answer.
        assert sibling not in devices(node)
        assert function in devices(node)
        with pytest.raises(memory_allocator.AllocationError):
            schedule(node, "same-gpu", "gpu.nvidia.com", selector=on_gpu(bus_id))
        other = schedule(node, "other-gpu", "gpu.nvidia.com")
        assert allocated(other) != sibling
        unprepare(node, vm)
        assert sibling in devices(node)
        # The claim left waiting now gets that GPU.
        assert allocated(node.allocator.schedule_pod(
            gpu_demo.pod_object("same-gpu-pod", "same-gpu"))) == sibling
    finally:
        node.stop()


def test_a_prepared_full_gpu_hides_its_passthrough_function(root: pathlib.Path) -> None:
    node = start(root, PASSTHROUGH)
    try:
        pod = schedule(node, "train", "gpu.nvidia.com")
        gpu = allocated(pod)
        bus_id = address(devices(node)[gpu])
        function = next(n for n, d in devices(node).items()
                        if n.startswith("gpu-vfio-") and address(d) == bus_id)
        prepare(node, pod)
        assert function not in devices(node)
        unprepare(node, pod)
        assert function in devices(node)
    finally:
        node.stop()


def test_the_hiding_survives_a_plugin_restart(root: pathlib.Path) -> None:
    node = start(root, PASSTHROUGH)
    try:
        vm = schedule(node, "vm", "vfio.gpu.nvidia.com")
        sibling = gpu_at(node, address(devices(node)[allocated(vm)]))
        prepare(node, vm)
        node.plugin.stop(grace_s=0.5)
        node.kubelet.forget(DRIVER)
        # The kubelet wipes a restarting plugin's slices: the new process publishes afresh.
        for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items:
            node.cluster.delete(kinds.RESOURCE_SLICE.kind, namespace="",
                                name=s["metadata"]["name"])
        node.plugin = gpu_demo.start_plugin(
            node.cluster, node.settings, node.files, profile=node.profile, gpus=node.gpus,
            vfio=binder_again(root),
        )
        node.kubelet.wait_for_plugin(DRIVER, timeout_s=10)
        assert node.plugin.slices.published.wait(10)
        published = devices(node)
        assert "gpu-vfio-0" in published and len(published) == 15
        assert sibling not in published
        unprepare(node, vm)
        assert sibling in devices(node)
    finally:
        node.stop()


def binder_again(root: pathlib.Path) -> fs_vfio.SysfsVfio:
    """The same sysfs tree, seen by a restarted process."""
    return fs_vfio.SysfsVfio(str(root / "sys"), str(root / "devroot"))


def test_device_metadata_is_written_mounted_and_removed(root: pathlib.Path) -> None:
    node = start(root, METADATA)
    try:
        vm = schedule(node, "vm", "vfio.gpu.nvidia.com")
        function = allocated(vm)
        result = prepare(node, vm)
        uid = vm.claims[0]["metadata"]["uid"]
        [device] = result.devices
        assert device.cdi_device_ids == (
            f"k8s.gpu.nvidia.com/claim={uid}-{function}", f"gpu.nvidia.com/metadata={uid}_gpu",
        )
        plugin_dir = pathlib.Path(node.settings.plugin_dir)
        file = plugin_dir / "dra-device-metadata" / f"{NAMESPACE}_vm" / "gpu" / "metadata.json"
        first, second = json_stream(file.read_text())
        assert (first["apiVersion"], second["apiVersion"]) == (
            "metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
        [entry] = first["requests"][0]["devices"]
        published = devices(node)[function]
        assert entry == {"driver": DRIVER, "pool": gpu_demo.NODE_NAME, "name": function,
                         "attributes": published["attributes"]}
        spec_path = pathlib.Path(node.settings.cdi_root) / (
            f"gpu.nvidia.com_metadata_{uid}_gpu.json")
        spec = json.loads(spec_path.read_text())
        assert spec["kind"] == "gpu.nvidia.com/metadata"
        [mount] = spec["devices"][0]["containerEdits"]["mounts"]
        assert mount == {
            "hostPath": str(file),
            "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/vm/"
                             "gpu/gpu.nvidia.com-metadata.json",
            "options": ["ro", "bind"],
        }
        unprepare(node, vm)
        assert not file.parent.parent.exists()
        assert not spec_path.exists()
    finally:
        node.stop()


def test_numa_node_is_a_list_on_a_server_that_takes_lists(root: pathlib.Path) -> None:
    cluster = memory_cluster.InMemoryCluster(server_version="v1.37.2", list_type_attributes=True)
    node = start(root, f"{PASSTHROUGH},DRAListTypeAttributes=true", cluster=cluster)
    try:
        found = devices(node)
        assert found["gpu-vfio-0"]["attributes"]["resource.kubernetes.io/numaNode"] == {
            "ints": [1]
        }
    finally:
        node.stop()


def test_a_server_without_list_attributes_refuses_the_slice(root: pathlib.Path) -> None:
    cluster = memory_cluster.InMemoryCluster(server_version="v1.34.4")
    with pytest.raises(errors.RetryableError, match="ResourceSlice not published"):
        start(root, f"{PASSTHROUGH},DRAListTypeAttributes=true", cluster=cluster)


def test_numa_node_is_a_list_on_dynamic_mig_partitions_too(root: pathlib.Path) -> None:
    cluster = memory_cluster.InMemoryCluster(server_version="v1.37.2", list_type_attributes=True)
    node = gpu_demo.start_gpu_node(
        str(root / "node"), profile="hgx-h100",
        feature_gates="DynamicMIG=true,DRAListTypeAttributes=true", cluster=cluster,
    )
    try:
        found = devices(node)
        partitions = [n for n in found if "-mig-" in n]
        assert partitions
        assert {tuple(found[n]["attributes"]["resource.kubernetes.io/numaNode"]) for n in
                partitions} == {("ints",)}
    finally:
        node.stop()
