"""The plugin's ComputeDomain cache: watched, and read-through on a miss (no false misses)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.kubeletplugin import domains as plugin_domains
from core import kinds, names, ports


class CountingCluster(memory_cluster.InMemoryCluster):
    """The in-memory cluster, counting ComputeDomain list calls."""

    def __init__(self) -> None:
        super().__init__()
        self.cd_lists = 0

    def list(
        self, kind: str, *, namespace: str = "", label_selector: Mapping[str, str] | None = None
    ) -> ports.ListResult:
        if kind == kinds.COMPUTE_DOMAIN.kind:
            self.cd_lists += 1
        return super().list(kind, namespace=namespace, label_selector=label_selector)


def _cd(cluster: CountingCluster, name: str) -> names.ComputeDomainUID:
    created: Mapping[str, Any] = cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })
    return names.ComputeDomainUID(created["metadata"]["uid"])


@pytest.fixture
def cluster() -> Iterator[CountingCluster]:
    made = CountingCluster()
    yield made
    made.close()


def _eventually(predicate: Any) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_cache_follows_creates_and_deletes_without_listing_per_lookup(
    cluster: CountingCluster,
) -> None:
    stop = threading.Event()
    cache = plugin_domains.DomainCache(cluster)
    cache.start(stop)
    try:
        assert cache.wait_synced(10)
        uid = _cd(cluster, "a")
        assert _eventually(lambda: uid in cache.snapshot())
        lists_before = cluster.cd_lists
        for _ in range(20):
            assert cache.view()[uid].meta.name == "a"
        assert cluster.cd_lists == lists_before  # served from the cache
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace="team", name="a")
        assert _eventually(lambda: uid not in cache.snapshot())
    finally:
        stop.set()


def test_a_miss_reads_through_once(cluster: CountingCluster) -> None:
    cache = plugin_domains.DomainCache(cluster)  # never started: every lookup misses
    uid = _cd(cluster, "fresh")
    view = cache.view()
    assert view.get(uid) is not None and cluster.cd_lists == 1
    assert view.get(names.ComputeDomainUID("nope")) is None
    assert cluster.cd_lists == 1  # one refresh per view, not one per miss
