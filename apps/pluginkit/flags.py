"""The flags both kubelet plugins spell the same way (each falls back to an env variable)."""

from __future__ import annotations

from typing import Any

import click

from apps.shell import flags


class PodUID(flags.ValueType):
    name = "uid"
    what = "a pod UID (letters, digits and '-', as the downward API's metadata.uid gives it)"

    def parse(self, text: str) -> Any:
        return text if all(c.isascii() and (c.isalnum() or c == "-") for c in text) else (
            flags.INVALID)


class NvmlSpec(flags.ValueType):
    name = "nvml"
    what = "'real' or 'simulated:<profile>'"

    def parse(self, text: str) -> Any:
        return text if text == "real" or text.startswith("simulated:") else flags.INVALID


def common(*, plugin_dir: str, registry_dir: str, health_port: str) -> list[click.Parameter]:
    """Options of both plugins, in the order `--help` lists them."""
    return [
        flags.node_name(help="the node this plugin runs on (required)"),
        flags.namespace(),
        flags.feature_gates(),
        flags.option("--cdi-root", env="CDI_ROOT", default="/var/run/cdi",
                     help="where CDI spec files are written (the container runtime reads them)"),
        flags.option("--plugin-dir", env="PLUGIN_DIR", default=plugin_dir,
                     help="this plugin's directory: DRA socket and checkpoint"),
        flags.option("--registry-dir", env="REGISTRY_DIR", default=registry_dir,
                     help="the kubelet's plugin registration directory"),
        flags.health_port(default=health_port),
        flags.option("--listen-address", env="LISTEN_ADDRESS", default="0.0.0.0",
                     help="the address the health and metrics ports listen on (the pod's IP "
                     "keeps two plugin pods sharing one network apart)"),
        flags.metrics_port(),
        flags.nvidia_driver_root(
            help="where the NVIDIA driver's files are (a mount of the host's)"),
        flags.option("--nvml", env="NVML", default="real", type=NvmlSpec(),
                     help="real NVML, or simulated:<profile> for tests and demos"),
        flags.kubeconfig(),
        flags.option("--proc-devices", env="PROC_DEVICES", default="/proc/devices",
                     help="where character-device majors are read"),
        flags.option("--boot-id-path", env="BOOT_ID_PATH",
                     default="/proc/sys/kernel/random/boot_id",
                     help="the node's boot id (a reboot drops prepared claims)"),
        flags.option("--retry-budget-seconds", env="RETRY_BUDGET_SECONDS", type=flags.SECONDS,
                     default="30", help="how long a prepare retries a transient error before "
                     "it answers the kubelet (which gives up at 45 s)"),
        flags.option("--stale-claim-cleanup-interval-seconds",
                     env="STALE_CLAIM_CLEANUP_INTERVAL_SECONDS", type=flags.SECONDS, default="30",
                     help="how often checkpoint entries of deleted/deallocated claims are "
                     "looked for"),
        flags.option("--container-runtime-endpoint", env="CONTAINER_RUNTIME_ENDPOINT",
                     default="", help="the container runtime's CRI socket, asked whether it "
                     "applies our CDI specs (empty: /run/containerd/containerd.sock, then "
                     "/var/run/crio/crio.sock; 'none': do not check)"),
        flags.option("--rolling-update-pod-uid", env="ROLLING_UPDATE_POD_UID", default="",
                     type=PodUID(), help="this plugin pod's UID: name the sockets after it, so "
                     "that a new plugin pod registers and serves beside this one during a "
                     "rolling update (kubelet 1.33+); empty: the fixed socket names"),
        flags.verbosity(),
    ]


def require_node_name(values: dict[str, Any]) -> str:
    name: str = values["node_name"]
    if not name:
        flags.fail("--node-name (env NODE_NAME) is required: the node this plugin runs on")
    return name
