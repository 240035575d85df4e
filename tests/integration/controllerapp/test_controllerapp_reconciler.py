"""The controller's reconcile loop on the embedded cluster: passes, invalid objects, restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from core import errors, kinds, models, modes, names, ports


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


def test_running_loop_reacts_to_watch_events() -> None:
    cluster = memory_cluster.InMemoryCluster()
    reconciler = _reconciler(cluster)
    stop = threading.Event()
    controller_reconciler.watch_changes(cluster, reconciler, stop)
    loop = threading.Thread(target=reconciler.run, args=(stop,), kwargs={"resync_s": 60},
                            daemon=True)
    loop.start()
    try:
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("w"))
        deadline = time.monotonic() + 10
        while True:
            cd = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="w")
            if (cd.get("status") or {}).get("status") == "Ready":
                break
            assert time.monotonic() < deadline, "controller did not react to the new CD"
            time.sleep(0.01)
    finally:
        stop.set()
        cluster.close()
        loop.join(timeout=10)
    assert not loop.is_alive()


class _ForbiddenLists(memory_cluster.InMemoryCluster):
    """Every list is refused, as with a missing RBAC rule; counts the attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    def list(self, kind: str, *, namespace: str = "",
             label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
        self.lists += 1
        raise errors.ClusterError(f"{kind} is forbidden: missing RBAC rule")


def test_a_persistently_failing_pass_backs_off_instead_of_spinning() -> None:
    cluster = _ForbiddenLists()
    reconciler = _reconciler(cluster)
    stop = threading.Event()
    loop = threading.Thread(target=reconciler.run, args=(stop,),
                            kwargs={"resync_s": 60, "min_interval_s": 0}, daemon=True)
    loop.start()
    time.sleep(1.5)
    stop.set()
    reconciler.mark_dirty()
    loop.join(timeout=40)
    # Capped exponential backoff from 0.25 s: a handful of passes, not one per 50 ms.
    assert 1 <= cluster.lists <= 8, cluster.lists


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


def test_node_status_updates_do_not_wake_the_reconciler_but_label_changes_do() -> None:
    relevant = controller_reconciler.NodeLabelFilter()
    added, modified, deleted = (ports.WatchEventType.ADDED, ports.WatchEventType.MODIFIED,
                                ports.WatchEventType.DELETED)
    assert relevant.changed(ports.WatchEvent(type=added, obj=_node("n1")))
    assert not relevant.changed(ports.WatchEvent(type=modified, obj=_node("n1", heartbeat="t1")))
    assert relevant.changed(ports.WatchEvent(type=modified, obj=_node("n1", label="uid-1")))
    assert not relevant.changed(
        ports.WatchEvent(type=modified, obj=_node("n1", label="uid-1", heartbeat="t2"))
    )
    assert relevant.changed(ports.WatchEvent(type=modified, obj=_node("n1")))
    assert relevant.changed(ports.WatchEvent(type=deleted, obj=_node("n1")))
    assert relevant.changed(ports.WatchEvent(type=modified, obj=_node("n2", heartbeat="t3")))
