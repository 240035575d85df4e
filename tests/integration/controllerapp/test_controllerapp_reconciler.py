"""The reconciler in the controller loop on the embedded cluster: invalid objects, metrics,
the namespaces it reads. Each test changes the cluster, then waits until the loop settled
(`apps.controller.settling`) and looks at its answer.

The loop's own behaviour (events to keys, backoff, read-through) is pinned in
test_controllerapp_queue.py.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running, settling
from core import kinds, models, names, ports
from core.computedomain import modes

CD = kinds.COMPUTE_DOMAIN.kind


def _host_config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
        namespace="nvidia-dra-driver",
    ).config


def _cd(name: str, *, rct: str | None = None) -> dict[str, object]:
    template = f"{name}-channel" if rct is None else rct
    channel: dict[str, object] = {"resourceClaimTemplate": {"name": template}}
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "ml"}, "spec": {"channel": channel},
    }


@contextlib.contextmanager
def _running(
    cluster: memory_cluster.InMemoryCluster, metrics: controller_metrics.ControllerMetrics,
) -> Iterator[tuple[running.Controller, settling.Settling]]:
    reconciler = controller_reconciler.Reconciler(
        cluster=cluster, config=_host_config(), metrics=metrics
    )
    controller = running.Controller(reconciler, workers=4, resync_s=3600)
    settled = settling.Settling(controller)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    assert controller.synced.wait(30)
    try:
        yield controller, settled
    finally:
        stop.set()
        assert controller.stopped.wait(30)


def _invalid_reports(cluster: memory_cluster.InMemoryCluster) -> int:
    events = cluster.list(kinds.EVENT.kind, namespace="ml").items
    return sum(int(e.get("count", 1)) for e in events if e["reason"] == "InvalidComputeDomain")


def test_an_undecodable_compute_domain_gets_an_event_and_does_not_stop_the_others() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(CD, _cd("good"))
    cluster.create(CD, _cd("bad", rct=""))
    with _running(cluster, controller_metrics.ControllerMetrics()) as (_, settled):
        settled.wait()
    cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace="ml", name="good-channel")
    events = cluster.list(kinds.EVENT.kind, namespace="ml").items
    [invalid] = [e for e in events if e["reason"] == "InvalidComputeDomain"]
    assert invalid["involvedObject"]["name"] == "bad"
    assert "resourceClaimTemplate.name" in invalid["message"]


def test_metrics_follow_compute_domains_and_forget_deleted_ones() -> None:
    cluster = memory_cluster.InMemoryCluster()
    metrics = controller_metrics.ControllerMetrics()
    with _running(cluster, metrics) as (_, settled):
        cluster.create(CD, _cd("a"))
        settled.wait()
        text = metrics.exposition().decode()
        assert 'nvidia_dra_compute_domain_info{' in text and 'name="a"' in text
        assert 'status="Ready"' in text
        assert metrics.actions_applied() == 3  # finalizer, template, status

        cluster.delete(CD, namespace="ml", name="a")
        settled.wait()
        assert 'name="a"' not in metrics.exposition().decode()


def test_an_undecodable_compute_domain_is_reported_once_per_change() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(CD, _cd("bad", rct=""))
    with _running(cluster, controller_metrics.ControllerMetrics()) as (controller, settled):
        settled.wait()
        for _ in range(2):  # synced again, as a resync does: the same version is not news
            controller.queue.add(("ml", "bad"))
            settled.wait()
        assert _invalid_reports(cluster) == 1

        cluster.patch(CD, namespace="ml", name="bad",
                      patch={"metadata": {"labels": {"touched": "yes"}}})
        settled.wait()
        assert _invalid_reports(cluster) == 2


def test_daemon_side_kinds_are_read_in_the_driver_namespace_only() -> None:
    recorded: list[tuple[str, str]] = []

    class Recording(memory_cluster.InMemoryCluster):
        def list(self, kind: str, *, namespace: str = "",
                 label_selector: ports.LabelSelector | None = None) -> ports.ListResult:
            recorded.append((kind, namespace))
            return super().list(kind, namespace=namespace, label_selector=label_selector)

    with _running(Recording(), controller_metrics.ControllerMetrics()):
        scopes = dict(recorded)
    assert scopes[kinds.DAEMON_SET.kind] == "nvidia-dra-driver"
    assert scopes[kinds.COMPUTE_DOMAIN_CLIQUE.kind] == "nvidia-dra-driver"
    assert scopes[kinds.COMPUTE_DOMAIN.kind] == ""
    assert scopes[kinds.NODE.kind] == ""


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
