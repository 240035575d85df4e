"""Conflict retries, backoff bounds and the generic list-then-watch informer loop."""

from __future__ import annotations

import itertools
import threading

import kube_fake_cluster
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.kube import retrying
from core import errors, ports


def test_fake_implements_the_cluster_port() -> None:
    port: ports.Cluster = kube_fake_cluster.FakeCluster()
    assert port is not None


def test_retry_on_conflict_retries_until_success() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise errors.ConflictError("stale")
        return "ok"

    assert retrying.retry_on_conflict(fn, sleep=sleeps.append) == "ok"
    assert len(calls) == 3
    assert len(sleeps) == 2


def test_retry_on_conflict_gives_up_with_the_conflict() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise errors.ConflictError("stale")

    with pytest.raises(errors.ConflictError):
        retrying.retry_on_conflict(fn, attempts=4, sleep=lambda _: None)
    assert len(calls) == 4


def test_retry_on_conflict_does_not_retry_other_errors() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise errors.NotFoundError("gone")

    with pytest.raises(errors.NotFoundError):
        retrying.retry_on_conflict(fn, sleep=lambda _: None)
    assert len(calls) == 1


def test_retry_on_conflict_rereads_through_the_fake_cluster() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.create("Lease", {"metadata": {"name": "l", "namespace": "ns"}, "spec": {"n": 0}})
    # Someone else bumps the object after our first read.
    stale = cluster.get("Lease", namespace="ns", name="l")
    cluster.patch("Lease", namespace="ns", name="l", patch={"spec": {"n": 5}})
    reads = iter([stale])

    def increment() -> None:
        obj = next(reads, None) or cluster.get("Lease", namespace="ns", name="l")
        cluster.patch(
            "Lease",
            namespace="ns",
            name="l",
            patch={"spec": {"n": obj["spec"]["n"] + 1}},
            resource_version=obj["metadata"]["resourceVersion"],
        )

    retrying.retry_on_conflict(increment, sleep=lambda _: None)
    assert cluster.get("Lease", namespace="ns", name="l")["spec"]["n"] == 6


@given(attempt=st.integers(min_value=1, max_value=200))
def test_bounded_backoff_never_exceeds_cap(attempt: int) -> None:
    wait = retrying.bounded_backoff(initial_s=0.5, max_s=30.0)
    delay = retrying.backoff_delay(wait, attempt=attempt)
    assert 0.0 <= delay <= 30.0


def test_bounded_backoff_grows_roughly_exponentially() -> None:
    wait = retrying.bounded_backoff(initial_s=1.0, max_s=1000.0)
    early = max(retrying.backoff_delay(wait, attempt=1) for _ in range(200))
    late = max(retrying.backoff_delay(wait, attempt=6) for _ in range(200))
    assert early <= 2.0
    assert late > 8.0


def _take(events: object, n: int) -> list[retrying.InformerEvent]:
    return list(itertools.islice(events, n))  # type: ignore[call-overload]


def _names(events: list[retrying.InformerEvent]) -> list[str]:
    out = []
    for event in events:
        if isinstance(event, retrying.Relist):
            out.append(f"relist@{event.resource_version}")
        else:
            out.append(f"{event.type.value}:{event.obj['metadata']['name']}")
    return out


def test_informer_lists_then_watches_from_list_resource_version() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.create("Lease", {"metadata": {"name": "a", "namespace": "ns"}})
    cluster.watch_script = [[kube_fake_cluster.added("b", "205")]]
    events = _take(retrying.list_then_watch(cluster, "Lease", sleep=lambda _: None), 3)
    assert _names(events) == ["relist@101", "ADDED:a", "ADDED:b"]
    assert cluster.calls[-1] == "watch Lease from=101"


