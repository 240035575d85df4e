"""The production controller loop on the embedded cluster: informers, work queue, workers.

Covers: a CD reaches Ready from watch events alone; no list call after the initial sync;
a CD the API server keeps refusing backs off alone (its key's delays grow, others go on), is
reported once (one Warning event, a Reconciled=False condition) and recovers when the cause
goes; deletion finishes; a CD refused because another holds its RCT name is served once that
one is gone (RCT events map to every CD naming it); stale node labels are removed; a released
node whose daemon pod is gone leaves the CD's status.
Error paths: a bug on one key is logged and retried, a failure whose report fails too is still
retried, a controller that cannot list stops promptly without syncing.
Every wait is a poll with a deadline that returns as soon as the condition holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from adapters.kube import workqueue
from adapters.memory import cluster as memory_cluster
from apps.controller import caches, running, writes
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from core import errors, kinds, models, names, ports
from core.computedomain import controlling, modes

NS = "ml"
DRIVER_NS = "nvidia-dra-driver"
RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind
CD = kinds.COMPUTE_DOMAIN.kind


def _host_config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
        namespace=DRIVER_NS,
    ).config


def _driver_config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="driverManaged", isolation="", feature_gates="", namespace=DRIVER_NS,
        daemon_image="imex:1",
    ).config


def _cd(name: str, *, rct: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": rct or f"{name}-channel"}}},
    }


# NB: generous: on a loaded 2-core CI machine a reconcile round can take seconds.
def _eventually(probe: Callable[[], bool], *, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _status(cluster: ports.Cluster, name: str) -> Mapping[str, Any]:
    return cluster.get(CD, namespace=NS, name=name).get("status") or {}


def _ready(cluster: ports.Cluster, name: str) -> bool:
    return _status(cluster, name).get("status") == "Ready"


def _conditions(cluster: ports.Cluster, name: str) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in _status(cluster, name).get("conditions") or ()}


def _exists(cluster: ports.Cluster, kind: str, namespace: str, name: str) -> bool:
    try:
        cluster.get(kind, namespace=namespace, name=name)
    except errors.NotFoundError:
        return False
    return True


def _events(cluster: ports.Cluster, reason: str) -> list[Mapping[str, Any]]:
    return [e for e in cluster.list(kinds.EVENT.kind, namespace=NS).items
            if e["reason"] == reason]


class _WebhookDown(errors.ClusterError):
    status = 500


class _Cluster(memory_cluster.InMemoryCluster):
    """The embedded cluster, counting list calls and refusing RCT creates of chosen names
    (as a down admission webhook would) until told otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.writes: list[tuple[str, str, str]] = []  # (verb, kind, name)
        self.refused: set[str] = set()
        self.refusals = 0
        self.refused_enough = threading.Event()

    def list(self, kind: str, *, namespace: str = "",
             label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
        self.lists += 1
        return super().list(kind, namespace=namespace, label_selector=label_selector)

    def patch(self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
              subresource: str = "", resource_version: str = "") -> Mapping[str, Any]:
        self.writes.append(("patch" + (f"/{subresource}" if subresource else ""), kind, name))
        return super().patch(kind, namespace=namespace, name=name, patch=patch,
                             subresource=subresource, resource_version=resource_version)

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self.writes.append(("create", kind, name))
        if kind == RCT and name in self.refused:
            self.refusals += 1
            if self.refusals >= 4:
                self.refused_enough.set()
            raise _WebhookDown(
                f'POST .../resourceclaimtemplates: HTTP 500: Internal error occurred: failed '
                f'calling webhook "validate.example.com" for {name}'
            )
        return super().create(kind, obj)


@pytest.fixture
def cluster() -> Iterator[_Cluster]:
    made = _Cluster()
    yield made
    made.close()


def _run(cluster: _Cluster, *, config: models.DriverConfig | None = None,
         backoff: workqueue.WorkQueue[running.Key] | None = None,
         ) -> Iterator[running.Controller]:
    reconciler = controller_reconciler.Reconciler(
        cluster=cluster, config=config or _host_config(),
        metrics=controller_metrics.ControllerMetrics(),
    )
    controller = running.Controller(reconciler, workers=2, resync_s=60, queue=backoff,
                                    watch_timeout_s=2)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    assert controller.synced.wait(10), "informers never synced"
    try:
        yield controller
    finally:
        stop.set()
        assert controller.stopped.wait(10)


@pytest.fixture
def controller(cluster: _Cluster) -> Iterator[running.Controller]:
    yield from _run(cluster)


def test_a_new_cd_gets_its_rct_and_ready_from_watch_events(
    cluster: _Cluster, controller: running.Controller
) -> None:
    cluster.create(CD, _cd("a"))
    _eventually(lambda: _ready(cluster, "a"), what="CD a Ready")
    rct = cluster.get(RCT, namespace=NS, name="a-channel")
    assert rct["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == (
        cluster.get(CD, namespace=NS, name="a")["metadata"]["uid"])


def test_no_list_call_after_the_initial_sync(
    cluster: _Cluster, controller: running.Controller
) -> None:
    before = cluster.lists
    for i in range(20):
        cluster.create(CD, _cd(f"cd-{i}"))
    _eventually(lambda: all(_ready(cluster, f"cd-{i}") for i in range(20)), what="20 CDs Ready")
    cluster.delete(CD, namespace=NS, name="cd-0")
    _eventually(lambda: not _exists(cluster, CD, NS, "cd-0"), what="cd-0 gone")
    assert cluster.lists == before, "the controller listed after its initial sync"


def test_each_write_a_new_cd_needs_is_made_once_despite_the_caches_lag(
    cluster: _Cluster, controller: running.Controller
) -> None:
    for i in range(10):
        cluster.create(CD, _cd(f"w-{i}"))
    _eventually(lambda: all(_ready(cluster, f"w-{i}") for i in range(10)), what="10 CDs Ready")
    mine = sorted(w for w in cluster.writes if w[2].startswith("w-") and w[:2] != ("create", CD))
    assert mine == sorted(
        [("patch", CD, f"w-{i}") for i in range(10)]
        + [("patch/status", CD, f"w-{i}") for i in range(10)]
        + [("create", RCT, f"w-{i}-channel") for i in range(10)]
    )


def test_a_foreign_rct_holding_the_name_refuses_the_cd_once_and_a_resync_serves_it_once_gone(
    cluster: _Cluster, controller: running.Controller
) -> None:
    """No event tells the controller that a foreign RCT went (the workload-RCT informer only
    sees RCTs with our labels): production serves the CD at its next resync (300 s). The
    label patch after the delete stands in for that resync here."""
    cluster.create(RCT, {"metadata": {"name": "users-own", "namespace": NS},
                         "spec": {"spec": {"devices": {}}}})
    cluster.create(CD, _cd("late", rct="users-own"))
    _eventually(lambda: controlling.ADMITTED_CONDITION in _conditions(cluster, "late"),
                what="the refusal")
    for i in range(3):  # more syncs of the refused CD: no flip-flop, no second event
        cluster.patch(CD, namespace=NS, name="late", patch={"metadata": {"labels": {"n": str(i)}}})
        _eventually(lambda i=i: controller.queue.failures(("ml", "late")) == 0
                    and len(controller.queue) == 0, what="the queue drained")
    [event] = _events(cluster, "ResourceClaimTemplateNameTaken")
    assert event.get("count", 1) == 1 and "not created by this driver" in event["message"]
    assert controlling.ADMITTED_CONDITION in _conditions(cluster, "late")

    cluster.delete(RCT, namespace=NS, name="users-own")
    # Stands in for the next resync (see the docstring).
    cluster.patch(CD, namespace=NS, name="late", patch={"metadata": {"labels": {"n": "go"}}})
    _eventually(lambda: _ready(cluster, "late"), what="the CD served once the RCT is gone")


def test_deleting_a_cd_finishes_and_removes_its_rct(
    cluster: _Cluster, controller: running.Controller
) -> None:
    cluster.create(CD, _cd("a"))
    _eventually(lambda: _ready(cluster, "a"), what="CD a Ready")
    cluster.delete(CD, namespace=NS, name="a")
    _eventually(lambda: not _exists(cluster, CD, NS, "a"), what="CD a gone")
    assert not _exists(cluster, RCT, NS, "a-channel")


def test_a_refused_cd_backs_off_alone_is_reported_once_and_recovers(cluster: _Cluster) -> None:
    delays: list[float] = []

    class Recording(workqueue.WorkQueue[running.Key]):
        def add_rate_limited(self, key: running.Key) -> float:
            delay = super().add_rate_limited(key)
            delays.append(delay)
            return delay

    queue = Recording(backoff=workqueue.per_key_backoff(initial_s=0.01, max_s=0.2))
    cluster.refused.add("broken-channel")
    for _ in _run(cluster, backoff=queue):
        cluster.create(CD, _cd("broken"))
        assert cluster.refused_enough.wait(10), "the refused CD was not retried"
        cluster.create(CD, _cd("healthy"))
        _eventually(lambda: _ready(cluster, "healthy"), what="the healthy CD Ready")

        assert delays[:3] == [0.01, 0.02, 0.04], "per-key backoff is not exponential"
        [event] = _events(cluster, controlling.RECONCILE_FAILED_REASON)
        assert event["involvedObject"]["name"] == "broken" and event.get("count", 1) == 1
        assert "admission webhook failed" in event["message"] and "webhook" in event["message"]
        condition = _conditions(cluster, "broken")[controlling.RECONCILED_CONDITION]
        assert condition["status"] == "False" and condition["message"] == event["message"]
        assert not _ready(cluster, "broken")
        # Written through the caches' writer: the retries see the condition, none re-sends it.
        patches = [w for w in cluster.writes if w[1] == CD and w[2] == "broken"][1:]
        assert patches == [("patch", CD, "broken"), ("patch/status", CD, "broken")], (
            f"the failure report is re-sent on retries: {patches}")

        cluster.refused.clear()
        _eventually(lambda: _ready(cluster, "broken"), what="the CD Ready once the webhook is up")
        assert controlling.RECONCILED_CONDITION not in _conditions(cluster, "broken")


def test_a_failure_report_goes_through_the_writer_so_a_retry_does_not_resend_it(
    cluster: _Cluster,
) -> None:
    config = _host_config()
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=config)
    written: list[Mapping[str, Any]] = []
    writer = writes.WriteReporting(cluster, on_written=lambda kind, obj: written.append(obj),
                                   on_exists=lambda kind, namespace, name: None)

    def observe(cd: models.ComputeDomain, raw: Mapping[str, Any]) -> controlling.Observed:
        return controlling.observe(cd, objects=controlling.index_cluster({}), config=config,
                                   conditions=controlling.conditions_from_k8s(raw))

    cluster.refused.add("broken-channel")
    cluster.create(CD, _cd("broken"))
    raw: Mapping[str, Any] = cluster.get(CD, namespace=NS, name="broken")
    for _ in range(3):  # each retry plans from what the writer reported last (the caches)
        with pytest.raises(_WebhookDown):
            reconciler.sync_domain(raw, observe=observe, writer=writer)
        raw = written[-1]
    assert controlling.RECONCILED_CONDITION in _conditions(cluster, "broken")
    assert cluster.writes.count(("patch/status", CD, "broken")) == 1
    [_] = _events(cluster, controlling.RECONCILE_FAILED_REASON)


