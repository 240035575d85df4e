"""`compute-domain-daemon run | check`: flags -> cluster -> peer registry -> nvidia-imex child."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from apps.daemon import check as daemon_check
from apps.daemon import settings as daemon_settings
from apps.shell import logs, signals
from core import errors

log = logging.getLogger("compute-domain-daemon")


def main(argv: Sequence[str] | None = None) -> int:
    settings = daemon_settings.parse(argv, os.environ)
    if settings.command == daemon_settings.CHECK:
        # NB: no logging setup: the kubelet records the probe's stdout on failure.
        return daemon_check.run_check(settings)
    logs.configure(settings.log_verbosity)
    stop = signals.stop_on_signals(log)
    # NB: imported here, not at the top: `check` runs as the pod's readiness probe every few
    # seconds and must not pay for loading the Kubernetes client it never uses.
    from apps.daemon import wiring as daemon_wiring

    try:
        feature_gates = daemon_wiring.resolve_gates(settings.feature_gates)
        daemon_wiring.validate(settings)
        inventory = daemon_wiring.fabric_inventory(settings)
    except errors.ConfigError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    if not settings.clique_id:
        # Upstream behaviour: a node without fabric runs no IMEX daemon; stay up so the
        # DaemonSet does not crash-loop, and say why once.
        log.warning(
            "event=no_clique node=%s action=idle detail=%r", settings.node_name,
            "this node has no NVLink clique (CLIQUE_ID empty): nvidia-imex is not started",
        )
        stop.wait()
        return 0
    try:
        cluster = daemon_wiring.connect(settings)
    except errors.ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return daemon_wiring.run_daemon(
        settings, cluster=cluster, feature_gates=feature_gates, stop=stop, inventory=inventory
    )



if __name__ == "__main__":
    sys.exit(main())