def test_informer_resumes_from_last_seen_resource_version_after_timeout() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.watch_script = [[kube_fake_cluster.added("b", "205")], [], []]
    events = retrying.list_then_watch(cluster, "Lease", sleep=lambda _: None)
    _take(events, 2)
    cluster.watch_script.append([kube_fake_cluster.added("c", "300")])
    assert _names(_take(events, 1)) == ["ADDED:c"]
    watches = [c for c in cluster.calls if c.startswith("watch")]
    assert watches == [
        "watch Lease from=100",
        "watch Lease from=205",
        "watch Lease from=205",
        "watch Lease from=205",
    ]


def test_a_bookmark_moves_the_resume_point_and_is_not_passed_on() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    bookmark = ports.WatchEvent(type=ports.WatchEventType.BOOKMARK,
                                obj={"metadata": {"resourceVersion": "900"}})
    cluster.watch_script = [[kube_fake_cluster.added("b", "205"), bookmark], []]
    events = retrying.list_then_watch(cluster, "Lease", sleep=lambda _: None)
    _take(events, 2)
    cluster.watch_script.append([kube_fake_cluster.added("c", "950")])
    assert _names(_take(events, 1)) == ["ADDED:c"]
    watches = [c for c in cluster.calls if c.startswith("watch")]
    assert watches == ["watch Lease from=100", "watch Lease from=900", "watch Lease from=900"]


def test_informer_relists_on_gone() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.watch_script = [errors.GoneError("expired")]
    events = retrying.list_then_watch(cluster, "Lease", sleep=lambda _: None)
    assert _names(_take(events, 1)) == ["relist@100"]
    cluster.create("Lease", {"metadata": {"name": "late", "namespace": "ns"}})
    assert _names(_take(events, 2)) == ["relist@101", "ADDED:late"]


def test_informer_backs_off_and_reconnects_on_other_errors() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.list_errors = [errors.ClusterError("apiserver down")]
    cluster.watch_script = [
        errors.ClusterError("connection reset"),
        errors.ClusterError("connection reset"),
        [kube_fake_cluster.added("x", "150")],
    ]
    sleeps: list[float] = []
    events = retrying.list_then_watch(
        cluster, "Lease", sleep=sleeps.append, wait=retrying.bounded_backoff(max_s=5.0)
    )
    assert _names(_take(events, 2)) == ["relist@100", "ADDED:x"]
    assert len(sleeps) == 3
    assert all(0 <= s <= 5.0 for s in sleeps)


def test_informer_sends_its_label_selector_with_the_list_and_the_watch() -> None:
    # The server filters (see the Cluster contract): foreign objects never cross the wire.
    cluster = kube_fake_cluster.FakeCluster()
    mine = ports.WatchEvent(
        type=ports.WatchEventType.ADDED,
        obj={"metadata": {"name": "mine", "resourceVersion": "202", "labels": {"t": "yes"}}},
    )
    cluster.watch_script = [[mine]]
    events = retrying.list_then_watch(
        cluster, "Lease", label_selector={"t": "yes", "owner": None}, sleep=lambda _: None
    )
    assert _names(_take(events, 2)) == ["relist@100", "ADDED:mine"]
    assert cluster.selectors == [("list", {"t": "yes", "owner": None}),
                                 ("watch", {"t": "yes", "owner": None})]


def test_informer_stops_when_stop_is_set() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    stop = threading.Event()
    cluster.watch_script = [
        [kube_fake_cluster.added("a", "101"), kube_fake_cluster.added("b", "102")]
    ]
    events = retrying.list_then_watch(cluster, "Lease", stop=stop, sleep=lambda _: None)
    assert _names(_take(events, 2)) == ["relist@100", "ADDED:a"]
    stop.set()
    assert list(events) == []


def test_an_object_that_leaves_the_label_selection_comes_as_the_servers_deleted() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    left = ports.WatchEvent(
        type=ports.WatchEventType.DELETED,
        obj={"metadata": {"name": "mine", "resourceVersion": "203", "labels": {"t": "no"}}},
    )
    cluster.watch_script = [[left]]
    events = retrying.list_then_watch(
        cluster, "Lease", label_selector={"t": "yes"}, sleep=lambda _: None
    )
    assert _names(_take(events, 2)) == ["relist@100", "DELETED:mine"]