def test_a_cd_refused_for_a_taken_rct_is_served_once_the_holder_is_gone(
    cluster: _Cluster, controller: running.Controller
) -> None:
    cluster.create(CD, _cd("first", rct="shared"))
    _eventually(lambda: _ready(cluster, "first"), what="first Ready")
    cluster.create(CD, _cd("second", rct="shared"))
    _eventually(lambda: controlling.ADMITTED_CONDITION in _conditions(cluster, "second"),
                what="second refused")
    [event] = _events(cluster, "ResourceClaimTemplateNameTaken")
    assert event["involvedObject"]["name"] == "second"

    cluster.delete(CD, namespace=NS, name="first")

    _eventually(lambda: _ready(cluster, "second"), what="second Ready once first is gone")
    second_uid = cluster.get(CD, namespace=NS, name="second")["metadata"]["uid"]
    rct = cluster.get(RCT, namespace=NS, name="shared")
    assert rct["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == second_uid
    assert controlling.ADMITTED_CONDITION not in _conditions(cluster, "second")


def test_a_cd_with_a_bad_rct_name_gets_one_event_and_a_condition(
    cluster: _Cluster, controller: running.Controller
) -> None:
    cluster.create(CD, _cd("bad", rct="Bad_Name"))
    _eventually(lambda: controlling.ADMITTED_CONDITION in _conditions(cluster, "bad"),
                what="the refusal condition")
    [event] = _events(cluster, "InvalidResourceClaimTemplateName")
    assert "'Bad_Name'" in event["message"]
    assert cluster.list(RCT).items == ()


def test_stale_node_labels_are_removed(cluster: _Cluster) -> None:
    for _ in _run(cluster, config=_driver_config()):
        cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "n1", "labels": {names.COMPUTE_DOMAIN_LABEL: "gone-uid"}}})

        def unlabelled() -> bool:
            node = cluster.get(kinds.NODE.kind, namespace="", name="n1")
            return names.COMPUTE_DOMAIN_LABEL not in (node["metadata"].get("labels") or {})

        _eventually(unlabelled, what="the stale label removed")


