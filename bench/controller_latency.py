"""Controller bench: ComputeDomain created -> its ResourceClaimTemplate present, as in production.

The controller runs as `compute-domain-controller` does (informers, work queue, workers) on a
cluster a factory makes, so the same functions run on the embedded cluster here and on a real
kube-apiserver in the real-server tier. Arrival of each RCT is seen through a watch (an informer
of the bench's own), not by polling. Reported: p50/p99/n with 1 and with N live CDs, the same
with one CD the API server refuses for good (and the ratio of the others' p99 to without), and
the list calls the controller makes per 1,000 ComputeDomain events after its initial sync.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from adapters.kube import informer
from adapters.memory import cluster as memory_cluster
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from bench import stats
from core import errors, kinds, models, names, ports
from core.computedomain import modes

NAMESPACE = "bench-controller"
FAILING_RCT = "refused-channel"

# Makes a fresh cluster and returns it with its clean-up.
ClusterFactory = Callable[[], tuple[ports.Cluster, Callable[[], None]]]


def embedded_cluster() -> tuple[ports.Cluster, Callable[[], None]]:
    cluster = memory_cluster.InMemoryCluster()
    return cluster, cluster.close


def real_apiserver_cluster() -> tuple[ports.Cluster, Callable[[], None]]:
    """A fresh kube-apiserver + etcd with the chart's CRDs installed (admin credentials), from
    the real-server tier's harness; raises RuntimeError when `make kube-apiserver` has not
    built the binaries."""
    from bench import realkube_controller

    realkube_server, realkube_driver = realkube_controller.load_harness()
    kube = realkube_server.start_fresh(prefix="bench-controller-")
    if kube is None:
        raise RuntimeError(realkube_server.MISSING)
    workdir = kube.workdir
    kube.apply(realkube_driver.render_crds())
    kube.ensure_namespace(NAMESPACE)
    admin = kube.cluster(kube.admin_kubeconfig(), component="bench-controller")

    def close() -> None:
        admin.close()
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    return admin, close


def _config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEX=true",
        namespace="nvidia-dra-driver",
    ).config


def _cd(name: str, rct: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"numNodes": 0,
                 "channel": {"resourceClaimTemplate": {"name": rct or f"{name}-channel"}}},
    }


class _WebhookDown(errors.ClusterError):
    status = 500


class CountingCluster:
    """A Cluster port that counts list calls and refuses RCT creates of chosen names (as a
    failing admission webhook would), delegating everything else."""

    def __init__(self, inner: ports.Cluster, *, refused: frozenset[str] = frozenset()) -> None:
        self._inner = inner
        self._refused = refused
        self.lists = 0

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        return self._inner.get(kind, namespace=namespace, name=name)

    def list(self, kind: str, *, namespace: str = "",
             label_selector: ports.LabelSelector | None = None) -> ports.ListResult:
        self.lists += 1
        return self._inner.list(kind, namespace=namespace, label_selector=label_selector)

    def watch(self, kind: str, *, namespace: str = "", resource_version: str,
              timeout_s: float, label_selector: ports.LabelSelector | None = None,
              ) -> Iterator[ports.WatchEvent]:
        return self._inner.watch(kind, namespace=namespace, resource_version=resource_version,
                                 timeout_s=timeout_s, label_selector=label_selector)

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if kind == kinds.RESOURCE_CLAIM_TEMPLATE.kind and name in self._refused:
            raise _WebhookDown(f"POST resourceclaimtemplates/{name}: HTTP 500: webhook down")
        return self._inner.create(kind, obj)

    def patch(self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
              subresource: str = "", resource_version: str = "") -> Mapping[str, Any]:
        return self._inner.patch(kind, namespace=namespace, name=name, patch=patch,
                                 subresource=subresource, resource_version=resource_version)

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self._inner.delete(kind, namespace=namespace, name=name)

    def emit_event(self, *, involved: models.ObjectRef, reason: str, message: str,
                   warning: bool = True) -> None:
        self._inner.emit_event(involved=involved, reason=reason, message=message,
                               warning=warning)


class _Arrivals:
    """Times at which each RCT name first appeared, seen through a watch."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._seen: dict[str, float] = {}

    def on_change(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if new is None:
            return
        name = str((new.get("metadata") or {}).get("name") or "")
        with self._lock:
            self._seen.setdefault(name, time.perf_counter())
            self._lock.notify_all()

    def wait(self, name: str, *, timeout_s: float = 30.0) -> float:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while name not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"ResourceClaimTemplate {name} never appeared")
                self._lock.wait(left)
            return self._seen[name]

    def count(self) -> int:
        with self._lock:
            return len(self._seen)


