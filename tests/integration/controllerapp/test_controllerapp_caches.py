"""The controller's caches and its own writes: a late answer never brings back a deleted object.

The answer to a write may reach the controller after the watch event of a later deletion (the
informer and the worker are different threads). Pinned: such an answer is ignored, and so is the
answer to removing the last finalizer (the object is gone), while an answer newer than the cache
is used until the cache catches up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.controller import caches as controller_caches
from core import decoding, kinds, models, names
from core.computedomain import modes, objects

NS = "ml"
RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind


def _eventually(probe: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + 10
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def setup() -> Iterator[tuple[memory_cluster.InMemoryCluster, controller_caches.ControllerCaches,
                              models.ComputeDomain, dict[str, Any]]]:
    config = modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
        namespace="nvidia-dra-driver",
    ).config
    cluster = memory_cluster.InMemoryCluster()
    raw = dict(cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd", "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
    }))
    cd = decoding.compute_domain_from_k8s(raw)
    caches = controller_caches.ControllerCaches(cluster, config=config, watch_timeout_s=1)
    stop = threading.Event()
    caches.start(stop)
    assert caches.wait_synced(stop)
    yield cluster, caches, cd, raw
    stop.set()
    cluster.close()


def _rct_seen(caches: controller_caches.ControllerCaches, cd: models.ComputeDomain,
              raw: dict[str, Any]) -> bool:
    return caches.observe(cd, raw).workload_rct is not None


def test_an_answer_arriving_after_the_deletion_event_is_ignored(setup: Any) -> None:
    cluster, caches, cd, raw = setup
    config = caches._config
    created = cluster.create(RCT, objects.workload_rct(cd, config=config))
    _eventually(lambda: caches.workload_rcts.get(NS, "cd-channel") is not None, what="cached")
    cluster.patch(RCT, namespace=NS, name="cd-channel",
                  patch={"metadata": {"finalizers": None}})
    cluster.delete(RCT, namespace=NS, name="cd-channel")
    _eventually(lambda: caches.workload_rcts.get(NS, "cd-channel") is None, what="gone")

    caches.remember(RCT, created)  # the late answer of an earlier write

    assert not _rct_seen(caches, cd, raw)


def test_the_answer_to_removing_the_last_finalizer_is_not_kept(setup: Any) -> None:
    _, caches, cd, raw = setup
    answer = dict(objects.workload_rct(cd, config=caches._config))
    answer["metadata"] = {**answer["metadata"], "finalizers": [], "resourceVersion": "999999",
                          "deletionTimestamp": "2026-01-01T00:00:00Z"}

    caches.remember(RCT, answer)

    assert not _rct_seen(caches, cd, raw)


def test_our_own_create_is_seen_before_the_cache_has_it(setup: Any) -> None:
    _, caches, cd, raw = setup
    answer = dict(objects.workload_rct(cd, config=caches._config))
    answer["metadata"] = {**answer["metadata"], "resourceVersion": "999999"}

    caches.remember(RCT, answer)

    assert _rct_seen(caches, cd, raw)
