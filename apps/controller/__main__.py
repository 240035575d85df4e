"""`compute-domain-controller`: flags -> cluster -> (leader election) -> reconcile loop."""

from __future__ import annotations

import http.server
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence

from adapters.kube import cluster as kube_cluster
from adapters.kube import leader
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from apps.controller import settings as controller_settings
from apps.shell import logs, signals
from core import errors, gates, ports
from core.computedomain import modes

log = logging.getLogger("compute-domain-controller")

# How long a stopping reconcile loop may take to finish its current pass.
_JOIN_TIMEOUT_S = 10.0


def serve_health(
    port: int, *, ready: Callable[[], bool] = lambda: True
) -> http.server.ThreadingHTTPServer:
    """`/healthz`: the process answers. `/readyz`: 200 only while `ready()` (see `readiness`),
    503 otherwise. Returns the server (port 0 picks a free one)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                code, body = 200, b"ok"
            elif self.path == "/readyz":
                ok = ready()
                code, body = (200, b"ok") if ok else (503, b"not synced or not leading")
            else:
                code, body = 404, b"not found"
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def readiness(
    *, terms: Sequence[running.Controller], elector: leader.LeaderElector | None
) -> Callable[[], bool]:
    """Ready means: the current term's caches have synced, its workers run, and (under leader
    election) this replica leads within its renew deadline. A follower, a replica still
    listing, and one that lost the lease are all not ready."""

    def ready() -> bool:
        if not terms:
            return False
        term = terms[-1]
        if not term.synced.is_set() or term.stopped.is_set():
            return False
        return elector is None or elector.is_leader

    return ready


def main(argv: Sequence[str] | None = None) -> int:
    settings = controller_settings.parse(argv, os.environ)
    logs.configure(settings.log_verbosity)
    # NB: handlers first, so a SIGTERM during start-up still shuts down cleanly.
    stop = signals.stop_on_signals(log)
    try:
        resolved = modes.resolve_driver_config(
            mode=settings.imex_mode,
            isolation=settings.imex_isolation,
            feature_gates=settings.feature_gates,
            namespace=settings.namespace,
            daemon_image=settings.daemon_image,
            daemon_service_account=settings.daemon_service_account,
            max_channels=settings.max_channels,
        )
        gates.refuse_unbuilt(resolved.config.gates, gates.Component.CONTROLLER)
    except errors.ConfigError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    for note in resolved.notes:
        log.info("event=config_note note=%r", note)
    log.info("event=controller_starting config=%r", modes.describe(resolved.config))
    try:
        cluster = kube_cluster.KubeCluster.from_config(settings.kubeconfig)
    except errors.ConfigError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    metrics = controller_metrics.ControllerMetrics()
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    terms: list[running.Controller] = []
    reconciler = controller_reconciler.Reconciler(
        cluster=cluster, config=resolved.config, metrics=metrics
    )
    elector = None
    if settings.leader_elect:
        try:
            elector = leader.LeaderElector(
                cluster=cluster,
                namespace=settings.namespace,
                name="compute-domain-controller",
                identity=settings.identity,
                lease_duration_s=settings.lease_duration_s,
                renew_deadline_s=settings.renew_deadline_s,
                retry_period_s=settings.retry_period_s,
            )
        except errors.ConfigError as exc:
            log.error("event=startup_failed error=%r", exc.message)
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
    if settings.health_port:
        serve_health(settings.health_port, ready=readiness(terms=terms, elector=elector))
    return run_controller(
        cluster, reconciler=reconciler, stop=stop, resync_s=settings.resync_s, elector=elector,
        workers=settings.workers, on_controller=terms.append,
    )


def run_controller(
    cluster: ports.Cluster,
    *,
    reconciler: controller_reconciler.Reconciler,
    stop: threading.Event,
    resync_s: float,
    elector: leader.LeaderElector | None = None,
    workers: int = 16,
    on_controller: Callable[[running.Controller], None] | None = None,
) -> int:
    """Reconcile until `stop` (returns 0) or until the lease is lost (returns 1).

    The informers, the work queue and its workers run on their own threads under a `work`
    Event of their own, so the elector's thread stays free to renew the lease. Losing the
    lease ends the process with a non-zero status, as client-go controllers do: the pod
    restarts clean and competes again, instead of resuming with whatever state the lost term
    left behind. `on_controller` sees the controller of the term (tests wait on its events).
    """
    work = threading.Event()
    loop: list[threading.Thread] = []

    def wake_on_stop() -> None:
        stop.wait()
        work.set()

    threading.Thread(target=wake_on_stop, name="stop-watcher", daemon=True).start()

    # NB: under election every write of the term checks the lease first: a worker in the middle
    # of a key when the renew deadline passes writes nothing more.
    may_write = (lambda: not work.is_set()) if elector is None else (
        lambda: not work.is_set() and elector.is_leader)

    def lead() -> None:
        controller = running.Controller(reconciler, workers=workers, resync_s=resync_s,
                                        may_write=may_write)
        if on_controller is not None:
            on_controller(controller)
        thread = threading.Thread(target=controller.run, args=(work,), name="controller",
                                  daemon=True)
        thread.start()
        loop.append(thread)

    def stop_leading() -> None:
        work.set()

    if elector is None:
        lead()
        stop.wait()
    else:
        # Returns once `stop` is set (lease released) or the lease is lost.
        elector.run(on_started_leading=lead, on_stopped_leading=stop_leading, stop_event=stop)
    stop_leading()
    for thread in loop:
        thread.join(timeout=_JOIN_TIMEOUT_S)
    if not stop.is_set():
        log.error("event=leadership_lost action=exit")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
