"""The controller under leader election on the embedded cluster: renewal, loss, prompt stop."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from adapters.kube import leader
from adapters.memory import cluster as memory_cluster
from apps.controller import __main__ as controller_main
from apps.controller import reconciler as controller_reconciler
from apps.controller import running as controller_running
from apps.controller import writes as controller_writes
from core import errors, kinds, models, names
from core.computedomain import modes

NAMESPACE = "nvidia-dra-driver"
LEASE = "compute-domain-controller"


def _host_config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
        namespace=NAMESPACE,
    ).config


def _cd(name: str) -> dict[str, object]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def _eventually(probe: Callable[[], bool], *, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _ready(cluster: memory_cluster.InMemoryCluster, name: str) -> bool:
    cd = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name=name)
    return (cd.get("status") or {}).get("status") == "Ready"


def _renew_time(cluster: memory_cluster.InMemoryCluster) -> str:
    lease = cluster.get(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE)
    return str(lease["spec"]["renewTime"])


def _start(
    cluster: memory_cluster.InMemoryCluster, stop: threading.Event, *, elect: bool = True,
    terms: list[controller_running.Controller] | None = None,
) -> tuple[threading.Thread, list[int]]:
    elector = None
    if elect:
        elector = leader.LeaderElector(
            cluster=cluster, namespace=NAMESPACE, name=LEASE, identity="replica-a",
            lease_duration_s=1.5, renew_deadline_s=1.0, retry_period_s=0.1,
        )
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_host_config())
    result: list[int] = []

    def main() -> None:
        result.append(
            controller_main.run_controller(
                cluster, reconciler=reconciler, stop=stop, resync_s=60, elector=elector,
                on_controller=terms.append if terms is not None else None,
            )
        )

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread, result


def test_the_leader_keeps_renewing_its_lease_while_it_reconciles() -> None:
    cluster = memory_cluster.InMemoryCluster()
    stop = threading.Event()
    thread, result = _start(cluster, stop)
    try:
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("a"))
        _eventually(lambda: _ready(cluster, "a"), what="CD a Ready")
        first = _renew_time(cluster)
        # A renewal needs the elector's thread, which the reconcile loop must not occupy.
        _eventually(lambda: _renew_time(cluster) != first, what="a lease renewal", timeout_s=3)
    finally:
        stop.set()
        thread.join(timeout=10)
        cluster.close()
    assert result == [0]


def test_losing_the_lease_stops_reconciling_and_exits_non_zero() -> None:
    cluster = memory_cluster.InMemoryCluster()
    stop = threading.Event()
    terms: list[controller_running.Controller] = []
    thread, result = _start(cluster, stop, terms=terms)
    try:
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("a"))
        _eventually(lambda: _ready(cluster, "a"), what="CD a Ready")
        cluster.patch(
            kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE,
            patch={"spec": {"holderIdentity": "replica-b", "leaseDurationSeconds": 60}},
        )
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert result == [1]
        [term] = terms
        assert term.stopped.wait(10), "the lost term's workers did not finish"
        workers = [t for t in threading.enumerate() if t.name.startswith("controller-worker")]
        # No worker is left to take a key: a replica that lost the lease cannot reconcile.
        assert workers == [], "a replica that lost the lease still has reconcile workers"
    finally:
        stop.set()
        thread.join(timeout=10)
        cluster.close()


@pytest.mark.parametrize("elect", [False, True], ids=["single", "leader-elected"])
def test_stop_ends_the_controller_promptly_despite_a_long_resync(elect: bool) -> None:
    cluster = memory_cluster.InMemoryCluster()
    stop = threading.Event()
    thread, result = _start(cluster, stop, elect=elect)
    try:
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("a"))
        _eventually(lambda: _ready(cluster, "a"), what="CD a Ready")
        started = time.monotonic()
        stop.set()
        thread.join(timeout=20)
        assert time.monotonic() - started < 3.0, "stop waited for the 60 s resync"
        assert result == [0]
    finally:
        stop.set()
        cluster.close()


def _readyz(server: object) -> int:
    port = server.server_address[1]  # type: ignore[attr-defined]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_readyz_answers_200_only_while_synced_and_leading() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create(kinds.LEASE.kind, {
        "apiVersion": kinds.LEASE.api_version, "kind": kinds.LEASE.kind,
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "replica-b", "leaseDurationSeconds": 60},
    })
    elector = leader.LeaderElector(
        cluster=cluster, namespace=NAMESPACE, name=LEASE, identity="replica-a",
        lease_duration_s=1.5, renew_deadline_s=1.0, retry_period_s=0.1,
    )
    terms: list[controller_running.Controller] = []
    server = controller_main.serve_health(
        0, ready=controller_main.readiness(terms=terms, elector=elector))
    stop = threading.Event()
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_host_config())
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(controller_main.run_controller(
        cluster, reconciler=reconciler, stop=stop, resync_s=60, elector=elector,
        on_controller=terms.append)), daemon=True)
    thread.start()
    try:
        _eventually(lambda: elector.observed_holder == "replica-b", what="the candidate to "
                    "see another holder")
        assert _readyz(server) == 503, "a replica that does not lead must not be ready"
        cluster.patch(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE,
                      patch={"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})
        _eventually(lambda: _readyz(server) == 200, what="ready once leading and synced")
        assert terms and terms[-1].synced.is_set()
        cluster.patch(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE,
                      patch={"spec": {"holderIdentity": "replica-b",
                                      "leaseDurationSeconds": 60}})
        thread.join(timeout=10)
        assert result == [1]
        assert _readyz(server) == 503
    finally:
        stop.set()
        thread.join(timeout=10)
        server.shutdown()
        cluster.close()


def test_readyz_waits_for_the_caches_without_leader_election() -> None:
    terms: list[controller_running.Controller] = []
    ready = controller_main.readiness(terms=terms, elector=None)
    assert not ready(), "no term started yet"
    cluster = memory_cluster.InMemoryCluster()
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_host_config())
    terms.append(controller_running.Controller(reconciler, workers=1))
    assert not ready(), "caches not synced yet"
    stop = threading.Event()
    thread = threading.Thread(target=terms[0].run, args=(stop,), daemon=True)
    thread.start()
    try:
        _eventually(ready, what="ready once the caches synced")
    finally:
        stop.set()
        thread.join(timeout=10)
        cluster.close()
    assert not ready(), "a stopped term is not ready"


def test_a_worker_whose_term_is_over_writes_nothing() -> None:
    cluster = memory_cluster.InMemoryCluster()
    leading = [True]
    writer = controller_writes.WriteReporting(
        cluster, on_written=lambda *_: None, on_exists=lambda *_: None,
        may_write=lambda: leading[0],
    )
    writer.create(kinds.COMPUTE_DOMAIN.kind, _cd("before"))
    leading[0] = False  # the renew deadline passed while this worker was mid-key
    with pytest.raises(errors.ConflictError, match="leadership term is over"):
        writer.create(kinds.COMPUTE_DOMAIN.kind, _cd("after"))
    with pytest.raises(errors.ConflictError):
        writer.patch(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="before",
                     subresource="status", patch={"status": {"channelID": 7}})
    with pytest.raises(errors.NotFoundError):
        cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="after")
    assert "status" not in cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="before")
    cluster.close()