@contextlib.contextmanager
def _running(cluster: ports.Cluster, *, workers: int) -> Iterator[running.Controller]:
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_config())
    controller = running.Controller(reconciler, workers=workers, resync_s=3600)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    if not controller.synced.wait(120):
        raise TimeoutError("the controller's informers never synced")
    try:
        yield controller
    finally:
        stop.set()
        controller.stopped.wait(30)


def cd_to_rct(
    factory: ClusterFactory, *, live: int, runs: int, failing: bool = False, workers: int = 4
) -> dict[str, Any]:
    """Start with `live` settled CDs (plus one the API server refuses, if `failing`), then
    create `runs` CDs one at a time and time each until its RCT is seen."""
    base, close = factory()
    cluster = CountingCluster(base, refused=frozenset({FAILING_RCT}) if failing else frozenset())
    arrivals = _Arrivals()
    rcts = informer.Informer(base, kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE)
    rcts.add_handler(arrivals.on_change)
    stop_watch = threading.Event()
    try:
        rcts.start(stop_watch)
        rcts.synced.wait(60)
        for i in range(live):
            base.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"live-{i}"))
        if failing:
            base.create(kinds.COMPUTE_DOMAIN.kind, _cd("refused", rct=FAILING_RCT))
        with _running(cluster, workers=workers) as controller:
            for i in range(live):
                arrivals.wait(f"live-{i}-channel", timeout_s=300)
            lists_after_sync = cluster.lists
            domain_events = _count_events(controller)
            samples = []
            # NB: the settled CDs go to the permanent generation, so a full collection over
            # thousands of them does not land on random samples of either scenario.
            gc.collect()
            gc.freeze()
            try:
                for i in range(runs):
                    started = time.perf_counter()
                    base.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"probe-{i}"))
                    samples.append(arrivals.wait(f"probe-{i}-channel") - started)
            finally:
                gc.unfreeze()
            lists = cluster.lists - lists_after_sync
            events = domain_events()
        return {
            **stats.summarize(samples),
            "samples_s": samples,
            "live_cds": live,
            "one_cd_failing": failing,
            "list_calls_after_sync": lists,
            "cd_events_after_sync": events,
            "list_calls_per_1000_cd_events": round(1000 * lists / max(1, events), 3),
        }
    finally:
        stop_watch.set()
        close()


def _count_events(controller: running.Controller) -> Callable[[], int]:
    """Counts ComputeDomain events the controller's informer handles from now on."""
    seen = [0]

    def count(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        seen[0] += 1

    controller.caches.domains.add_handler(count)
    return lambda: seen[0]


def controller_bench(
    factory: ClusterFactory = embedded_cluster, *, runs: int = 200, live: int = 2000,
    rounds: int = 3,
) -> dict[str, Any]:
    """Every controller figure of `make bench` on clusters from `factory`.

    The one-failing comparison alternates `rounds` fresh clusters of each kind and pools their
    samples: a single pair of runs differs by its heap and the machine's moment more than by
    the failing ComputeDomain.
    """
    one = cd_to_rct(factory, live=1, runs=runs)
    many_runs, failing_runs = [], []
    for _ in range(rounds):
        many_runs.append(cd_to_rct(factory, live=live, runs=runs))
        failing_runs.append(cd_to_rct(factory, live=live, runs=runs, failing=True))
    many, failing = _pooled(many_runs), _pooled(failing_runs)
    return {
        "cd_to_rct_live_1": _without_samples(one),
        f"cd_to_rct_live_{live}": many,
        f"cd_to_rct_live_{live}_one_failing": failing,
        "one_failing_p99_ratio": round(failing["p99_ms"] / max(1e-9, many["p99_ms"]), 3),
        "one_failing_p50_ratio": round(failing["p50_ms"] / max(1e-9, many["p50_ms"]), 3),
        "rounds": rounds,
        "list_calls_per_1000_cd_events": max(
            r["list_calls_per_1000_cd_events"] for r in (one, many, failing)
        ),
    }


def _without_samples(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "samples_s"}


def _pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure from several runs of one scenario: samples pooled, counters summed."""
    samples = [s for r in results for s in r["samples_s"]]
    lists = sum(r["list_calls_after_sync"] for r in results)
    events = sum(r["cd_events_after_sync"] for r in results)
    return {
        **stats.summarize(samples),
        "runs": len(results),
        "live_cds": results[0]["live_cds"],
        "one_cd_failing": results[0]["one_cd_failing"],
        "list_calls_after_sync": lists,
        "cd_events_after_sync": events,
        "list_calls_per_1000_cd_events": round(1000 * lists / max(1, events), 3),
    }
