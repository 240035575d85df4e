"""Flags of the GPU kubelet plugin, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from apps.pluginkit import flags as plugin_flags
from apps.shell import flags
from core import names

DRIVER_NAME = names.GPU_DRIVER_NAME
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER_NAME}"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"


# The plugin's checkpoint in its plugin dir (not `checkpoint.json`: upstream's name).
CHECKPOINT_FILE = "gpu-plugin.checkpoint.json"

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
    # The container runtime's CRI socket for the CDI check (apps/pluginkit/runtime_cdi_check.py):
    # "" tries the usual ones, "none" turns the check off. The flag's default is ""; "none" here
    # because settings built in-process (embedded cluster, tests) have a CDI root that no
    # runtime of the host reads.
    container_runtime_endpoint: str = "none"
    runtime_cdi_check_interval_s: float = 600.0
    # This plugin pod's UID: per-pod socket names for rolling updates ("": the fixed names).
    rolling_update_pod_uid: str = ""
    # The address the health and metrics ports listen on.
    listen_address: str = "0.0.0.0"
    # Host path of nvidia-cdi-hook for the specs' hooks; empty: found, else none (cdihook).
    nvidia_cdi_hook_path: str = ""
    # `disabled`, `memory`, `unlimited` or N, as given (checked against the gates at start:
    # `gpu.shares.parse_consumable_shares`).
    consumable_shares: str = "disabled"
    # MPS (gate MPSSupport): what the control daemons' Deployments run (apps/gpuplugin/mps_daemon).
    mps_image: str = ""
    mps_image_pull_policy: str = ""
    mps_image_pull_secrets: tuple[str, ...] = ()
    mps_service_account: str = ""
    # Mount a tmpfs on each daemon's shm directory (needs CAP_SYS_ADMIN; off in tests).
    mps_shm_tmpfs: bool = True
    # How long one prepare attempt waits for a daemon to turn Ready (then it is retried).
    mps_ready_timeout_s: float = 10.0
    # XIDs that only inform (gate NVMLDeviceHealthCheck), beside the defaults, as given
    # (checked at start: `core.gpu.health.xid_policy`).
    additional_xids_to_ignore: str = ""
    # Where the host's root file system is mounted (gate PassthroughSupport: vfio-pci is
    # loaded with `chroot <host root> modprobe`, as upstream).
    host_root: str = "/host-root"

    @property
    def mps_control_root(self) -> str:
        """Where the MPS daemons' directories are (`<plugin dir>/mps`, as upstream)."""
        return f"{self.plugin_dir}/mps"

    @property
    def checkpoint_path(self) -> str:
        # Not `checkpoint.json`: upstream's plugin keeps its own file under that name, and a
        # rollback to it must find that file as it left it (docs/operations.md).
        return f"{self.plugin_dir}/{CHECKPOINT_FILE}"

    @property
    def predecessor_checkpoint_path(self) -> str:
        """Upstream's checkpoint, and ours before it had its own name."""
        return f"{self.plugin_dir}/checkpoint.json"


