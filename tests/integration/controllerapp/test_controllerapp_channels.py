"""The production controller loop (informers, queue, 16 workers) under channel isolation.

On the embedded cluster: parallel workers never hand one channel to two ComputeDomains; a new
leader rebuilds the table from its caches; a deleted ComputeDomain's channel stays taken while
one of its claims exists, and a ComputeDomain waiting for a channel gets it once that claim is
deleted (the claim informer re-queues it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from adapters.memory import cluster as memory_cluster
from apps.cli.embedded import wait_until
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from core import kinds, models, names
from core.computedomain import channels, controlling, modes

NS = "team"
CD = kinds.COMPUTE_DOMAIN.kind


def _config(max_channels: int) -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEX=true",
        namespace="driver", max_channels=max_channels,
    ).config


@contextlib.contextmanager
def _controller(cluster: memory_cluster.InMemoryCluster, *, max_channels: int = 2048
                ) -> Iterator[running.Controller]:
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_config(max_channels))
    controller = running.Controller(reconciler, workers=16, resync_s=3600)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    assert controller.synced.wait(30)
    try:
        yield controller
    finally:
        stop.set()
        assert controller.stopped.wait(30)


def _create(cluster: memory_cluster.InMemoryCluster, name: str) -> None:
    cluster.create(CD, {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}}})


def _get(cluster: memory_cluster.InMemoryCluster, name: str) -> Mapping[str, Any]:
    return cluster.get(CD, namespace=NS, name=name)


def _ready(cluster: memory_cluster.InMemoryCluster, *names_: str) -> bool:
    return all((_get(cluster, n).get("status") or {}).get("status") == "Ready" for n in names_)


def _channel(cluster: memory_cluster.InMemoryCluster, name: str) -> int | None:
    return channels.domain_channel_from_k8s(_get(cluster, name)).channel_id


def _gone(cluster: memory_cluster.InMemoryCluster, name: str) -> bool:
    return not any(o["metadata"]["name"] == name for o in cluster.list(CD, namespace=NS).items)


def _claim_from_template(cluster: memory_cluster.InMemoryCluster, cd_name: str) -> str:
    rct = cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NS, name=f"{cd_name}-ch")
    name = f"{cd_name}-pod-claim"
    cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS}, "spec": rct["spec"]["spec"],
    })
    return name


def test_sixty_domains_created_at_once_get_sixty_different_channels() -> None:
    cluster = memory_cluster.InMemoryCluster()
    with _controller(cluster):
        domains = [f"cd-{i}" for i in range(60)]
        for name in domains:
            _create(cluster, name)
        wait_until(lambda: _ready(cluster, *domains), timeout_s=30, what="60 CDs Ready")
        assigned = sorted(c for c in (_channel(cluster, n) for n in domains) if c is not None)
    assert assigned == list(range(1, 61))


def test_a_new_leader_keeps_every_channel_and_gives_the_next_cd_the_lowest_free_one() -> None:
    cluster = memory_cluster.InMemoryCluster()
    with _controller(cluster):
        for name in ("a", "b", "c"):
            _create(cluster, name)
        wait_until(lambda: _ready(cluster, "a", "b", "c"), timeout_s=30, what="a, b, c Ready")
        before = {n: _channel(cluster, n) for n in ("a", "b", "c")}
        cluster.delete(CD, namespace=NS, name="b")
        wait_until(lambda: _gone(cluster, "b"), timeout_s=30, what="b gone")
    with _controller(cluster):  # a failover: nothing of the old term's memory survives
        _create(cluster, "d")
        wait_until(lambda: _ready(cluster, "d"), timeout_s=30, what="d Ready")
        after = {n: _channel(cluster, n) for n in ("a", "c", "d")}
    assert after == {"a": before["a"], "c": before["c"], "d": before["b"]}


def test_a_deleted_domains_channel_waits_for_its_last_claim_then_goes_to_a_waiting_domain(
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    with _controller(cluster, max_channels=2):  # one assignable channel
        _create(cluster, "old")
        wait_until(lambda: _ready(cluster, "old"), timeout_s=30, what="old Ready")
        claim = _claim_from_template(cluster, "old")
        cluster.delete(CD, namespace=NS, name="old")
        wait_until(lambda: _gone(cluster, "old"), timeout_s=30, what="old gone")
        _create(cluster, "new")

        def refused() -> bool:
            return any(c.type == controlling.CHANNEL_ASSIGNED_CONDITION and c.status == "False"
                       for c in controlling.conditions_from_k8s(_get(cluster, "new")))

        wait_until(refused, timeout_s=30, what="new to report exhaustion")
        assert _channel(cluster, "new") is None, "channel 1 is still held by old's claim"
        cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NS, name=claim)
        wait_until(lambda: _ready(cluster, "new"), timeout_s=30, what="new Ready")
        assert _channel(cluster, "new") == 1
        assert not refused()
