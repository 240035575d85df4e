"""Lease-based leader election between candidates sharing one cluster and one fake clock."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Mapping
from typing import Any

import kube_fake_cluster
import pytest

from adapters.kube import leader
from core import errors

NS = "nvidia-dra-driver"
LEASE = "compute-domain-controller"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
            seconds=self.now
        )


def _elector(cluster: Any, clock: Clock, identity: str, **kwargs: Any) -> leader.LeaderElector:
    return leader.LeaderElector(
        cluster=cluster,
        namespace=NS,
        name=LEASE,
        identity=identity,
        clock=clock,
        wall_clock=clock.wall,
        **kwargs,
    )


def _spec(cluster: kube_fake_cluster.FakeCluster) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = cluster.get("Lease", namespace=NS, name=LEASE)["spec"]
    return spec


def test_first_candidate_creates_the_lease_and_leads() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a = _elector(cluster, clock, "a")
    assert a.try_acquire_or_renew()
    assert a.is_leader
    spec = _spec(cluster)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2025-01-01T00:16:40.000000Z"


def test_only_one_of_two_candidates_leads() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.now += 5
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert _spec(cluster)["holderIdentity"] == "a"


def test_renewal_keeps_acquire_time_and_moves_renew_time() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a = _elector(cluster, clock, "a")
    a.try_acquire_or_renew()
    first = dict(_spec(cluster))
    clock.now += 2.5
    assert a.try_acquire_or_renew()
    spec = _spec(cluster)
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["renewTime"] == "2025-01-01T00:16:42.500000Z"
    assert spec["leaseTransitions"] == 0


def test_other_candidate_takes_over_after_leader_stops_renewing() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees the record now
    clock.now += 14.9
    assert not b.try_acquire_or_renew(), "lease not yet expired from b's point of view"
    clock.now += 0.2
    assert b.try_acquire_or_renew()
    spec = _spec(cluster)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    # The old leader comes back: the record changed, so it must wait a full duration.
    assert not a.try_acquire_or_renew()
    assert not a.is_leader
    assert a.observed_holder == "b"


def test_expiry_is_judged_from_when_the_record_was_seen_not_its_timestamps() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a = _elector(cluster, clock, "a")
    a.try_acquire_or_renew()
    clock.now += 3600  # a has been dead for an hour
    b = _elector(cluster, clock, "b")
    assert not b.try_acquire_or_renew(), "a fresh candidate waits one lease duration"
    clock.now += 15
    assert b.try_acquire_or_renew()


def test_conflict_on_concurrent_acquire_loses_without_error() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.now += 16
    # c reads the expired lease and patches it first; b's write carries a stale resourceVersion.
    original_get = cluster.get

    def get_then_race(kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        seen = original_get(kind, namespace=namespace, name=name)
        cluster.patch(kind, namespace=namespace, name=name, patch={"spec": {"holderIdentity": "c"}})
        return seen

    cluster.get = get_then_race  # type: ignore[method-assign]
    assert not b.try_acquire_or_renew()
    cluster.get = original_get  # type: ignore[method-assign]
    assert _spec(cluster)["holderIdentity"] == "c"
    assert not b.is_leader


def test_concurrent_create_loses_to_already_exists() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    original_get = cluster.get

    def not_found_then_a_creates(kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        cluster.get = original_get  # type: ignore[method-assign]
        assert a.try_acquire_or_renew()
        raise errors.NotFoundError("not yet")

    cluster.get = not_found_then_a_creates  # type: ignore[method-assign]
    assert not b.try_acquire_or_renew()
    assert _spec(cluster)["holderIdentity"] == "a"


def test_release_lets_a_successor_take_over_without_waiting_for_expiry() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a, b = _elector(cluster, clock, "a"), _elector(cluster, clock, "b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()
    assert _spec(cluster)["leaseTransitions"] == 1


def test_inconsistent_timings_are_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="lease duration"):
        _elector(kube_fake_cluster.FakeCluster(), Clock(), "a", lease_duration_s=5.0)


def test_run_leads_until_stopped_then_releases() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    elector = leader.LeaderElector(
        cluster=cluster,
        namespace=NS,
        name=LEASE,
        identity="a",
        # NB: a renewal must succeed within the deadline, however loaded the test machine.
        lease_duration_s=3.0,
        renew_deadline_s=2.0,
        retry_period_s=0.01,
    )
    stop = threading.Event()
    log: list[str] = []

    def started() -> None:
        log.append("started")

    thread = threading.Thread(
        target=elector.run, args=(started, lambda: log.append("stopped"), stop)
    )
    thread.start()
    try:
        for _ in range(500):
            if log:
                break
            stop.wait(0.01)
        renewals_before = cluster.rv
        for _ in range(500):
            if cluster.rv > renewals_before:
                break
            stop.wait(0.01)
        assert cluster.rv > renewals_before, "leader keeps renewing"
    finally:
        stop.set()
        thread.join(timeout=5)
    assert log == ["started", "stopped"]
    assert _spec(cluster)["holderIdentity"] == ""


def test_run_reports_loss_when_another_holder_takes_the_lease() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    elector = leader.LeaderElector(
        cluster=cluster,
        namespace=NS,
        name=LEASE,
        identity="a",
        lease_duration_s=1.0,
        renew_deadline_s=0.5,
        retry_period_s=0.01,
    )
    stop = threading.Event()
    log: list[str] = []

    def started() -> None:
        log.append("started")
        cluster.patch("Lease", namespace=NS, name=LEASE, patch={"spec": {"holderIdentity": "z"}})

    elector.run(started, lambda: log.append("stopped"), stop)
    assert log == ["started", "stopped"]
    assert not elector.is_leader
    assert _spec(cluster)["holderIdentity"] == "z"


class _StallingCluster(kube_fake_cluster.FakeCluster):
    """Lease reads and writes block while `stalled` is set, as on an API server whose answer
    never comes (a 60 s read timeout, retried)."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = threading.Event()
        self.released = threading.Event()

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        if kind == "Lease" and self.stalled.is_set():
            self.released.wait(30)
        return super().get(kind, namespace=namespace, name=name)


def test_a_renewal_that_never_answers_ends_leadership_at_the_renew_deadline() -> None:
    cluster = _StallingCluster()
    elector = leader.LeaderElector(
        cluster=cluster, namespace=NS, name=LEASE, identity="a",
        lease_duration_s=1.5, renew_deadline_s=1.0, retry_period_s=0.1,
    )
    stop = threading.Event()
    started, stopped = threading.Event(), threading.Event()
    thread = threading.Thread(target=elector.run, args=(started.set, stopped.set, stop),
                              daemon=True)
    thread.start()
    try:
        assert started.wait(5)
        cluster.stalled.set()
        stalled_at = time.monotonic()
        # Another candidate may take the lease 1.5 s after our last renewal: we must be done
        # before that, although the renewal call itself is still blocked.
        assert stopped.wait(5), "leadership outlived its renew deadline"
        assert time.monotonic() - stalled_at < 1.5
        assert not elector.is_leader
    finally:
        cluster.released.set()
        stop.set()
        thread.join(timeout=5)


def test_is_leader_turns_false_once_the_renew_deadline_passes_without_a_renewal() -> None:
    cluster, clock = kube_fake_cluster.FakeCluster(), Clock()
    a = _elector(cluster, clock, "a")
    assert a.try_acquire_or_renew()
    clock.now += 9.9
    assert a.is_leader
    clock.now += 0.2
    # Whoever asks (readiness, the write fence) gets "no" without waiting for the elector.
    assert not a.is_leader
