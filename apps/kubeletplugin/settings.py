"""Flags of the kubelet plugin, each with an environment fallback (the Helm chart sets env)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from apps.pluginkit import flags as plugin_flags
from apps.shell import flags
from core import names
from core.computedomain import binding, hostimex

# The plugin's checkpoint in its plugin dir (not `checkpoint.json`: upstream's name).
CHECKPOINT_FILE = "computedomain-plugin.checkpoint.json"

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
    # Channel isolation: slot devices this node publishes (chart imex.channels.slotsPerNode).
    channel_slots: int = 8
    # Driver-managed daemon claims (apps/kubeletplugin/daemon_claims.py): the driver root as
    # the host sees it, the imexd.cfg template ("" = built-in), the IMEX management capability
    # file ("" = beside --proc-devices).
    host_driver_root: str = "/"
    imex_daemon_config_template: str = ""
    imex_mgmt_capability_path: str = ""
    # nvidia.com/gpu.clique node label (chart kubeletPlugin.containers.computeDomains.
    # gpuCliqueLabelEnabled) and how often the clique is read again (upstream: 10 minutes).
    gpu_clique_label_enabled: bool = False
    clique_refresh_interval_s: float = 600.0
    # Gate ComputeDomainBindingConditions: how long a claim allocated here may wait for this
    # node's IMEX daemon before the plugin sets the binding failure condition.
    binding_ready_timeout_s: float = binding.DEFAULT_READY_TIMEOUT_S

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
    "compute-domain-kubelet-plugin",
    help="Kubelet DRA plugin for NVIDIA ComputeDomains (IMEX channels). Every flag falls back "
    "to the environment variable named beside it (the Helm chart sets those).",
    params=[
        *plugin_flags.common(plugin_dir=names.PLUGIN_DIR, registry_dir=names.REGISTRY_DIR,
                             health_port="51515"),
        flags.imex_mode(),
        flags.imex_isolation(),
        flags.option("--host-imex-check", env="HOST_IMEX_CHECK", type=flags.BOOLEAN,
                     default="true",
                     help="hostManaged: before a fabric node's workload gets a channel, ask the "
                     "host's nvidia-imex whether it is READY (as upstream; false turns it off)"),
        flags.option("--imex-channel-slots", env="IMEX_CHANNEL_SLOTS",
                     type=flags.WHOLE_ABOVE_0, default="8",
                     help="channel isolation: ComputeDomain pods this node can run (slot devices)"),
        flags.option("--imex-host-socket-path", "--imex-host-socket",
                     env=("IMEX_HOST_SOCKET_PATH", "IMEX_HOST_SOCKET"),
                     default=hostimex.DEFAULT_HOST_SOCKET,
                     help="hostManaged: the host nvidia-imex command socket, as a path inside "
                     "the driver root (its IMEX_CMD_UNIX_DOMAIN_PATH)"),
        flags.option("--cluster", env="CLUSTER", default="kube", type=flags.OneOf("kube"),
                     help="the cluster adapter: kube (the API server)"),
        flags.option("--host-driver-root", env="HOST_DRIVER_ROOT", default="/",
                     help="driverManaged: the driver root as the host sees it (the daemon pods "
                     "mount nvidia-imex from there)"),
        flags.option("--imex-daemon-config-template", env="IMEX_DAEMON_CONFIG_TEMPLATE",
                     default="", help="driverManaged: the imexd.cfg template file (empty: "
                     "the built-in one)"),
        flags.option("--imex-mgmt-capability-path", env="IMEX_MGMT_CAPABILITY_PATH", default="",
                     help="driverManaged: the IMEX management capability file (empty: "
                     "driver/nvidia/capabilities/fabric-imex-mgmt beside --proc-devices)"),
        flags.option("--gpu-clique-label-enabled", env="GPU_CLIQUE_LABEL_ENABLED",
                     type=flags.BOOLEAN, default="false",
                     help="set the nvidia.com/gpu.clique node label (historically set by "
                     "gpu-feature-discovery) to the node's NVLink clique"),
        flags.option("--clique-refresh-interval-seconds", env="CLIQUE_REFRESH_INTERVAL_SECONDS",
                     type=flags.SECONDS, default="600",
                     help="how often the node's NVLink clique is read again"),
        flags.option("--binding-ready-timeout-seconds", env="BINDING_READY_TIMEOUT_SECONDS",
                     type=flags.SECONDS, default=str(int(binding.DEFAULT_READY_TIMEOUT_S)),
                     help="gate ComputeDomainBindingConditions: how long a pod's claim waits "
                     "for this node's IMEX daemon before the scheduler is asked to place the "
                     "pod elsewhere"),
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
        imex_mode=values["imex_mode"],
        imex_isolation=values["imex_isolation"],
        cdi_root=values["cdi_root"],
        plugin_dir=values["plugin_dir"],
        registry_dir=values["registry_dir"],
        health_port=values["health_port"],
        metrics_port=values["metrics_port"],
        nvidia_driver_root=values["nvidia_driver_root"],
        host_imex_check=values["host_imex_check"],
        channel_slots=values["imex_channel_slots"],
        imex_host_socket=values["imex_host_socket_path"],
        nvml=values["nvml"],
        cluster=values["cluster"],
        kubeconfig=values["kubeconfig"],
        proc_devices=values["proc_devices"],
        boot_id_path=values["boot_id_path"],
        retry_budget_s=values["retry_budget_seconds"],
        log_verbosity=values["log_verbosity"],
        stale_claim_cleanup_interval_s=values["stale_claim_cleanup_interval_seconds"],
        container_runtime_endpoint=values["container_runtime_endpoint"],
        rolling_update_pod_uid=values["rolling_update_pod_uid"],
        listen_address=values["listen_address"],
        host_driver_root=values["host_driver_root"],
        imex_daemon_config_template=values["imex_daemon_config_template"],
        imex_mgmt_capability_path=values["imex_mgmt_capability_path"],
        gpu_clique_label_enabled=values["gpu_clique_label_enabled"],
        clique_refresh_interval_s=values["clique_refresh_interval_seconds"],
        binding_ready_timeout_s=values["binding_ready_timeout_seconds"],
    )
