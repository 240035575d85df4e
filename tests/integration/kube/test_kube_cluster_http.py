"""KubeCluster end to end: the official client over real HTTP against the embedded API server.

The server is `adapters.memory.apiserver` (the in-memory cluster served over HTTP, with a
bearer token), which can be made to give what the real kube-apiserver of
`tests/integration/realkube` cannot be made to give on demand (401s, a lost watch history,
chosen status codes); the client, its config loading, auth headers, the HTTP layer and
streaming watches are all real.
"""

from __future__ import annotations

import itertools
import pathlib
import threading
from typing import Any

import pytest

from adapters.kube import _codec, cluster, leader, retrying, slices
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from core import errors, models, names, ports

NS = "team-a"


def _cd(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}},
    }


def test_kube_cluster_implements_the_cluster_port(kube: cluster.KubeCluster) -> None:
    port: ports.Cluster = kube
    assert port is kube


def test_create_get_and_already_exists(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer
) -> None:
    with pytest.raises(errors.NotFoundError):
        kube.get("ComputeDomain", namespace=NS, name="cd1")
    created = kube.create("ComputeDomain", _cd("cd1"))
    assert created["metadata"]["uid"]
    assert kube.get("ComputeDomain", namespace=NS, name="cd1") == created
    with pytest.raises(errors.AlreadyExistsError):
        kube.create("ComputeDomain", _cd("cd1"))
    served = server.requests()
    assert served[-1].user_agent == "test-controller"
    assert (served[1].method, served[1].path) == (
        "POST",
        "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains",
    )


def test_list_with_label_selector_and_across_namespaces(kube: cluster.KubeCluster) -> None:
    kube.create("ComputeDomain", _cd("a", tier="x"))
    kube.create("ComputeDomain", _cd("b", tier="y"))
    other = _cd("c", tier="x")
    other["metadata"]["namespace"] = "team-b"
    last = kube.create("ComputeDomain", other)
    in_ns = kube.list("ComputeDomain", namespace=NS, label_selector={"tier": "x"})
    assert [i["metadata"]["name"] for i in in_ns.items] == ["a"]
    assert in_ns.items[0]["kind"] == "ComputeDomain"
    everywhere = kube.list("ComputeDomain", label_selector={"tier": "x"})
    assert sorted(i["metadata"]["name"] for i in everywhere.items) == ["a", "c"]
    assert int(everywhere.resource_version) >= int(last["metadata"]["resourceVersion"])


def test_items_of_a_built_in_kinds_list_get_their_kind_back(kube: cluster.KubeCluster) -> None:
    # The API server leaves kind and apiVersion out of a built-in kind's list items.
    kube.create("Lease", {"metadata": {"name": "l1", "namespace": NS}, "spec": {}})
    (item,) = kube.list("Lease", namespace=NS).items
    assert (item["kind"], item["apiVersion"]) == ("Lease", "coordination.k8s.io/v1")


def test_merge_patch_with_and_without_precondition(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer
) -> None:
    created = kube.create("ComputeDomain", _cd("cd1"))
    rv = created["metadata"]["resourceVersion"]
    patched = kube.patch(
        "ComputeDomain",
        namespace=NS,
        name="cd1",
        patch={"metadata": {"finalizers": [names.COMPUTE_DOMAIN_FINALIZER]}},
        resource_version=rv,
    )
    assert patched["metadata"]["finalizers"] == [names.COMPUTE_DOMAIN_FINALIZER]
    assert server.requests()[-1].content_type == "application/merge-patch+json"
    with pytest.raises(errors.ConflictError, match="re-read and retry"):
        kube.patch(
            "ComputeDomain", namespace=NS, name="cd1", patch={"metadata": {}}, resource_version=rv
        )
    kube.patch(
        "ComputeDomain", namespace=NS, name="cd1", patch={"metadata": {"labels": {"z": "1"}}}
    )
    with pytest.raises(errors.NotFoundError):
        kube.patch("ComputeDomain", namespace=NS, name="nope", patch={})


def test_status_subresource_patch(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer
) -> None:
    kube.create("ComputeDomain", _cd("cd1"))
    patched = kube.patch(
        "ComputeDomain",
        namespace=NS,
        name="cd1",
        patch={"status": {"status": "Ready"}},
        subresource="status",
    )
    assert patched["status"] == {"status": "Ready"}
    assert server.requests()[-1].path.endswith("/computedomains/cd1/status")


