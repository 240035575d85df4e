"""Flags of the controller, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    namespace: str
    feature_gates: str
    imex_mode: str
    imex_isolation: str
    leader_elect: bool
    identity: str
    metrics_port: int | None
    health_port: int | None
    daemon_image: str | None
    daemon_service_account: str
    kubeconfig: str | None
    resync_s: float
    workers: int
    log_verbosity: int
    # Channel isolation: channel IDs 1..max-1 are assigned (chart imex.channels.max).
    max_channels: int = 2048


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags; every flag defaults to its environment variable, then a built-in default."""
    parser = argparse.ArgumentParser(
        prog="compute-domain-controller",
        description="Controller of NVIDIA ComputeDomains (DRA driver compute-domain.nvidia.com).",
    )
    add = parser.add_argument
    add("--namespace", default=env.get("NAMESPACE", "nvidia-dra-driver"))
    add("--feature-gates", default=env.get("FEATURE_GATES", ""))
    add("--imex-mode", default=env.get("IMEX_MODE", ""))
    add("--imex-isolation", default=env.get("IMEX_ISOLATION", ""))
    add("--leader-elect", default=env.get("LEADER_ELECT", "false"))
    add("--identity", default=env.get("POD_NAME", env.get("HOSTNAME", "controller")))
    add("--metrics-port", default=env.get("METRICS_PORT", "0"))
    add("--health-port", default=env.get("HEALTH_PORT", "0"))
    add("--daemon-image", default=env.get("DAEMON_IMAGE"))
    add("--daemon-service-account", default=env.get("DAEMON_SERVICE_ACCOUNT", ""))
    add("--kubeconfig", default=env.get("KUBECONFIG"))
    # A safety net only: every change is picked up from its watch event at once.
    add("--resync-seconds", default=env.get("RESYNC_SECONDS", "300"))
    # Workers mostly wait on the API server: 16 keep a burst of 200 new CDs under a second.
    add("--workers", default=env.get("WORKERS", "16"),
        help="ComputeDomains reconciled in parallel")
    add("-v", "--log-verbosity", default=env.get("LOG_VERBOSITY", "2"))
    add("--imex-channels-max", default=env.get("IMEX_CHANNELS_MAX", "2048"),
        help="channel isolation: channel IDs 1..max-1 are assigned to ComputeDomains")
    ns = parser.parse_args(argv)
    return Settings(
        namespace=ns.namespace,
        feature_gates=ns.feature_gates,
        imex_mode=ns.imex_mode,
        imex_isolation=ns.imex_isolation,
        leader_elect=str(ns.leader_elect).strip().lower() == "true",
        identity=ns.identity,
        metrics_port=int(ns.metrics_port) or None,
        health_port=int(ns.health_port) or None,
        daemon_image=ns.daemon_image or None,
        daemon_service_account=ns.daemon_service_account,
        kubeconfig=ns.kubeconfig,
        resync_s=float(ns.resync_seconds),
        workers=max(1, int(ns.workers)),
        log_verbosity=int(ns.log_verbosity),
        max_channels=int(ns.imex_channels_max),
    )
