"""Flags of the GPU kubelet plugin, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence

from apps.pluginkit import flags
from core import names

DRIVER_NAME = names.GPU_DRIVER_NAME
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER_NAME}"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    node_name: str
    namespace: str
    feature_gates: str
    cdi_root: str
    plugin_dir: str
    registry_dir: str
    health_port: int | None
    metrics_port: int | None
    # The driver root on the host (what CDI host paths start with) and where this process
    # sees it (a read-only mount in the chart's container; the same path outside one).
    nvidia_driver_root: str
    container_driver_root: str
    dev_root: str
    sysfs_root: str
    nvml: str
    kubeconfig: str | None
    boot_id_path: str
    proc_devices: str
    retry_budget_s: float
    log_verbosity: int
    stale_claim_cleanup_interval_s: float = 30.0

    @property
    def checkpoint_path(self) -> str:
        return f"{self.plugin_dir}/checkpoint.json"


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags; every flag defaults to its environment variable, then a built-in default."""
    parser = argparse.ArgumentParser(prog="gpu-kubelet-plugin")
    add = parser.add_argument
    flag = flags.env_flag
    add("--node-name", default=flag(env, "NODE_NAME", ""), help="this node (env NODE_NAME)")
    add("--namespace", default=flag(env, "NAMESPACE", "nvidia-dra-driver"))
    add("--feature-gates", default=flag(env, "FEATURE_GATES", ""), help='"A=true,B=false"')
    add("--cdi-root", default=flag(env, "CDI_ROOT", "/var/run/cdi"))
    add("--plugin-dir", default=flag(env, "PLUGIN_DIR", PLUGIN_DIR))
    add("--registry-dir", default=flag(env, "REGISTRY_DIR", REGISTRY_DIR))
    add("--health-port", default=flag(env, "HEALTH_PORT", "51516"))
    add("--metrics-port", default=flag(env, "METRICS_PORT", "0"))
    add("--nvidia-driver-root", default=flag(env, "NVIDIA_DRIVER_ROOT", "/"))
    add("--container-driver-root", default=flag(env, "CONTAINER_DRIVER_ROOT", ""),
        help="where this process sees the driver root (default: --nvidia-driver-root)")
    add("--dev-root", default=flag(env, "DEV_ROOT", "/"))
    add("--sysfs-root", default=flag(env, "SYSFS_ROOT", "/sys"))
    add("--nvml", default=flag(env, "NVML", "real"), help="real | simulated:<profile>")
    add("--kubeconfig", default=env.get("KUBECONFIG"))
    add("--boot-id-path", default=flag(env, "BOOT_ID_PATH", "/proc/sys/kernel/random/boot_id"))
    add("--proc-devices", default=flag(env, "PROC_DEVICES", "/proc/devices"),
        help="where the nvidia-caps major (MIG device nodes) is read")
    add("--retry-budget-seconds", default=flag(env, "RETRY_BUDGET_SECONDS", "30"))
    add("-v", "--log-verbosity", default=flag(env, "LOG_VERBOSITY", "2"))
    add(
        "--stale-claim-cleanup-interval-seconds",
        default=flag(env, "STALE_CLAIM_CLEANUP_INTERVAL_SECONDS", "30"),
    )
    ns = parser.parse_args(argv)
    if not ns.node_name:
        parser.error("--node-name (or env NODE_NAME) is required: the node this plugin runs on")
    cleanup_s = flags.positive_seconds(ns.stale_claim_cleanup_interval_seconds)
    if cleanup_s is None:
        parser.error(
            "--stale-claim-cleanup-interval-seconds (env STALE_CLAIM_CLEANUP_INTERVAL_SECONDS) "
            f"must be a number of seconds above 0, got {ns.stale_claim_cleanup_interval_seconds!r}"
        )
    if not (ns.nvml == "real" or ns.nvml.startswith("simulated:")):
        parser.error(f"--nvml (env NVML) must be 'real' or 'simulated:<profile>', got {ns.nvml!r}")
    return Settings(
        node_name=ns.node_name,
        namespace=ns.namespace,
        feature_gates=ns.feature_gates,
        cdi_root=ns.cdi_root,
        plugin_dir=ns.plugin_dir,
        registry_dir=ns.registry_dir,
        health_port=flags.port(ns.health_port),
        metrics_port=flags.port(ns.metrics_port),
        nvidia_driver_root=ns.nvidia_driver_root,
        container_driver_root=ns.container_driver_root or ns.nvidia_driver_root,
        dev_root=ns.dev_root,
        sysfs_root=ns.sysfs_root,
        nvml=ns.nvml,
        kubeconfig=ns.kubeconfig,
        boot_id_path=ns.boot_id_path,
        proc_devices=ns.proc_devices,
        retry_budget_s=float(ns.retry_budget_seconds),
        log_verbosity=int(ns.log_verbosity),
        stale_claim_cleanup_interval_s=cleanup_s,
    )