def test_cluster_scoped_create_and_delete(kube: cluster.KubeCluster) -> None:
    obj = {"metadata": {"name": "node-1-slice"}, "spec": {"driver": "d", "nodeName": "node-1"}}
    created = kube.create("ResourceSlice", obj)
    assert created["apiVersion"] == "resource.k8s.io/v1"
    kube.delete("ResourceSlice", namespace="", name="node-1-slice")
    with pytest.raises(errors.NotFoundError):
        kube.delete("ResourceSlice", namespace="", name="node-1-slice")


def test_server_errors_keep_status_and_wrong_token_is_unauthorized(
    kube: cluster.KubeCluster,
    server: apiserver.EmbeddedAPIServer,
    tmp_path: pathlib.Path,
) -> None:
    server.fail_next("GET", 503)
    with pytest.raises(_codec.APIStatusError) as caught:
        kube.get("Node", namespace="", name="n1")
    assert caught.value.status == 503
    server.token = "rotated"
    with pytest.raises(_codec.APIStatusError, match="kubeconfig") as unauthorized:
        kube.list("Node")
    assert unauthorized.value.status == 401


def test_unreachable_server_is_a_cluster_error(
    memory: memory_cluster.InMemoryCluster, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "kubeconfig"
    with apiserver.EmbeddedAPIServer(memory) as gone:
        gone.write_kubeconfig(str(path))
    # The server stopped: its port is closed now.
    kc = cluster.KubeCluster.from_config(str(path))
    with pytest.raises(errors.ClusterError, match="cannot reach"):
        kc.get("Node", namespace="", name="n1")


def test_missing_kubeconfig_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(errors.ConfigError, match="kubeconfig"):
        cluster.KubeCluster.from_config(str(tmp_path / "absent"))


def test_in_cluster_config_is_chosen_inside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # No service-account token on this machine: the in-cluster loader is what fails.
    with pytest.raises(errors.ConfigError, match="in-cluster"):
        cluster.KubeCluster.from_config(None)


def test_watch_streams_events_after_resource_version(kube: cluster.KubeCluster) -> None:
    start = kube.list("ComputeDomain", namespace=NS).resource_version
    kube.create("ComputeDomain", _cd("a"))
    kube.patch("ComputeDomain", namespace=NS, name="a", patch={"metadata": {"labels": {"k": "v"}}})
    kube.delete("ComputeDomain", namespace=NS, name="a")
    events = list(
        itertools.islice(
            kube.watch("ComputeDomain", namespace=NS, resource_version=start, timeout_s=5), 3
        )
    )
    assert [(e.type, e.obj["metadata"]["name"]) for e in events] == [
        (ports.WatchEventType.ADDED, "a"),
        (ports.WatchEventType.MODIFIED, "a"),
        (ports.WatchEventType.DELETED, "a"),
    ]


def test_watch_delivers_live_events_and_ends_at_timeout(kube: cluster.KubeCluster) -> None:
    start = kube.list("ComputeDomain", namespace=NS).resource_version
    timer = threading.Timer(0.3, lambda: kube.create("ComputeDomain", _cd("late")))
    timer.start()
    events = list(kube.watch("ComputeDomain", namespace=NS, resource_version=start, timeout_s=1))
    timer.join()
    assert [e.obj["metadata"]["name"] for e in events] == ["late"]


def test_watch_from_compacted_version_raises_gone(
    kube: cluster.KubeCluster, memory: memory_cluster.InMemoryCluster
) -> None:
    before = kube.list("ComputeDomain", namespace=NS).resource_version
    kube.create("ComputeDomain", _cd("a"))
    memory.compact()
    with pytest.raises(errors.GoneError):
        list(kube.watch("ComputeDomain", namespace=NS, resource_version=before, timeout_s=5))


def test_informer_relists_after_410_over_http(
    kube: cluster.KubeCluster, memory: memory_cluster.InMemoryCluster
) -> None:
    kube.create("ComputeDomain", _cd("a"))
    stop = threading.Event()
    informer = retrying.list_then_watch(
        kube, "ComputeDomain", namespace=NS, timeout_s=2, stop=stop, sleep=lambda _: None
    )
    first = list(itertools.islice(informer, 2))
    assert isinstance(first[0], retrying.Relist)
    kube.create("ComputeDomain", _cd("b"))
    assert _event_name(next(informer)) == "b"
    memory.compact()
    kube.create("ComputeDomain", _cd("c"))
    relisted = next(informer)
    assert isinstance(relisted, retrying.Relist)
    assert sorted(i["metadata"]["name"] for i in relisted.items) == ["a", "b", "c"]
    stop.set()
    informer.close()


def _event_name(event: retrying.InformerEvent) -> str:
    assert isinstance(event, ports.WatchEvent)
    return str(event.obj["metadata"]["name"])


def test_conflict_retry_against_a_concurrent_writer(kube: cluster.KubeCluster) -> None:
    kube.create("ComputeDomain", _cd("cd1"))
    attempts: list[int] = []

    def add_label() -> None:
        current = kube.get("ComputeDomain", namespace=NS, name="cd1")
        if not attempts:  # another writer sneaks in between our read and our write
            kube.patch("ComputeDomain", namespace=NS, name="cd1", patch={"spec": {"numNodes": 2}})
        attempts.append(1)
        kube.patch(
            "ComputeDomain",
            namespace=NS,
            name="cd1",
            patch={"metadata": {"labels": {"seen": "yes"}}},
            resource_version=current["metadata"]["resourceVersion"],
        )

    retrying.retry_on_conflict(add_label, sleep=lambda _: None)
    final = kube.get("ComputeDomain", namespace=NS, name="cd1")
    assert len(attempts) == 2
    assert final["metadata"]["labels"]["seen"] == "yes"
    assert final["spec"]["numNodes"] == 2


def test_emit_event_creates_a_core_v1_event(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer
) -> None:
    ref = models.ObjectRef(kind="ComputeDomain", name="cd1", namespace=NS, uid="uid-1")
    kube.emit_event(involved=ref, reason="InvalidAllocationMode", message="use Single")
    (event,) = kube.list("Event", namespace=NS).items
    assert event["metadata"]["name"].startswith("cd1.")
    assert event["involvedObject"]["uid"] == "uid-1"
    assert event["type"] == "Warning"
    assert event["reason"] == "InvalidAllocationMode"
    assert event["source"] == {"component": "test-controller"}
    assert event["count"] == 1


def test_emit_event_failure_is_logged_not_raised(
    kube: cluster.KubeCluster,
    server: apiserver.EmbeddedAPIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.fail_next("POST", 500)
    kube.emit_event(
        involved=models.ObjectRef(kind="Node", name="n1"), reason="R", message="m", warning=False
    )
    assert "event not recorded" in caplog.text


def test_leader_election_over_http(kube: cluster.KubeCluster) -> None:
    now = [0.0]
    a = leader.LeaderElector(
        cluster=kube, namespace="drv", name="ctl", identity="a", clock=lambda: now[0]
    )
    b = leader.LeaderElector(
        cluster=kube, namespace="drv", name="ctl", identity="b", clock=lambda: now[0]
    )
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    now[0] += 16
    assert b.try_acquire_or_renew()
    lease = kube.get("Lease", namespace="drv", name="ctl")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_slice_publisher_over_http(kube: cluster.KubeCluster) -> None:
    publisher = slices.SlicePublisher(kube, driver=names.DRIVER_NAME, node_name="node-1")
    device = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
    publisher.publish([device])
    publisher.publish([device])
    (only,) = publisher.existing()
    assert only["spec"]["pool"]["generation"] == 1
    publisher.publish([device, {**device, "name": "daemon-0"}])
    (only,) = publisher.existing()
    assert only["spec"]["pool"]["generation"] == 2
    assert [d["name"] for d in only["spec"]["devices"]] == ["channel-0", "daemon-0"]


def test_server_version_is_the_gitversion_of_get_version(
    kube: cluster.KubeCluster, memory: memory_cluster.InMemoryCluster
) -> None:
    assert isinstance(kube, ports.ServerVersion)
    assert kube.server_version() == memory.server_version() == "v1.35.0"


def test_server_version_without_a_gitversion_is_a_cluster_error(
    kube: cluster.KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube._api, "request_json", lambda request: {"major": "1"})
    with pytest.raises(errors.ClusterError, match="no gitVersion"):
        kube.server_version()
