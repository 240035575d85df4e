"""The controller's reconcile loop on the embedded cluster: passes, invalid objects, restarts."""

from __future__ import annotations

import threading
import time

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from core import kinds, models, modes, names


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
