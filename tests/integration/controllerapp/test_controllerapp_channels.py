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
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
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
    # As Kubernetes' resourceclaim controller: the template's spec.metadata labels come along.
    labels = dict((rct["spec"].get("metadata") or {}).get("labels") or {})
    cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": rct["spec"]["spec"],
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


def _order(cluster: memory_cluster.InMemoryCluster, name: str) -> tuple[str, str]:
    meta = _get(cluster, name)["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["uid"]))


def _rct_channel(cluster: memory_cluster.InMemoryCluster, name: str) -> int | None:
    try:
        rct = cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NS, name=f"{name}-ch")
    except Exception:
        return None
    return channels.rct_channel_from_k8s(rct)


def _duplicate_events(cluster: memory_cluster.InMemoryCluster) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for event in cluster.list(kinds.EVENT.kind).items:
        if event.get("reason") == channels.DUPLICATE_REASON:
            found.setdefault(event["involvedObject"]["name"], []).append(event["message"])
    return found


def _as_two_controllers_left_them(cluster: memory_cluster.InMemoryCluster, *names_: str,
                                  channel: int) -> None:
    """Both CDs name `channel` in their status, and each has an RCT carrying it."""
    with _controller(cluster):
        wait_until(lambda: _ready(cluster, *names_), what="both Ready", timeout_s=30)
    for name in names_:
        cluster.delete(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NS, name=f"{name}-ch")
        cluster.patch(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NS, name=f"{name}-ch",
                      patch={"metadata": {"finalizers": None}})
        cluster.patch(CD, namespace=NS, name=name, subresource="status",
                      patch={"status": {"channelID": channel}})


def test_two_domains_left_on_one_channel_are_told_apart_before_any_claim_uses_it() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _create(cluster, "a")
    _create(cluster, "b")
    _as_two_controllers_left_them(cluster, "a", "b", channel=1)
    first, later = sorted(("a", "b"), key=lambda n: _order(cluster, n))
    with _controller(cluster):
        wait_until(lambda: _channel(cluster, later) not in (None, 1)
                   and _rct_channel(cluster, later) == _channel(cluster, later)
                   and _ready(cluster, later),
                   what="the later one on a channel of its own, with a template carrying it",
                   timeout_s=30)
        assert _channel(cluster, first) == 1 == _rct_channel(cluster, first)
        events = _duplicate_events(cluster)
        assert set(events) == {"a", "b"}, "the duplicate is reported on both"
    cluster.close()


def test_a_later_duplicate_whose_claims_use_the_channel_keeps_it_but_is_marked() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _create(cluster, "a")
    _create(cluster, "b")
    _as_two_controllers_left_them(cluster, "a", "b", channel=1)
    first, later = sorted(("a", "b"), key=lambda n: _order(cluster, n))
    later_uid = str(_get(cluster, later)["metadata"]["uid"])
    cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        # The labels Kubernetes copies from the template (spec.metadata.labels).
        "metadata": {"name": "used", "namespace": NS, "labels": {
            names.COMPUTE_DOMAIN_LABEL: later_uid,
            names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_WORKLOAD}},
        "spec": {"devices": {"requests": [], "config": [{"opaque": {
            "driver": names.DRIVER_NAME, "parameters": {
                "apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                "domainID": later_uid, "channelID": 1}}}]}},
    })

    def marked() -> bool:
        conditions = controlling.conditions_from_k8s(_get(cluster, later))
        return any(c.type == channels.UNIQUE_CONDITION and c.status == "False"
                   for c in conditions)

    with _controller(cluster):
        wait_until(marked, what="ChannelUnique=False on the later one", timeout_s=30)
        assert _channel(cluster, later) == 1 == _channel(cluster, first)
        assert set(_duplicate_events(cluster)) == {"a", "b"}
    cluster.close()


def test_two_controllers_at_once_never_leave_two_domains_on_one_channel() -> None:
    cluster = memory_cluster.InMemoryCluster()
    with _controller(cluster), _controller(cluster):
        for burst in range(5):
            batch = [f"burst{burst}-cd{i}" for i in range(40)]
            for name in batch:
                _create(cluster, name)

            def settled() -> bool:
                domains = cluster.list(CD, namespace=NS).items
                held = [channels.domain_channel_from_k8s(o).channel_id for o in domains]
                names_ = [o["metadata"]["name"] for o in domains]
                return (None not in held and len(set(held)) == len(held)
                        and _ready(cluster, *names_)
                        and all(_rct_channel(cluster, n) == _channel(cluster, n)
                                for n in names_))

            wait_until(settled, what=f"burst {burst}: every CD Ready on a channel of its own, "
                       "its template carrying it", timeout_s=60)
    cluster.close()


def test_a_domain_whose_channel_another_takes_over_is_reconciled_and_told_apart() -> None:
    """Only the ComputeDomain whose status changed gets an event; when it is the earlier one
    (it keeps the channel), the later holder must still be re-queued and re-assigned."""
    cluster = memory_cluster.InMemoryCluster()
    with _controller(cluster):
        _create(cluster, "a")
        _create(cluster, "b")
        wait_until(lambda: _ready(cluster, "a", "b"), what="both Ready", timeout_s=30)
        first, later = sorted(("a", "b"), key=lambda n: _order(cluster, n))
        taken = _channel(cluster, later)
        # A racing controller without the precondition names the later one's channel on the
        # earlier one: the earlier one keeps it, so the later one (no event of its own) moves.
        cluster.patch(CD, namespace=NS, name=first, subresource="status",
                      patch={"status": {"channelID": taken}})
        wait_until(lambda: _channel(cluster, later) not in (None, taken)
                   and _rct_channel(cluster, later) == _channel(cluster, later)
                   and _rct_channel(cluster, first) == taken
                   and _ready(cluster, first, later),
                   what="the later one re-assigned, both templates carrying their channel",
                   timeout_s=30)
        assert set(_duplicate_events(cluster)) == {"a", "b"}
    cluster.close()
