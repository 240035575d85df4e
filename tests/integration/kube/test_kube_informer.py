"""The informer cache on the embedded cluster: follows list + watch, indexes, relists.

Covers: the first list fills the cache and sets `synced`; watch events update it and call the
handlers with (old, new); a label selector keeps other objects out (their changes call no
handler); indexes follow changes; a
transform slims what is stored; a relist after 410 drops objects that vanished meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from adapters.kube import informer
from adapters.memory import cluster as memory_cluster


def _eventually(probe: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + 10
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _lease(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"holderIdentity": name}}


@pytest.fixture
def cluster() -> Iterator[memory_cluster.InMemoryCluster]:
    made = memory_cluster.InMemoryCluster(history_size=20)
    yield made
    made.close()


def test_the_cache_follows_list_and_watch_and_tells_handlers_old_and_new(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    cluster.create("Lease", _lease("a", team="x"))
    cluster.create("Lease", _lease("other", team="y"))
    seen: list[tuple[str | None, str | None]] = []

    def name(obj: Mapping[str, Any] | None) -> str | None:
        return None if obj is None else str(obj["spec"]["holderIdentity"])

    leases = informer.Informer(
        cluster, "Lease", namespace="ns", label_selector={"team": "x"}, watch_timeout_s=1,
        indexers={"holder": lambda o: (str(o["spec"]["holderIdentity"]),)},
    )
    leases.add_handler(lambda old, new: seen.append((name(old), name(new))))
    stop = threading.Event()
    leases.start(stop)
    try:
        assert leases.synced.wait(10)
        assert leases.object_keys() == (("ns", "a"),)
        cluster.create("Lease", _lease("b", team="x"))
        cluster.patch("Lease", namespace="ns", name="a", patch={"spec": {"holderIdentity": "z"}})
        cluster.delete("Lease", namespace="ns", name="b")
        _eventually(lambda: len(seen) == 4, what="four handler calls")
        assert seen == [(None, "a"), (None, "b"), ("a", "z"), ("b", None)]
        assert [o["metadata"]["name"] for o in leases.by_index("holder", "z")] == ["a"]
        assert leases.by_index("holder", "a") == ()
        assert leases.get("ns", "other") is None
    finally:
        stop.set()


def test_changes_of_objects_outside_the_selection_call_no_handler(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    cluster.create("Lease", _lease("other", team="y"))
    seen: list[tuple[object, object]] = []
    leases = informer.Informer(cluster, "Lease", namespace="ns", label_selector={"team": "x"},
                               watch_timeout_s=1)
    leases.add_handler(lambda old, new: seen.append((old, new)))
    stop = threading.Event()
    leases.start(stop)
    try:
        assert leases.synced.wait(10)
        # A MODIFIED event of a never-selected object reads as DELETED (it may have just left
        # the selection): with nothing cached under its key, no handler hears of it.
        cluster.patch("Lease", namespace="ns", name="other", patch={"spec": {"x": "1"}})
        cluster.create("Lease", _lease("sentinel", team="x"))
        _eventually(lambda: len(seen) >= 1, what="the sentinel's add")
        assert seen == [(None, leases.get("ns", "sentinel"))]
    finally:
        stop.set()


def test_a_relist_after_gone_drops_what_vanished_and_a_transform_slims(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    cluster.create("Lease", _lease("a"))
    cluster.create("Lease", _lease("b"))
    leases = informer.Informer(cluster, "Lease", namespace="ns", watch_timeout_s=1,
                               transform=lambda o: {"metadata": o["metadata"]})
    gone: list[str] = []
    leases.add_handler(lambda old, new: gone.append(old["metadata"]["name"])
                       if new is None and old is not None else None)
    stop = threading.Event()
    leases.start(stop)
    try:
        assert leases.synced.wait(10)
        assert "spec" not in (leases.get("ns", "a") or {})
        # Replayed from the list by `_replace`, not from the watch: the handler sees it go.
        leases._replace([cluster.get("Lease", namespace="ns", name="a")])
        assert gone == ["b"] and leases.object_keys() == (("ns", "a"),)
    finally:
        stop.set()


def test_a_failing_handler_does_not_stop_the_cache(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    leases = informer.Informer(cluster, "Lease", namespace="ns", watch_timeout_s=1)
    later: list[str] = []

    def broken(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        raise RuntimeError("handler bug")

    leases.add_handler(broken)
    leases.add_handler(lambda old, new: later.append(new["metadata"]["name"]) if new else None)
    stop = threading.Event()
    leases.start(stop)
    try:
        assert leases.synced.wait(10)
        cluster.create("Lease", _lease("a"))
        cluster.create("Lease", _lease("b"))
        _eventually(lambda: later == ["a", "b"], what="both events past the broken handler")
        assert leases.object_keys() == (("ns", "a"), ("ns", "b"))
    finally:
        stop.set()


def test_an_object_that_leaves_the_selection_is_reported_with_its_last_selected_state(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    # A Node whose computeDomain label is removed: the handler must still learn which domain
    # it served, which only its last selected state says.
    cluster.create("Lease", _lease("a", team="x"))
    seen: list[tuple[object, object]] = []
    leases = informer.Informer(cluster, "Lease", namespace="ns", label_selector={"team": None},
                               watch_timeout_s=1)
    leases.add_handler(lambda old, new: seen.append((old, new)))
    stop = threading.Event()
    leases.start(stop)
    try:
        assert leases.synced.wait(10)
        cluster.patch("Lease", namespace="ns", name="a",
                      patch={"metadata": {"labels": {"team": None}}})
        _eventually(lambda: len(seen) == 2, what="the leave to reach the handler")
        old, new = seen[-1]
        assert new is None
        assert isinstance(old, dict) and old["metadata"]["labels"] == {"team": "x"}
        assert leases.get("ns", "a") is None
    finally:
        stop.set()
