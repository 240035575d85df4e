"""Flags of the controller, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from apps.shell import flags


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
    # Leader election (client-go's defaults): how long a Lease holds, by when its holder must
    # have renewed it, how often candidates try.
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


COMMAND = flags.command(
    "compute-domain-controller",
    help="Controller of NVIDIA ComputeDomains (DRA driver compute-domain.nvidia.com). Every "
    "flag falls back to the environment variable named beside it (the Helm chart sets those).",
    params=[
        flags.namespace(),
        flags.feature_gates(),
        flags.imex_mode(),
        flags.imex_isolation(),
        flags.imex_channels_max(),
        flags.option(
            "--leader-elect", env="LEADER_ELECT", type=flags.BOOLEAN, default="false",
            help="take the Lease before reconciling (needed with more than one replica)",
        ),
        flags.option(
            "--lease-duration-seconds", env="LEASE_DURATION_SECONDS", type=flags.SECONDS,
            default="15", help="leader election: how long a taken Lease holds",
        ),
        flags.option(
            "--renew-deadline-seconds", env="RENEW_DEADLINE_SECONDS", type=flags.SECONDS,
            default="10", help="leader election: the leader steps down unless it renewed by then",
        ),
        flags.option(
            "--retry-period-seconds", env="RETRY_PERIOD_SECONDS", type=flags.SECONDS,
            default="2", help="leader election: how often the Lease is tried and renewed",
        ),
        flags.option(
            "--identity", env=("POD_NAME", "HOSTNAME"), default="controller",
            help="this replica's name in the leader-election Lease",
        ),
        flags.metrics_port(),
        flags.health_port(default="0"),
        flags.option(
            "--daemon-image", env="DAEMON_IMAGE", type=flags.OPTIONAL_TEXT,
            help="driverManaged: image of the per-ComputeDomain IMEX daemon pods",
        ),
        flags.option(
            "--daemon-service-account", env="DAEMON_SERVICE_ACCOUNT", default="",
            help="driverManaged: service account of the IMEX daemon pods",
        ),
        flags.kubeconfig(),
        # A safety net only: every change is picked up from its watch event at once.
        flags.option(
            "--resync-seconds", env="RESYNC_SECONDS", type=flags.SECONDS, default="300",
            help="every ComputeDomain is reconciled again this often (a safety net)",
        ),
        # Workers mostly wait on the API server: 16 keep a burst of 200 new CDs under a second.
        flags.option(
            "--workers", env="WORKERS", type=flags.WHOLE_ABOVE_0, default="16",
            help="ComputeDomains reconciled in parallel",
        ),
        flags.verbosity(),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags; every flag defaults to its environment variable, then a built-in default.

    Bad input exits 2 with one `error:` line naming the flag and its env var.
    """
    values = flags.parse(COMMAND, argv, env)
    return Settings(
        namespace=values["namespace"],
        feature_gates=values["feature_gates"],
        imex_mode=values["imex_mode"],
        imex_isolation=values["imex_isolation"],
        leader_elect=values["leader_elect"],
        identity=values["identity"],
        metrics_port=values["metrics_port"],
        health_port=values["health_port"],
        daemon_image=values["daemon_image"],
        daemon_service_account=values["daemon_service_account"],
        kubeconfig=values["kubeconfig"],
        resync_s=values["resync_seconds"],
        workers=values["workers"],
        log_verbosity=values["log_verbosity"],
        max_channels=values["imex_channels_max"],
        lease_duration_s=values["lease_duration_seconds"],
        renew_deadline_s=values["renew_deadline_seconds"],
        retry_period_s=values["retry_period_seconds"],
    )
