"""`compute-domain-controller`: flags -> cluster -> (leader election) -> reconcile loop."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from adapters.kube import cluster as kube_cluster
from adapters.kube import leader
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from apps.controller import settings as controller_settings
from core import errors, ports
from core.computedomain import modes

log = logging.getLogger("compute-domain-controller")

# How long a stopping reconcile loop may take to finish its current pass.
_JOIN_TIMEOUT_S = 10.0


def serve_health(port: int) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path in ("/healthz", "/readyz")
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(b"ok" if ok else b"not found")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    settings = controller_settings.parse(argv, os.environ)
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # NB: handlers first, so a SIGTERM during start-up still shuts down cleanly.
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("event=shutdown signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
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
    except errors.ConfigError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    for note in resolved.notes:
        log.info("event=config_note note=%r", note)
    log.info("event=controller_starting config=%r", modes.describe(resolved.config))
    cluster = kube_cluster.KubeCluster.from_config(settings.kubeconfig)
    metrics = controller_metrics.ControllerMetrics()
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    if settings.health_port:
        serve_health(settings.health_port)
    reconciler = controller_reconciler.Reconciler(
        cluster=cluster, config=resolved.config, metrics=metrics
    )
    elector = None
    if settings.leader_elect:
        elector = leader.LeaderElector(
            cluster=cluster,
            namespace=settings.namespace,
            name="compute-domain-controller",
            identity=settings.identity,
        )
    return run_controller(
        cluster, reconciler=reconciler, stop=stop, resync_s=settings.resync_s, elector=elector,
        workers=settings.workers,
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

    def lead() -> None:
        controller = running.Controller(reconciler, workers=workers, resync_s=resync_s)
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
