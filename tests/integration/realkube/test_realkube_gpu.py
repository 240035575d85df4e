"""The GPU half on a real kube-apiserver (v1.34), with the chart's `resources.gpus.enabled=true`.

One API server for the module, the ComputeDomain half in its default (driver-managed) mode:
- the whole rendering passes a strict server-side dry-run apply, and the GPU DeviceClasses are
  served as rendered (the server compiles their CEL selectors when it accepts them);
- `gpu-kubelet-plugin`, run with the env of the chart's `gpu-kubelet-plugin` container and a
  token of the plugin ServiceAccount bound to a Pod on its node, publishes the node's
  `gpu.nvidia.com` slice of the eight simulated H100s past the chart's admission policy, which
  refuses a slice for another node written with the same token;
- a claim allocated `gpu-0` as the scheduler would is prepared and unprepared through the
  plugin's DRA socket (v1 and v1beta1), leaving and then removing its CDI spec; a prepared
  claim deleted from the API server is cleaned up with a Warning Event on the Node;
- over all of it, the plugin never met a 403: the chart's RBAC covers what it does.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import realkube_driver
import realkube_gpu
from kubernetes import dynamic
from realkube_gpu import GpuDriver, GpuPluginNode
from realkube_server import wait_for

from adapters.grpc import client as grpc_client
from adapters.kube import KubeCluster
from adapters.nvml import inventory as nvml_inventory
from core import errors, gates, kinds, names
from core.gpu import slices as gpu_slice_planner

_UNIT_GPU = pathlib.Path(__file__).resolve().parents[2] / "unit" / "gpu"
if str(_UNIT_GPU) not in sys.path:
    sys.path.insert(0, str(_UNIT_GPU))

import gpu_prep_fixtures  # type: ignore[import-not-found]  # noqa: E402  (CDI schema check)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not realkube_gpu.can_make_device_nodes(),
        reason="the GPU plugin needs a character /dev/nvidiactl under its dev root: mknod "
        "needs root",
    ),
]

H100_GPUS = 8
UPSTREAM_GPU_ATTRIBUTES = (
    "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
    "driverVersion", "cudaDriverVersion", "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
)


@pytest.fixture(scope="module")
def gpu_installed() -> Iterator[GpuDriver]:
    kube = realkube_driver.fresh_kube(prefix="realkube-gpu-")
    driver = GpuDriver(kube, workdir=kube.workdir)
    try:
        driver.install()
        yield driver
    finally:
        driver.stop()
        kube.stop()
        shutil.rmtree(kube.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def gpu_admin(gpu_installed: GpuDriver) -> Iterator[KubeCluster]:
    cluster: KubeCluster = gpu_installed.admin()
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def gpu_node(gpu_installed: GpuDriver) -> GpuPluginNode:
    return gpu_installed.gpu_plugin_node(realkube_driver.nodes()[0])


@pytest.fixture(scope="module")
def gpu_plugin(
    gpu_installed: GpuDriver, gpu_node: GpuPluginNode
) -> Iterator[realkube_driver.AppProcess]:
    process = gpu_installed.start_gpu_plugin(gpu_node)
    realkube_gpu.wait_gpu_registered(process, gpu_node)
    yield process
    process.stop()


def planned_devices(node: GpuPluginNode) -> list[Mapping[str, Any]]:
    """The devices the plugin publishes for `node` with the chart's (empty) feature gates."""
    found = nvml_inventory.gpu_discovery_from_spec(
        f"simulated:{realkube_gpu.PROFILE}", node_name=node.name,
        driver_root=str(node.driver_root),
    ).gpu_inventory()
    resolved = gates.resolve_gates(gates.parse_feature_gates(""))
    return [dict(d) for d in gpu_slice_planner.plan_gpu_devices(found, gates=resolved)]


def gpu_slices(admin: KubeCluster, node: str) -> list[Mapping[str, Any]]:
    return [
        s for s in admin.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"].get("nodeName") == node and s["spec"].get("driver") == realkube_gpu.DRIVER
    ]


# -- 1. the chart -------------------------------------------------------------------------


def test_every_object_of_the_gpu_rendering_passes_a_strict_server_side_dry_run(
    gpu_installed: GpuDriver,
) -> None:
    dyn = dynamic.DynamicClient(gpu_installed.kube.admin_client())  # type: ignore[no-untyped-call]
    refused: list[str] = []
    for obj in gpu_installed.rendered:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") or realkube_driver.NAMESPACE
        try:
            resource.server_side_apply(
                body=obj, name=obj["metadata"]["name"],
                namespace=namespace if resource.namespaced else None,
                field_manager="realkube-gpu-test", force_conflicts=True, dry_run="All",
                query_params=[("fieldValidation", "Strict")],
            )
        except dynamic.exceptions.DynamicApiError as exc:
            summary = exc.summary()  # type: ignore[no-untyped-call]
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {summary}")
    assert refused == []


