"""The kubelet plugin against a real kube-apiserver, with a token bound to a Pod on its node.

It publishes its node's ResourceSlice under the chart's admission policy (which refuses a
slice for any other node), and prepares a claim that the test allocates as the scheduler
would, through the kubelet's gRPC socket.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
import realkube_driver
from realkube_driver import WORKLOAD_NAMESPACE, Driver, PluginNode
from realkube_server import wait_for

from adapters.grpc import client as grpc_client
from adapters.kube import KubeCluster
from adapters.nvml import simulated
from core import errors, kinds, names

pytestmark = pytest.mark.slow


def slices_of(admin: KubeCluster, node: str) -> list[Mapping[str, Any]]:
    items = admin.list(kinds.RESOURCE_SLICE.kind).items
    return [s for s in items if s["spec"].get("nodeName") == node]


def test_the_plugin_publishes_its_node_slice_with_a_pod_bound_token(
    installed: Driver, node: PluginNode, plugin: realkube_driver.AppProcess, admin: KubeCluster
) -> None:
    def published() -> list[Mapping[str, Any]] | None:
        if not plugin.running:
            raise AssertionError(f"plugin exited:\n{plugin.output()[-4000:]}")
        return slices_of(admin, node.name) or None

    slices = wait_for(published, what="the node's ResourceSlice", timeout_s=60)
    devices = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert names.channel_device_name(0) in devices
    assert (names.daemon_device_name() in devices) == (installed.mode == "driverManaged")
    assert all(s["spec"]["driver"] == names.DRIVER_NAME for s in slices)
    # Owned by the node's Node (the garbage collector deletes them with it), as upstream.
    node_uid = admin.get(kinds.NODE.kind, namespace="", name=node.name)["metadata"]["uid"]
    assert all(s["metadata"].get("ownerReferences") == [
        {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid,
         "controller": True}] for s in slices)


def _empty_slice(*, name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": names.DRIVER_NAME, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": []},
    }


def _refusal(installed: Driver, kubeconfig: pathlib.Path, slice_obj: dict[str, Any]) -> str:
    """The API server's refusal of `slice_obj` written with `kubeconfig`'s credentials."""
    writer = installed.kube.cluster(kubeconfig, component="slice-writer")

    def refused() -> str | None:
        # NB: the API server loads a new policy through an informer: until it has, writes pass.
        try:
            writer.create(kinds.RESOURCE_SLICE.kind, slice_obj)
        except errors.ClusterError as exc:
            return exc.message
        writer.delete(kinds.RESOURCE_SLICE.kind, namespace="", name=slice_obj["metadata"]["name"])
        return None

    try:
        return wait_for(refused, what="the admission policy to refuse the slice", timeout_s=30)
    finally:
        writer.close()


def test_the_admission_policy_refuses_a_slice_for_another_node(
    installed: Driver, node: PluginNode, plugin: realkube_driver.AppProcess
) -> None:
    other = realkube_driver.nodes()[1]
    message = _refusal(
        installed, installed.plugin_credentials(node.name).kubeconfig,
        _empty_slice(name=f"{other}-forged", node=other),
    )
    assert (
        f"the kubelet plugin on node {node.name} may only write ResourceSlices with "
        f"spec.nodeName {node.name}, not {other}"
    ) in message


@pytest.mark.parametrize("credential", ["unbound service-account token", "static token"])
def test_the_admission_policy_names_the_problem_for_a_token_without_a_node(
    installed: Driver, node: PluginNode, plugin: realkube_driver.AppProcess, credential: str
) -> None:
    if credential == "static token":
        token = installed.kube.static_tokens[realkube_driver.PLUGIN_USERNAME]
        kubeconfig = installed.kube.kubeconfig(token, name="static-plugin")
    else:  # bound to no Pod: it has `user.extra`, but no node name in it
        kubeconfig = installed.kube.credentials_for(
            namespace=realkube_driver.NAMESPACE,
            service_account=installed.service_account("kubelet-plugin"),
        ).kubeconfig
    message = _refusal(installed, kubeconfig,
                       _empty_slice(name=f"{node.name}-nodeless", node=node.name))
    assert "the kubelet plugin's token names no node" in message
    assert "no such key" not in message


def _stand_in_for_the_imex_daemon(
    installed: Driver, admin: KubeCluster, *, cd_uid: str, node: PluginNode
) -> None:
    """Driver-managed: the node's IMEX daemon pod exists and reports itself Ready in its
    clique (without its pod, the controller would drop the entry of an unlabelled node)."""
    pod = installed.kube.create_pod_on_node(
        namespace=realkube_driver.NAMESPACE, name=f"imex-{cd_uid[:8]}-{node.name}",
        node=node.name, service_account=installed.service_account("daemon"),
    )
    admin.patch(kinds.POD.kind, namespace=realkube_driver.NAMESPACE,
                name=pod["metadata"]["name"], patch={"metadata": {"labels": {
                    names.COMPUTE_DOMAIN_LABEL: cd_uid,
                    names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_DAEMON}}})
    rack = "rack1"
    clique_id = f"{uuid.UUID(bytes=simulated.cluster_uuid(realkube_driver.PROFILE, rack=rack))}.1"
    admin.create(kinds.COMPUTE_DOMAIN_CLIQUE.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {"name": f"{cd_uid}.{clique_id}", "namespace": realkube_driver.NAMESPACE,
                     "labels": {names.COMPUTE_DOMAIN_LABEL: cd_uid}},
        "daemons": [{"nodeName": node.name, "ipAddress": "10.0.0.1", "cliqueID": clique_id,
                     "index": 0, "status": "Ready"}],
    })


def test_a_claim_allocated_on_the_node_is_prepared_through_the_kubelet_socket(
    installed: Driver, node: PluginNode, plugin: realkube_driver.AppProcess,
    controller: realkube_driver.AppProcess, admin: KubeCluster,
) -> None:
    cd = admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "prep", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "prep-channel"}}},
    })
    cd_uid = cd["metadata"]["uid"]
    wait_for(
        lambda: admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="prep")
        .get("metadata", {}).get("annotations"),
        what="the controller to admit the ComputeDomain", timeout_s=60,
    )
    if installed.mode == "driverManaged":
        _stand_in_for_the_imex_daemon(installed, admin, cd_uid=cd_uid, node=node)
    pod = installed.workload_pod("worker-0", node=node.name)
    ref = realkube_driver.allocated_channel_claim(
        admin, name="worker-0-channel", node=node.name, cd_uid=cd_uid, pod=pod
    )

    with grpc_client.DRAClient(str(node.dra_socket), timeout_s=45) as dra:
        results = dra.prepare([ref])
    result = results[ref.uid]
    assert result.error == "", f"{result.error}\nplugin output:\n{plugin.output()[-4000:]}"
    ids = [i for d in result.devices for i in d.cdi_device_ids]
    assert ids == [f"{names.CDI_KIND_CLAIM}={ref.uid}-channel-0"]
    assert node.cdi_file(ref.uid).exists()

    with grpc_client.DRAClient(str(node.dra_socket), timeout_s=45) as dra:
        undone = dra.unprepare([ref])
    assert undone[ref.uid].error == ""
    assert not node.cdi_file(ref.uid).exists()
