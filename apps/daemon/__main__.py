"""`compute-domain-daemon run | check`: flags -> cluster -> peer registry -> nvidia-imex child."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from adapters.imex import ctl as imex_ctl
from adapters.imex import supervisor as imex_supervisor
from adapters.kube import cluster as kube_cluster
from apps.daemon import check as daemon_check
from apps.daemon import registry as daemon_registry
from apps.daemon import runner as daemon_runner
from apps.daemon import settings as daemon_settings
from core import errors, gates, models, ports
from core.computedomain import membership

log = logging.getLogger("compute-domain-daemon")


def main(argv: Sequence[str] | None = None) -> int:
    settings = daemon_settings.parse(argv, os.environ)
    if settings.command == daemon_settings.CHECK:
        # NB: no logging setup: the kubelet records the probe's stdout on failure.
        return daemon_check.run_check(settings)
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("event=shutdown signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        feature_gates = resolve_gates(settings.feature_gates)
        validate(settings)
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
        cluster = kube_cluster.KubeCluster.from_config(settings.kubeconfig)
    except errors.ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return run_daemon(settings, cluster=cluster, feature_gates=feature_gates, stop=stop)


def resolve_gates(text: str) -> models.FeatureGates:
    """The daemon's gates (the controller passes its own in FEATURE_GATES)."""
    resolved = gates.resolve_gates(gates.parse_feature_gates(text))
    gates.validate_gate_dependencies(resolved)
    return resolved


def validate(settings: daemon_settings.Settings) -> None:
    """ConfigError naming the missing input and where it normally comes from."""
    if not settings.domain_uid:
        raise errors.ConfigError(
            "COMPUTE_DOMAIN_UUID is not set: the daemon claim's CDI edits did not apply; is CDI "
            "enabled in the container runtime, and does the pod request the daemon claim?"
        )
    for value, what in (
        (settings.node_name, "NODE_NAME (--node-name; the DaemonSet sets it from spec.nodeName)"),
        (settings.pod_ip, "POD_IP (--pod-ip; the DaemonSet sets it from status.podIP)"),
    ):
        if not value:
            raise errors.ConfigError(f"{what} is not set")
    if settings.max_nodes < 1:
        raise errors.ConfigError(
            f"MAX_NODES_PER_IMEX_DOMAIN must be at least 1 (got {settings.max_nodes})"
        )


def run_daemon(
    settings: daemon_settings.Settings,
    *,
    cluster: ports.Cluster,
    feature_gates: models.FeatureGates,
    stop: threading.Event,
) -> int:
    """Wire registry, supervisor and probe for one daemon and run it until `stop`."""
    store = (
        membership.Store.CLIQUE
        if feature_gates.enabled(gates.COMPUTE_DOMAIN_CLIQUES)
        else membership.Store.STATUS
    )
    registry = daemon_registry.PeerRegistry(
        cluster,
        store=store,
        me=membership.Identity(
            node_name=settings.node_name,
            ip_address=settings.pod_ip,
            clique_id=settings.clique_id or "",
        ),
        domain_uid=settings.domain_uid,
        domain_name=settings.domain_name,
        domain_namespace=settings.domain_namespace,
        namespace=settings.namespace,
        max_nodes=settings.max_nodes,
    )
    runner = daemon_runner.DaemonRunner(
        registry=registry,
        supervisor=imex_supervisor.IMEXSupervisor(
            [settings.imex_command, "-c", settings.imexd_cfg]
        ),
        ctl=imex_ctl.IMEXCtl(command=settings.imex_ctl_command, config_path=settings.imexd_cfg),
        paths=daemon_runner.Paths(
            imexd_template=settings.imexd_template,
            imexd_cfg=settings.imexd_cfg,
            nodes_cfg=settings.nodes_cfg,
            hosts_file=settings.hosts_file,
        ),
        dns_names=feature_gates.enabled(gates.IMEX_DAEMONS_WITH_DNS_NAMES),
        max_nodes=settings.max_nodes,
        ready_poll_s=settings.ready_poll_s,
        ready_recheck_s=settings.ready_recheck_s,
    )
    return runner.run(stop)



if __name__ == "__main__":
    sys.exit(main())