def test_a_released_nodes_gone_daemon_leaves_the_status_from_events_alone(
    cluster: _Cluster,
) -> None:
    """Upstream expects the CD to drop the node within seconds of its daemon pod going, even
    when the daemon did not remove its own entry: the controller follows the daemon pods."""
    for controller in _run(cluster, config=_driver_config()):
        cd = cluster.create(CD, {**_cd("one"), "spec": {
            "numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "one-channel"}}}})
        uid = cd["metadata"]["uid"]
        cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "n1", "labels": {names.COMPUTE_DOMAIN_LABEL: uid}}})
        ds_labels = {names.COMPUTE_DOMAIN_LABEL: uid,
                     names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_DAEMON}
        cluster.create(kinds.POD.kind, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "daemon-n1", "namespace": DRIVER_NS, "labels": ds_labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "imex", "image": "imex"}]}})
        cluster.create(kinds.COMPUTE_DOMAIN_CLIQUE.kind, {
            "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
            "metadata": {"name": f"{uid}.c.1", "namespace": DRIVER_NS},
            "daemons": [{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1",
                         "index": 0, "status": "Ready"}]})
        _eventually(lambda: _ready(cluster, "one"), what="Ready with its one daemon")

        cluster.patch(kinds.NODE.kind, namespace="", name="n1",
                      patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}})
        # As in a cluster: the DaemonSet controller deletes the pod after the label went.
        nodes = controller.caches.nodes
        _eventually(lambda: not nodes.by_index(caches.BY_CD_INDEX, uid),  # noqa: B023
                    what="the controller to see the node released")
        assert _ready(cluster, "one"), "the daemon pod is still there: its entry stays"
        cluster.delete(kinds.POD.kind, namespace=DRIVER_NS, name="daemon-n1")

        _eventually(lambda: _status(cluster, "one").get("nodes") == [],
                    what="the released node dropped", timeout_s=5)
        assert not _ready(cluster, "one")
        clique = cluster.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=DRIVER_NS,
                             name=f"{uid}.c.1")
        assert clique["daemons"] == []