COMMAND = flags.command(
    "gpu-kubelet-plugin",
    help="Kubelet DRA plugin for NVIDIA GPUs (gpu.nvidia.com: full GPUs, MIG devices, VFIO). "
    "Every flag falls back to the environment variable named beside it (the Helm chart sets "
    "those).",
    params=[
        *plugin_flags.common(plugin_dir=PLUGIN_DIR, registry_dir=REGISTRY_DIR,
                             health_port="51516"),
        flags.option("--container-driver-root", env="CONTAINER_DRIVER_ROOT", default="",
                     help="where this process sees the driver root (empty: "
                     "--nvidia-driver-root)"),
        flags.option("--dev-root", env="DEV_ROOT", default="/",
                     help="where the host's /dev is seen (device nodes of GPUs and MIG devices)"),
        flags.option("--sysfs-root", env="SYSFS_ROOT", default="/sys",
                     help="where the host's /sys is seen (VFIO passthrough)"),
        flags.option("--host-root", env="HOST_ROOT", default="/host-root",
                     help="where the host's root file system is mounted (gate "
                     "PassthroughSupport: vfio-pci is loaded with chroot <host root> "
                     "modprobe; must exist then)"),
        flags.option("--nvidia-cdi-hook-path", env="NVIDIA_CDI_HOOK_PATH", default="",
                     help="absolute host path of nvidia-cdi-hook, named in the CDI specs' "
                     "hooks (empty: the image's copy, else the driver root's "
                     "/usr/bin/nvidia-cdi-hook, else no hooks)"),
        flags.option("--consumable-shares", env="CONSUMABLE_SHARES", default="disabled",
                     help="share GPUs by consumable capacity (gate ConsumableShares): "
                     "'disabled', 'memory', 'unlimited' or a positive whole number of shares "
                     "per GPU"),
        flags.option("--mps-image", env="MPS_IMAGE", default="",
                     help="image of the MPS control daemons' Deployments (gate MPSSupport; "
                     "the chart sets the plugin's own)"),
        flags.option("--mps-image-pull-policy", env="MPS_IMAGE_PULL_POLICY", default="",
                     help="their imagePullPolicy (empty: the cluster's default)"),
        flags.option("--mps-image-pull-secrets", env="MPS_IMAGE_PULL_SECRETS", default="",
                     help="their imagePullSecrets, comma-separated names"),
        flags.option("--mps-service-account", env="MPS_SERVICE_ACCOUNT", default="",
                     help="their ServiceAccount (empty: the namespace's default)"),
        flags.option("--mps-shm-tmpfs", env="MPS_SHM_TMPFS", type=flags.BOOLEAN, default="true",
                     help="mount a tmpfs on each MPS daemon's shm directory (as upstream)"),
        flags.option("--mps-ready-timeout-seconds", env="MPS_READY_TIMEOUT_SECONDS",
                     type=flags.SECONDS, default="10",
                     help="how long one prepare attempt waits for an MPS daemon to be Ready"),
        flags.option("--additional-xids-to-ignore", env="ADDITIONAL_XIDS_TO_IGNORE", default="",
                     help="comma-separated XIDs that only inform (taint effect None) besides "
                     "13,31,43,45,68,109 (gate NVMLDeviceHealthCheck)"),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags; every flag defaults to its environment variable, then a built-in default.

    Bad input exits 2 with one `error:` line naming the flag and its env var.
    """
    values = flags.parse(COMMAND, argv, env)
    return Settings(
        node_name=plugin_flags.require_node_name(values),
        namespace=values["namespace"],
        feature_gates=values["feature_gates"],
        cdi_root=values["cdi_root"],
        plugin_dir=values["plugin_dir"],
        registry_dir=values["registry_dir"],
        health_port=values["health_port"],
        metrics_port=values["metrics_port"],
        nvidia_driver_root=values["nvidia_driver_root"],
        container_driver_root=values["container_driver_root"] or values["nvidia_driver_root"],
        dev_root=values["dev_root"],
        sysfs_root=values["sysfs_root"],
        nvml=values["nvml"],
        kubeconfig=values["kubeconfig"],
        boot_id_path=values["boot_id_path"],
        proc_devices=values["proc_devices"],
        retry_budget_s=values["retry_budget_seconds"],
        log_verbosity=values["log_verbosity"],
        stale_claim_cleanup_interval_s=values["stale_claim_cleanup_interval_seconds"],
        container_runtime_endpoint=values["container_runtime_endpoint"],
        rolling_update_pod_uid=values["rolling_update_pod_uid"],
        listen_address=values["listen_address"],
        nvidia_cdi_hook_path=values["nvidia_cdi_hook_path"],
        consumable_shares=values["consumable_shares"],
        mps_image=values["mps_image"],
        mps_image_pull_policy=values["mps_image_pull_policy"],
        mps_image_pull_secrets=tuple(
            n.strip() for n in values["mps_image_pull_secrets"].split(",") if n.strip()
        ),
        mps_service_account=values["mps_service_account"],
        mps_shm_tmpfs=values["mps_shm_tmpfs"],
        mps_ready_timeout_s=values["mps_ready_timeout_seconds"],
        additional_xids_to_ignore=values["additional_xids_to_ignore"],
        host_root=values["host_root"],
    )
