"""Flags of `compute-domain-daemon`, each with its environment fallback.

The pod gets NODE_NAME/POD_IP/POD_NAMESPACE/MAX_NODES_PER_IMEX_DOMAIN/FEATURE_GATES from its
DaemonSet and the domain's identity plus CLIQUE_ID from the daemon claim's CDI edits. Every
path (the /imexd dir, /etc/hosts, the executables) is a flag so tests run without root.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence

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


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse `run|check` and the flags; argparse exits 2 with usage on a bad flag."""
    parser = argparse.ArgumentParser(
        prog="compute-domain-daemon",
        description="Runs and supervises nvidia-imex for one node of a ComputeDomain "
        "(`run`), or answers the pod's readiness probe (`check`).",
    )
    add = parser.add_argument
    add("command", choices=(RUN, CHECK))
    add("--clique-id", default=env.get("CLIQUE_ID"), help="NVLink clique (env CLIQUE_ID)")
    add("--compute-domain-uuid", default=env.get("COMPUTE_DOMAIN_UUID", ""))
    add("--compute-domain-name", default=env.get("COMPUTE_DOMAIN_NAME", ""))
    add("--compute-domain-namespace", default=env.get("COMPUTE_DOMAIN_NAMESPACE", "default"))
    add("--node-name", default=env.get("NODE_NAME", ""))
    add("--pod-ip", default=env.get("POD_IP", ""))
    add("--namespace", default=env.get("POD_NAMESPACE", env.get("NAMESPACE", "nvidia-dra-driver")),
        help="driver namespace, where ComputeDomainCliques live (env POD_NAMESPACE)")
    add("--max-nodes-per-imex-domain", type=int,
        default=int(env.get("MAX_NODES_PER_IMEX_DOMAIN")
                    or membership.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN))
    add("--feature-gates", default=env.get("FEATURE_GATES", ""))
    add("--config-dir", default=env.get("IMEXD_DIR", daemon_claim.CONTAINER_CONFIG_DIR))
    add("--hosts-file", default=env.get("HOSTS_FILE", "/etc/hosts"))
    add("--imex-command", default=env.get("IMEX_COMMAND", "nvidia-imex"))
    add("--imex-ctl-command", default=env.get("IMEX_CTL_COMMAND", "nvidia-imex-ctl"))
    add("--kubeconfig", default=env.get("KUBECONFIG"))
    add("--ready-poll-seconds", type=float, default=float(env.get("READY_POLL_SECONDS", "1")),
        help="how often nvidia-imex-ctl is asked until it says READY")
    add("--ready-recheck-seconds", type=float,
        default=float(env.get("READY_RECHECK_SECONDS", "10")),
        help="how often it is asked once READY (a readiness probe's period)")
    add("--reload-grace-seconds", type=float,
        default=float(env.get("RELOAD_GRACE_SECONDS", "2")),
        help="SIGUSR1 waits until nvidia-imex answered READY or ran this long")
    add("--nvml", default=env.get("NVML", "real"),
        help="where `check` learns the clique when CLIQUE_ID is unset: real | simulated:<profile>")
    add("--nvidia-driver-root", default=env.get("NVIDIA_DRIVER_ROOT", "/"))
    add("-v", "--log-verbosity", type=int, default=int(env.get("LOG_VERBOSITY", "2")))
    ns = parser.parse_args(argv)
    return Settings(
        command=ns.command,
        clique_id=ns.clique_id,
        domain_uid=ns.compute_domain_uuid,
        domain_name=ns.compute_domain_name,
        domain_namespace=ns.compute_domain_namespace,
        node_name=ns.node_name,
        pod_ip=ns.pod_ip,
        namespace=ns.namespace,
        max_nodes=ns.max_nodes_per_imex_domain,
        feature_gates=ns.feature_gates,
        config_dir=ns.config_dir.rstrip("/") or "/",
        hosts_file=ns.hosts_file,
        imex_command=ns.imex_command,
        imex_ctl_command=ns.imex_ctl_command,
        kubeconfig=ns.kubeconfig,
        ready_poll_s=ns.ready_poll_seconds,
        ready_recheck_s=ns.ready_recheck_seconds,
        reload_grace_s=ns.reload_grace_seconds,
        nvml=ns.nvml,
        nvidia_driver_root=ns.nvidia_driver_root,
        log_verbosity=ns.log_verbosity,
    )
