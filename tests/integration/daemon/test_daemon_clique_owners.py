"""Every daemon pod owns its ComputeDomainClique, so the clique goes with the last daemon pod.

Without owners a clique was left forever: the controller deletes a deleted ComputeDomain's
cliques once its DaemonSet is gone, but the daemon pods are still terminating then, and a
daemon's next write re-created the clique. Upstream makes each daemon pod an ownerReference of
the clique (apiVersion v1, kind Pod, name, uid); the garbage collector (here: the embedded
cluster's) deletes the clique once every owner pod is gone. Real `compute-domain-daemon`
processes against the embedded API server, with the env the DaemonSet gives them.
"""

from __future__ import annotations

import signal
from typing import Any

import daemon_processes as dp

from adapters.memory import cluster as memory_cluster
from core import errors, kinds, names
from core.computedomain import membership


def _daemon_pod(cluster: memory_cluster.InMemoryCluster, node: dp.Node) -> dict[str, Any]:
    return dict(cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"imex-{node.name}", "namespace": dp.DRIVER_NAMESPACE},
        "spec": {"nodeName": node.name, "containers": [{"name": "imex", "image": "imex"}]},
    }))


def _args(node: dp.Node, pod: dict[str, Any], **kw: Any) -> list[str]:
    return [*dp.daemon_args(node, **kw),
            "--pod-name", pod["metadata"]["name"], "--pod-uid", pod["metadata"]["uid"]]


def _clique(cluster: memory_cluster.InMemoryCluster, cd_uid: str) -> dict[str, Any] | None:
    try:
        return dict(cluster.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=dp.DRIVER_NAMESPACE,
                                name=membership.clique_object_name(cd_uid, dp.CLIQUE_A)))
    except errors.NotFoundError:
        return None


def _owners(cluster: memory_cluster.InMemoryCluster, cd_uid: str) -> list[dict[str, Any]]:
    clique = _clique(cluster, cd_uid)
    return list((clique or {}).get("metadata", {}).get("ownerReferences") or [])


def _ref(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"]}


def test_each_daemon_pod_becomes_an_owner_and_the_clique_goes_with_the_last_pod(
    served, bin_dir, launch, tmp_path
):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    nodes = dp.nodes(tmp_path, 2)
    pods = [_daemon_pod(cluster, node) for node in nodes]
    processes = [
        launch(_args(node, pod, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
        for node, pod in zip(nodes, pods, strict=True)
    ]
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 2), what="two Ready entries")
    owners = _owners(cluster, cd_uid)
    assert sorted(owners, key=lambda r: r["name"]) == [_ref(p) for p in pods]
    assert not any(r.get("controller") or r.get("blockOwnerDeletion") for r in owners)

    # A clique that lost its owners (written by an older daemon) gets them back, entries as is.
    clique = _clique(cluster, cd_uid)
    assert clique is not None
    cluster.patch(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=dp.DRIVER_NAMESPACE,
                  name=clique["metadata"]["name"], patch={"metadata": {"ownerReferences": None}})
    dp.eventually(
        lambda: sorted(_owners(cluster, cd_uid), key=lambda r: r["name"]) == [
            _ref(p) for p in pods],
        what="both daemons to own the clique again",
    )

    # The first pod leaves: its entry goes, its (now dangling) reference is the GC's to drop.
    processes[0].signal(signal.SIGTERM)
    assert processes[0].wait(timeout_s=30) == 0, processes[0].output()
    cluster.delete(kinds.POD.kind, namespace=dp.DRIVER_NAMESPACE, name=pods[0]["metadata"]["name"])
    assert [p.node_name for p in dp.entries(cluster, cd_uid=cd_uid)] == [nodes[1].name]
    assert _clique(cluster, cd_uid) is not None, "the second daemon pod still owns it"

    # The last pod goes: so does the clique, whoever created it.
    processes[1].signal(signal.SIGTERM)
    assert processes[1].wait(timeout_s=30) == 0, processes[1].output()
    cluster.delete(kinds.POD.kind, namespace=dp.DRIVER_NAMESPACE, name=pods[1]["metadata"]["name"])
    assert _clique(cluster, cd_uid) is None


def test_a_clique_a_daemon_re_creates_after_the_controller_deleted_it_still_goes_with_its_pod(
    served, bin_dir, launch, tmp_path
):
    """The controller's clean-up of a deleted ComputeDomain races its terminating daemons."""
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    pod = _daemon_pod(cluster, node)
    process = launch(_args(node, pod, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="a Ready entry")
    first = _clique(cluster, cd_uid)
    assert first is not None

    cluster.delete(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=dp.DRIVER_NAMESPACE,
                   name=first["metadata"]["name"])

    def recreated() -> dict[str, Any] | None:
        again = _clique(cluster, cd_uid)
        uid = (again or {}).get("metadata", {}).get("uid")
        return again if uid and uid != first["metadata"]["uid"] and again.get("daemons") else None

    again = dp.eventually(recreated, what="the daemon to write its clique back")
    assert again["metadata"]["ownerReferences"] == [_ref(pod)]
    assert again["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == cd_uid
    process.signal(signal.SIGTERM)
    assert process.wait(timeout_s=30) == 0, process.output()
    cluster.delete(kinds.POD.kind, namespace=dp.DRIVER_NAMESPACE, name=pod["metadata"]["name"])
    assert _clique(cluster, cd_uid) is None
