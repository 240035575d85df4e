"""Daemons writing their entries at the same moment lose nothing (upstream bug #1050).

Many registries (one per simulated node) write into one ComputeDomainClique, or one
ComputeDomain's status, at once on the embedded cluster. Every writer's first read is held until
all writers have read the same version, so each write races every other (what a naive
read-modify-write loses; plus injected conflicts): every entry lands, indexes are unique, and a
leave at the same time as joins removes only the leaver.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.daemon import registry as daemon_registry
from core import kinds, models, names
from core.computedomain import membership

NS = "nvidia-dra-driver"


class ReadTogetherCluster(memory_cluster.InMemoryCluster):
    """Once armed, holds each thread's first read until every writer has read."""

    def __init__(self) -> None:
        super().__init__()
        self._barrier: threading.Barrier | None = None
        self._local = threading.local()

    def arm(self, writers: int) -> None:
        self._barrier = threading.Barrier(writers)

    def disarm(self) -> None:
        self._barrier = None

    def get(self, kind: str, *, namespace: str, name: str) -> Any:
        obj = super().get(kind, namespace=namespace, name=name)
        if self._barrier is not None and not getattr(self._local, "held", False):
            self._local.held = True
            self._barrier.wait(timeout=30)
        return obj


def _cd(cluster: memory_cluster.InMemoryCluster) -> str:
    created = cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd", "namespace": "team"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "ch"}}},
    })
    return str(created["metadata"]["uid"])


def _clique(cluster: memory_cluster.InMemoryCluster, cd_uid: str) -> None:
    """The clique object, empty, as the first daemon of a clique creates it."""
    cluster.create(kinds.COMPUTE_DOMAIN_CLIQUE.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {"name": membership.clique_object_name(cd_uid, "c.1"), "namespace": NS},
        "daemons": [],
    })


def _registry(cluster: memory_cluster.InMemoryCluster, cd_uid: str, node: int,
              store: membership.Store) -> daemon_registry.PeerRegistry:
    return daemon_registry.PeerRegistry(
        cluster, store=store,
        me=membership.Identity(node_name=f"n{node:02d}", ip_address=f"10.0.0.{node}",
                               clique_id="c.1"),
        domain_uid=cd_uid, domain_name="cd", domain_namespace="team", namespace=NS,
        max_nodes=18,
    )


def _together(actions: list[object]) -> None:
    barrier = threading.Barrier(len(actions))
    failures: list[BaseException] = []

    def run(action: object) -> None:
        barrier.wait()
        try:
            action()  # type: ignore[operator]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert failures == []


def _peers(cluster: memory_cluster.InMemoryCluster, cd_uid: str,
           store: membership.Store) -> tuple[membership.Peer, ...]:
    if store is membership.Store.CLIQUE:
        obj = cluster.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=NS,
                          name=membership.clique_object_name(cd_uid, "c.1"))
    else:
        obj = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="team", name="cd")
    return membership.peers_of(membership.entries_of(obj, store=store), store=store)


@pytest.mark.parametrize("store", list(membership.Store))
def test_simultaneous_joins_all_land_with_unique_indexes(store: membership.Store) -> None:
    cluster = ReadTogetherCluster()
    cd_uid = _cd(cluster)
    registries = [_registry(cluster, cd_uid, i, store) for i in range(12)]
    _clique(cluster, cd_uid)
    cluster.arm(12)
    cluster.set_conflict_injection(5)
    _together([lambda r=r: r.upsert(models.DomainStatus.NOT_READY) for r in registries])
    cluster.disarm()
    peers = _peers(cluster, cd_uid, store)
    assert sorted(p.node_name for p in peers) == [f"n{i:02d}" for i in range(12)]
    assert sorted(p.index for p in peers) == list(range(12))


@pytest.mark.parametrize("store", list(membership.Store))
def test_a_leave_racing_joins_and_status_flips_removes_only_the_leaver(
    store: membership.Store,
) -> None:
    cluster = ReadTogetherCluster()
    cd_uid = _cd(cluster)
    registries = [_registry(cluster, cd_uid, i, store) for i in range(8)]
    for r in registries[:4]:
        r.upsert(models.DomainStatus.NOT_READY)
    before = {p.node_name: p.index for p in _peers(cluster, cd_uid, store)}
    cluster.arm(8)
    _together([
        registries[0].remove,
        *(lambda r=r: r.upsert(models.DomainStatus.READY) for r in registries[1:4]),
        *(lambda r=r: r.upsert(models.DomainStatus.NOT_READY) for r in registries[4:]),
    ])
    cluster.disarm()
    after = {p.node_name: p for p in _peers(cluster, cd_uid, store)}
    assert sorted(after) == [f"n{i:02d}" for i in range(1, 8)]
    assert all(after[n].index == before[n] for n in ("n01", "n02", "n03"))  # stable
    assert all(after[n].status is models.DomainStatus.READY for n in ("n01", "n02", "n03"))
    assert len({p.index for p in after.values()}) == 7
