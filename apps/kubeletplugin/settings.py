"""Flags of the kubelet plugin, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence

from apps.pluginkit import flags
from core import names


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    node_name: str
    namespace: str
    feature_gates: str
    imex_mode: str
    imex_isolation: str
    cdi_root: str
    plugin_dir: str
    registry_dir: str
    health_port: int | None
    metrics_port: int | None
    nvidia_driver_root: str
    host_imex_check: bool
    imex_host_socket: str
    nvml: str
    cluster: str
    kubeconfig: str | None
    proc_devices: str
    boot_id_path: str
    retry_budget_s: float
    log_verbosity: int
    stale_claim_cleanup_interval_s: float = 30.0
    # Channel isolation: slot devices this node publishes (chart imex.channels.slotsPerNode).
    channel_slots: int = 8

    @property
    def checkpoint_path(self) -> str:
        return f"{self.plugin_dir}/checkpoint.json"


_flag = flags.env_flag
_port = flags.port
_bool = flags.boolean
_positive_int = flags.positive_int
_positive_seconds = flags.positive_seconds


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags; every flag defaults to its environment variable, then a built-in default."""
    parser = argparse.ArgumentParser(
        prog="compute-domain-kubelet-plugin",
        description="Kubelet DRA plugin for NVIDIA ComputeDomains (IMEX channels).",
    )
    add = parser.add_argument
    add("--node-name", default=_flag(env, "NODE_NAME", ""), help="this node (env NODE_NAME)")
    add("--namespace", default=_flag(env, "NAMESPACE", "nvidia-dra-driver"))
    add("--feature-gates", default=_flag(env, "FEATURE_GATES", ""), help='"A=true,B=false"')
    add("--imex-mode", default=_flag(env, "IMEX_MODE", ""), help="driverManaged|hostManaged")
    add("--imex-isolation", default=_flag(env, "IMEX_ISOLATION", ""), help="domain|none|channel")
    add("--cdi-root", default=_flag(env, "CDI_ROOT", "/var/run/cdi"))
    add("--plugin-dir", default=_flag(env, "PLUGIN_DIR", names.PLUGIN_DIR))
    add("--registry-dir", default=_flag(env, "REGISTRY_DIR", names.REGISTRY_DIR))
    add("--health-port", default=_flag(env, "HEALTH_PORT", "51515"))
    add("--metrics-port", default=_flag(env, "METRICS_PORT", "0"))
    add("--nvidia-driver-root", default=_flag(env, "NVIDIA_DRIVER_ROOT", "/"))
    add("--host-imex-check", default=_flag(env, "HOST_IMEX_CHECK", "false"))
    add("--imex-channel-slots", default=_flag(env, "IMEX_CHANNEL_SLOTS", "8"),
        help="channel isolation: ComputeDomain pods this node can run (slot devices)")
    add(
        "--imex-host-socket",
        default=_flag(env, "IMEX_HOST_SOCKET", "/var/run/nvidia-imex/imex.sock"),
        help="host nvidia-imex control socket (mounted at the same path in the container)",
    )
    add("--nvml", default=_flag(env, "NVML", "real"), help="real | simulated:<profile>")
    add("--cluster", default=_flag(env, "CLUSTER", "kube"), help="kube")
    add("--kubeconfig", default=env.get("KUBECONFIG"))
    add("--proc-devices", default=_flag(env, "PROC_DEVICES", "/proc/devices"))
    add("--boot-id-path", default=_flag(env, "BOOT_ID_PATH", "/proc/sys/kernel/random/boot_id"))
    add("--retry-budget-seconds", default=_flag(env, "RETRY_BUDGET_SECONDS", "30"))
    add("-v", "--log-verbosity", default=_flag(env, "LOG_VERBOSITY", "2"))
    add(
        "--stale-claim-cleanup-interval-seconds",
        default=_flag(env, "STALE_CLAIM_CLEANUP_INTERVAL_SECONDS", "30"),
        help="how often checkpoint entries of deleted/deallocated claims are looked for",
    )
    ns = parser.parse_args(argv)
    if not ns.node_name:
        parser.error("--node-name (or env NODE_NAME) is required: the node this plugin runs on")
    cleanup_s = _positive_seconds(ns.stale_claim_cleanup_interval_seconds)
    if cleanup_s is None:
        parser.error(
            "--stale-claim-cleanup-interval-seconds (env STALE_CLAIM_CLEANUP_INTERVAL_SECONDS) "
            f"must be a number of seconds above 0, got {ns.stale_claim_cleanup_interval_seconds!r}"
        )
    channel_slots = _positive_int(ns.imex_channel_slots)
    if channel_slots is None:
        parser.error(
            "--imex-channel-slots (env IMEX_CHANNEL_SLOTS) must be a whole number above 0, "
            f"got {ns.imex_channel_slots!r}"
        )
    return Settings(
        node_name=ns.node_name,
        namespace=ns.namespace,
        feature_gates=ns.feature_gates,
        imex_mode=ns.imex_mode,
        imex_isolation=ns.imex_isolation,
        cdi_root=ns.cdi_root,
        plugin_dir=ns.plugin_dir,
        registry_dir=ns.registry_dir,
        health_port=_port(ns.health_port),
        metrics_port=_port(ns.metrics_port),
        nvidia_driver_root=ns.nvidia_driver_root,
        host_imex_check=_bool(ns.host_imex_check),
        channel_slots=channel_slots,
        imex_host_socket=ns.imex_host_socket,
        nvml=ns.nvml,
        cluster=ns.cluster,
        kubeconfig=ns.kubeconfig,
        proc_devices=ns.proc_devices,
        boot_id_path=ns.boot_id_path,
        retry_budget_s=float(ns.retry_budget_seconds),
        log_verbosity=int(ns.log_verbosity),
        stale_claim_cleanup_interval_s=cleanup_s,
    )

