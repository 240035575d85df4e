"""Flags of `compute-domain-daemon`, each with its environment fallback.

The pod gets NODE_NAME/POD_IP/POD_NAME/POD_UID/POD_NAMESPACE/MAX_NODES_PER_IMEX_DOMAIN/
FEATURE_GATES from its DaemonSet and the domain's identity plus CLIQUE_ID from the daemon claim's
CDI edits. Every path (the /imexd dir, /etc/hosts, the executables) is a flag so tests run
without root.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from apps.shell import flags
from core.computedomain import daemon_claim, membership

RUN = "run"
CHECK = "check"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    command: str
    # None: CLIQUE_ID was not given at all (not in a daemon pod); "": the node has no fabric.
    clique_id: str | None
    domain_uid: str
    domain_name: str
    domain_namespace: str
    node_name: str
    pod_ip: str
    # The daemon pod's name and uid: the pod becomes an owner of its ComputeDomainClique.
    pod_name: str
    pod_uid: str
    namespace: str
    max_nodes: int
    feature_gates: str
    config_dir: str
    hosts_file: str
    imex_command: str
    imex_ctl_command: str
    kubeconfig: str | None
    ready_poll_s: float
    ready_recheck_s: float
    reload_grace_s: float
    fabric_check_s: float
    nvml: str
    nvidia_driver_root: str
    log_verbosity: int

    @property
    def imexd_cfg(self) -> str:
        return f"{self.config_dir}/imexd.cfg"

    @property
    def imexd_template(self) -> str:
        return f"{self.config_dir}/{daemon_claim.TEMPLATE_FILE_NAME}"

    @property
    def nodes_cfg(self) -> str:
        return f"{self.config_dir}/nodes.cfg"


COMMAND = flags.command(
    "compute-domain-daemon",
    help="`run`: runs and supervises nvidia-imex for one node of a ComputeDomain. `check`: "
    "the pod's readiness probe (exit 0 ready, 1 not ready, 3 no NVLink fabric). Every flag "
    "falls back to the environment variable named beside it (the DaemonSet and the daemon "
    "claim's CDI edits set those).",
    params=[
        flags.argument("command", type=flags.OneOf(RUN, CHECK)),
        flags.option("--clique-id", env="CLIQUE_ID", type=flags.TEXT,
                     help="NVLink clique of this node; empty: the node has no fabric; unset: "
                     "`check` asks NVML"),
        flags.option("--compute-domain-uuid", env="COMPUTE_DOMAIN_UUID", default="",
                     help="uid of the ComputeDomain this daemon serves"),
        flags.option("--compute-domain-name", env="COMPUTE_DOMAIN_NAME", default="",
                     help="name of the ComputeDomain this daemon serves"),
        flags.option("--compute-domain-namespace", env="COMPUTE_DOMAIN_NAMESPACE",
                     default="default", help="namespace of the ComputeDomain this daemon serves"),
        flags.node_name(help="the node this daemon runs on"),
        flags.option("--pod-ip", env="POD_IP", default="",
                     help="this daemon's pod IP (what its IMEX peers connect to)"),
        flags.option("--pod-name", env="POD_NAME", default="",
                     help="this daemon's pod, an owner of its ComputeDomainClique"),
        flags.option("--pod-uid", env="POD_UID", default="",
                     help="the uid of this daemon's pod"),
        flags.namespace(env=("POD_NAMESPACE", "NAMESPACE")),
        flags.option("--max-nodes-per-imex-domain", env="MAX_NODES_PER_IMEX_DOMAIN",
                     type=flags.WHOLE_ABOVE_0, empty_is_unset=True,
                     default=str(membership.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN),
                     help="nodes one IMEX domain may span"),
        flags.feature_gates(),
        flags.option("--config-dir", env="IMEXD_DIR", default=daemon_claim.CONTAINER_CONFIG_DIR,
                     help="where imexd.cfg and nodes.cfg are written (the claim's mount)"),
        flags.option("--hosts-file", env="HOSTS_FILE", default="/etc/hosts",
                     help="the hosts file peers' DNS names are written to"),
        flags.option("--imex-command", env="IMEX_COMMAND", default="nvidia-imex",
                     help="the nvidia-imex executable"),
        flags.option("--imex-ctl-command", env="IMEX_CTL_COMMAND", default="nvidia-imex-ctl",
                     help="the nvidia-imex-ctl executable (readiness queries)"),
        flags.kubeconfig(),
        flags.option("--ready-poll-seconds", env="READY_POLL_SECONDS", type=flags.SECONDS,
                     default="1", help="how often nvidia-imex-ctl is asked until it says READY"),
        flags.option("--ready-recheck-seconds", env="READY_RECHECK_SECONDS", type=flags.SECONDS,
                     default="10",
                     help="how often it is asked once READY (a readiness probe's period)"),
        flags.option("--reload-grace-seconds", env="RELOAD_GRACE_SECONDS", type=flags.SECONDS,
                     default="2",
                     help="SIGUSR1 waits until nvidia-imex answered READY or ran this long"),
        flags.option("--fabric-check-seconds", env="FABRIC_CHECK_SECONDS", type=flags.SECONDS,
                     default="60",
                     help="how often `run` reads the node's NVLink fabric state (the entry is "
                     "NotReady while it is degraded)"),
        flags.option("--nvml", env="NVML", default="real",
                     help="where `check` learns the clique when CLIQUE_ID is unset, and `run` "
                     "the fabric's state: real | simulated:<profile>"),
        flags.nvidia_driver_root(help="where the NVIDIA driver's files are (for NVML)"),
        flags.verbosity(),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse `run|check` and the flags; bad input exits 2 with one `error:` line."""
    values = flags.parse(COMMAND, argv, env)
    return Settings(
        command=values["command"],
        clique_id=values["clique_id"],
        domain_uid=values["compute_domain_uuid"],
        domain_name=values["compute_domain_name"],
        domain_namespace=values["compute_domain_namespace"],
        node_name=values["node_name"],
        pod_ip=values["pod_ip"],
        pod_name=values["pod_name"],
        pod_uid=values["pod_uid"],
        namespace=values["namespace"],
        max_nodes=values["max_nodes_per_imex_domain"],
        feature_gates=values["feature_gates"],
        config_dir=values["config_dir"].rstrip("/") or "/",
        hosts_file=values["hosts_file"],
        imex_command=values["imex_command"],
        imex_ctl_command=values["imex_ctl_command"],
        kubeconfig=values["kubeconfig"],
        ready_poll_s=values["ready_poll_seconds"],
        ready_recheck_s=values["ready_recheck_seconds"],
        reload_grace_s=values["reload_grace_seconds"],
        fabric_check_s=values["fabric_check_seconds"],
        nvml=values["nvml"],
        nvidia_driver_root=values["nvidia_driver_root"],
        log_verbosity=values["log_verbosity"],
    )