def test_a_bug_on_one_key_is_logged_and_retried_not_fatal() -> None:
    crashes = threading.Event()

    class Crashing(_Cluster):
        def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
            if obj["metadata"]["name"] == "crash-channel" and not crashes.is_set():
                crashes.set()
                raise RuntimeError("a bug under a write")
            return super().create(kind, obj)

    crashing = Crashing()
    try:
        for _ in _run(crashing):
            crashing.create(CD, _cd("crash"))
            assert crashes.wait(10)
            _eventually(lambda: _ready(crashing, "crash"), what="the CD Ready after the crash")
    finally:
        crashing.close()


def test_a_controller_that_cannot_list_stops_promptly_without_syncing() -> None:
    class Forbidden(memory_cluster.InMemoryCluster):
        def list(self, kind: str, *, namespace: str = "",
                 label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
            raise errors.ClusterError(f"{kind} is forbidden: missing RBAC rule")

    cluster = Forbidden()
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_host_config())
    controller = running.Controller(reconciler, workers=1, watch_timeout_s=1)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    stop.set()
    assert controller.stopped.wait(10), "the controller did not stop"
    assert not controller.synced.is_set()
    cluster.close()


def test_a_failure_that_cannot_even_be_reported_is_still_retried() -> None:
    class NoStatus(_Cluster):
        def patch(self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
                  subresource: str = "", resource_version: str = "") -> Mapping[str, Any]:
            if subresource == "status" and name == "broken":
                raise _WebhookDown("status writes fail too")
            return super().patch(kind, namespace=namespace, name=name, patch=patch,
                                 subresource=subresource, resource_version=resource_version)

    quiet = NoStatus()
    quiet.refused.add("broken-channel")
    try:
        for _ in _run(quiet, backoff=workqueue.WorkQueue(
                backoff=workqueue.per_key_backoff(initial_s=0.01, max_s=0.05))):
            quiet.create(CD, _cd("broken"))
            assert quiet.refused_enough.wait(10), "the CD was not retried"
            quiet.refused.clear()
            _eventually(lambda: _exists(quiet, RCT, NS, "broken-channel"),
                        what="the RCT once the webhook is up")
    finally:
        quiet.close()
