"""The reconciler's list-based pass on the embedded cluster: invalid objects, metrics, scopes.

The production loop (informers, work queue, workers) is pinned in test_controllerapp_queue.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from core import kinds, models, names, ports
from core.computedomain import modes


def _host_config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEX=true",
        namespace="nvidia-dra-driver",
    ).config


def _cd(name: str, *, rct: str | None = None) -> dict[str, object]:
    template = f"{name}-channel" if rct is None else rct
    channel: dict[str, object] = {"resourceClaimTemplate": {"name": template}}
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "ml"}, "spec": {"channel": channel},
    }


def _reconciler(cluster: memory_cluster.InMemoryCluster) -> controller_reconciler.Reconciler:
    return controller_reconciler.Reconciler(
        cluster=cluster, config=_host_config(),
        metrics=controller_metrics.ControllerMetrics(),
    )


def test_an_undecodable_compute_domain_gets_an_event_and_does_not_stop_the_others() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("good"))
    cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("bad", rct=""))
    reconciler = _reconciler(cluster)
    while reconciler.reconcile_all():
        pass
    cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace="ml", name="good-channel")
    events = cluster.list(kinds.EVENT.kind, namespace="ml").items
    [invalid] = [e for e in events if e["reason"] == "InvalidComputeDomain"]
    assert invalid["involvedObject"]["name"] == "bad"
    assert "resourceClaimTemplate.name" in invalid["message"]


def test_metrics_follow_compute_domains_and_forget_deleted_ones() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("a"))
    reconciler = _reconciler(cluster)
    metrics = reconciler._metrics
    assert metrics is not None
    while reconciler.reconcile_all():
        pass
    text = metrics.exposition().decode()
    assert 'nvidia_dra_compute_domain_info{' in text and 'name="a"' in text
    assert 'status="Ready"' in text
    cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="a")
    while reconciler.reconcile_all():
        pass
    assert 'name="a"' not in metrics.exposition().decode()


def test_an_undecodable_compute_domain_is_reported_once_per_change() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("bad", rct=""))
    reconciler = _reconciler(cluster)
    for _ in range(3):
        reconciler.reconcile_all()

    def invalid_count() -> int:
        events = cluster.list(kinds.EVENT.kind, namespace="ml").items
        return sum(int(e.get("count", 1)) for e in events
                   if e["reason"] == "InvalidComputeDomain")

    assert invalid_count() == 1
    cluster.patch(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="bad",
                  patch={"metadata": {"labels": {"touched": "yes"}}})
    reconciler.reconcile_all()
    reconciler.reconcile_all()
    assert invalid_count() == 2


def test_daemon_side_kinds_are_observed_in_the_driver_namespace_only() -> None:
    recorded: list[tuple[str, str]] = []

    class Recording(memory_cluster.InMemoryCluster):
        def list(self, kind: str, *, namespace: str = "",
                 label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
            recorded.append((kind, namespace))
            return super().list(kind, namespace=namespace, label_selector=label_selector)

    reconciler = _reconciler(Recording())
    reconciler.reconcile_all()
    scopes = dict(recorded)
    assert scopes[kinds.DAEMON_SET.kind] == "nvidia-dra-driver"
    assert scopes[kinds.COMPUTE_DOMAIN_CLIQUE.kind] == "nvidia-dra-driver"
    assert scopes[kinds.COMPUTE_DOMAIN.kind] == ""
    assert reconciler.watch_namespace(kinds.DAEMON_SET.kind) == "nvidia-dra-driver"
    assert reconciler.watch_namespace(kinds.NODE.kind) == ""


def _node(name: str, *, label: str | None = None, heartbeat: str = "") -> dict[str, object]:
    labels = {names.COMPUTE_DOMAIN_LABEL: label} if label else {}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": heartbeat}]}}


def test_node_status_updates_do_not_matter_but_label_changes_do() -> None:
    changed = controller_reconciler.node_label_changed
    assert not changed(None, _node("n1"))
    assert not changed(_node("n1"), _node("n1", heartbeat="t1"))
    assert changed(_node("n1"), _node("n1", label="uid-1"))
    assert not changed(_node("n1", label="uid-1"), _node("n1", label="uid-1", heartbeat="t2"))
    assert changed(_node("n1", label="uid-1"), _node("n1"))
    assert changed(_node("n1", label="uid-1"), None)
    assert changed(None, _node("n2", label="uid-2"))