def test_the_gpu_device_classes_are_served_as_the_chart_renders_them(
    gpu_installed: GpuDriver, gpu_admin: KubeCluster
) -> None:
    rendered = {
        o["metadata"]["name"]: o for o in gpu_installed.rendered if o["kind"] == "DeviceClass"
    }
    served = {c["metadata"]["name"]: c for c in gpu_admin.list(kinds.DEVICE_CLASS.kind).items}
    for name in realkube_gpu.GPU_CLASSES:
        assert name in served, f"DeviceClass {name} missing; served: {sorted(served)}"
        assert served[name]["spec"]["selectors"] == rendered[name]["spec"]["selectors"]
    # NB: PassthroughSupport is off by default, and with it the VFIO class.
    assert "vfio.gpu.nvidia.com" not in served
    containers = [
        c["name"]
        for d in gpu_admin.list(kinds.DAEMON_SET.kind, namespace=realkube_driver.NAMESPACE).items
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert realkube_gpu.GPU_CONTAINER in containers


# -- 2. the node's slice ------------------------------------------------------------------


def test_the_gpu_plugin_publishes_its_node_slice_with_a_pod_bound_token(
    gpu_node: GpuPluginNode, gpu_plugin: realkube_driver.AppProcess, gpu_admin: KubeCluster
) -> None:
    def published() -> list[Mapping[str, Any]] | None:
        if not gpu_plugin.running:
            raise AssertionError(f"gpu plugin exited:\n{gpu_plugin.output()[-4000:]}")
        return gpu_slices(gpu_admin, gpu_node.name) or None

    slices = wait_for(published, what="the node's gpu.nvidia.com ResourceSlice", timeout_s=60)
    devices = {d["name"]: d for s in slices for d in s["spec"]["devices"]}
    assert sorted(devices) == sorted(f"gpu-{i}" for i in range(H100_GPUS))
    assert all(s["spec"]["pool"]["name"] == gpu_node.name for s in slices)
    # What the server stored is what the planner published: nothing dropped or rewritten.
    planned = planned_devices(gpu_node)
    assert [devices[d["name"]] for d in planned] == planned
    attributes = devices["gpu-0"]["attributes"]
    assert set(UPSTREAM_GPU_ATTRIBUTES) <= set(attributes), sorted(attributes)
    assert attributes["type"] == {"string": "gpu"}
    assert "H100" in attributes["productName"]["string"]
    assert set(devices["gpu-0"]["capacity"]) == {"memory"}
    # Owned by the node's Node (the garbage collector deletes them with it), as upstream.
    node_uid = gpu_admin.get(kinds.NODE.kind, namespace="", name=gpu_node.name)["metadata"]["uid"]
    assert all(s["metadata"].get("ownerReferences") == [
        {"apiVersion": "v1", "kind": "Node", "name": gpu_node.name, "uid": node_uid,
         "controller": True}] for s in slices)


def test_the_policy_refuses_a_slice_for_another_node_written_with_the_gpu_plugins_token(
    gpu_installed: GpuDriver, gpu_node: GpuPluginNode, gpu_plugin: realkube_driver.AppProcess
) -> None:
    other = realkube_driver.nodes()[1]
    forged_name = f"{other}-gpu-forged"
    forged: dict[str, Any] = {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": forged_name},
        "spec": {"driver": realkube_gpu.DRIVER, "nodeName": other,
                 "pool": {"name": other, "generation": 1, "resourceSliceCount": 1},
                 "devices": []},
    }
    writer = gpu_installed.kube.cluster(
        gpu_installed.plugin_credentials(gpu_node.name).kubeconfig, component="slice-writer"
    )

    def refused() -> str | None:
        # NB: the API server loads the policy through an informer: until it has, writes pass.
        try:
            writer.create(kinds.RESOURCE_SLICE.kind, forged)
        except errors.ClusterError as exc:
            return exc.message
        writer.delete(kinds.RESOURCE_SLICE.kind, namespace="", name=forged_name)
        return None

    try:
        message = wait_for(refused, what="the policy to refuse the forged slice", timeout_s=30)
    finally:
        writer.close()
    assert (
        f"the kubelet plugin on node {gpu_node.name} may only write ResourceSlices with "
        f"spec.nodeName {gpu_node.name}, not {other}"
    ) in message


# -- 3. prepare / unprepare ---------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_claim_allocated_gpu_0_is_prepared_and_unprepared_through_the_dra_socket(
    gpu_installed: GpuDriver, gpu_node: GpuPluginNode, gpu_plugin: realkube_driver.AppProcess,
    gpu_admin: KubeCluster, version: grpc_client.DRAVersion,
) -> None:
    pod = gpu_installed.workload_pod(f"gpu-worker-{version}", node=gpu_node.name)
    ref = realkube_gpu.allocated_gpu_claim(
        gpu_admin, name=f"gpu-worker-{version}-gpu", node=gpu_node.name, pod=pod
    )

    with grpc_client.DRAClient(str(gpu_node.dra_socket), version=version, timeout_s=45) as dra:
        result = dra.prepare([ref])[ref.uid]
    assert result.error == "", f"{result.error}\nplugin output:\n{gpu_plugin.output()[-4000:]}"
    ids = [i for d in result.devices for i in d.cdi_device_ids]
    assert ids == [f"k8s.gpu.nvidia.com/claim={ref.uid}-gpu-0"]
    spec: dict[str, Any] = gpu_prep_fixtures.check_cdi(
        json.loads(gpu_node.cdi_file(ref.uid).read_text(encoding="utf-8"))
    )
    edits = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    nodes = [n["path"] for e in edits for n in e.get("deviceNodes", ())]
    assert "/dev/nvidia0" in nodes and "/dev/nvidiactl" in nodes

    with grpc_client.DRAClient(str(gpu_node.dra_socket), version=version, timeout_s=45) as dra:
        undone = dra.unprepare([ref])[ref.uid]
    assert undone.error == ""
    assert not gpu_node.cdi_file(ref.uid).exists()


def test_a_prepared_claim_deleted_behind_the_plugins_back_is_cleaned_with_a_node_event(
    gpu_installed: GpuDriver, gpu_node: GpuPluginNode, gpu_plugin: realkube_driver.AppProcess,
    gpu_admin: KubeCluster,
) -> None:
    # The clean-up reads claims and writes an Event on the Node: both under the chart's RBAC.
    pod = gpu_installed.workload_pod("gpu-worker-gone", node=gpu_node.name)
    ref = realkube_gpu.allocated_gpu_claim(
        gpu_admin, name="gpu-worker-gone-gpu", node=gpu_node.name, pod=pod
    )
    with grpc_client.DRAClient(str(gpu_node.dra_socket), timeout_s=45) as dra:
        assert dra.prepare([ref])[ref.uid].error == ""
    assert gpu_node.cdi_file(ref.uid).exists()

    gpu_admin.delete(kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name)

    def node_event() -> Mapping[str, Any] | None:
        if not gpu_plugin.running:
            raise AssertionError(f"gpu plugin exited:\n{gpu_plugin.output()[-4000:]}")
        return next((
            e for e in gpu_admin.list(kinds.EVENT.kind).items
            if e.get("reason") == "StaleClaimCleaned" and ref.uid in e.get("message", "")
        ), None)

    event = wait_for(node_event, what="a StaleClaimCleaned Event naming the claim", timeout_s=30)
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == gpu_node.name
    assert not gpu_node.cdi_file(ref.uid).exists()


# -- 4. RBAC ------------------------------------------------------------------------------

# Our error text ("HTTP 403 Forbidden"), the API server's message, urllib3's request line.
_FORBIDDEN = re.compile(r'HTTP 403|forbidden|HTTP/1\.1" 403 ', re.IGNORECASE)
# urllib3's DEBUG line for every request (logged at LOG_VERBOSITY 7, see start_gpu_plugin).
_REQUEST = re.compile(r'"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1" (\d{3}) ')


def test_the_gpu_plugin_met_no_forbidden_answer_over_the_module(
    gpu_node: GpuPluginNode, gpu_plugin: realkube_driver.AppProcess, gpu_admin: KubeCluster
) -> None:
    # Last in the module: by now it has published, prepared and unprepared.
    assert gpu_plugin.running, gpu_plugin.output()[-4000:]
    assert gpu_slices(gpu_admin, gpu_node.name), "no slice: nothing was exercised"
    requests = _REQUEST.findall(gpu_plugin.output())
    # NB: without the per-request lines, a 403 the plugin swallowed would leave no trace.
    assert ("POST", "/apis/resource.k8s.io/v1/resourceslices", "201") in requests
    assert any(p.startswith("/apis/resource.k8s.io/v1/namespaces/") for _, p, _ in requests)
    forbidden = [line for line in gpu_plugin.output().splitlines() if _FORBIDDEN.search(line)]
    assert forbidden == [], "the chart's RBAC lacks a right the GPU plugin uses:\n" + "\n".join(
        forbidden
    )
