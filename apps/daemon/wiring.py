"""Wiring of `compute-domain-daemon run`: gates, inputs, cluster, registry, supervisor, probe."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from adapters.fs import fabric_health_file
from adapters.imex import ctl as imex_ctl
from adapters.imex import supervisor as imex_supervisor
from adapters.kube import cluster as kube_cluster
from adapters.nvml import inventory as nvml_inventory
from apps.daemon import fabric as daemon_fabric
from apps.daemon import registry as daemon_registry
from apps.daemon import runner as daemon_runner
from apps.daemon import settings as daemon_settings
from core import errors, gates, models, ports
from core.computedomain import membership

log = logging.getLogger(__name__)


def connect(settings: daemon_settings.Settings) -> ports.Cluster:
    """The API server from --kubeconfig, or the pod's service account (ConfigError if neither)."""
    return kube_cluster.KubeCluster.from_config(settings.kubeconfig)


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


def fabric_inventory(settings: daemon_settings.Settings) -> ports.DeviceInventory:
    """Where the node's fabric records come from (`--nvml`, `--nvidia-driver-root`);
    ConfigError for a bad `--nvml` (constructing the real one touches nothing)."""
    return nvml_inventory.inventory_from_spec(
        settings.nvml, node_name=settings.node_name, driver_root=settings.nvidia_driver_root
    )


def run_daemon(
    settings: daemon_settings.Settings,
    *,
    cluster: ports.Cluster,
    feature_gates: models.FeatureGates,
    stop: threading.Event,
    inventory: ports.DeviceInventory,
) -> int:
    """Wire registry, supervisor, probe and fabric check for one daemon; run it until `stop`."""
    store = (
        membership.Store.CLIQUE
        if feature_gates.enabled(gates.COMPUTE_DOMAIN_CLIQUES)
        else membership.Store.STATUS
    )
    if store is membership.Store.CLIQUE and not (settings.pod_name and settings.pod_uid):
        log.warning(
            "event=no_pod_identity action=clique_without_owner detail=%r",
            "POD_NAME/POD_UID are not set (the DaemonSet sets them from metadata.name/uid): "
            "this daemon's pod is not made an owner of its ComputeDomainClique, so the garbage "
            "collector cannot delete the clique with the daemon pods",
        )
    registry = daemon_registry.PeerRegistry(
        cluster,
        store=store,
        me=membership.Identity(
            node_name=settings.node_name,
            ip_address=settings.pod_ip,
            clique_id=settings.clique_id or "",
            pod_name=settings.pod_name,
            pod_uid=settings.pod_uid,
        ),
        domain_uid=settings.domain_uid,
        domain_name=settings.domain_name,
        domain_namespace=settings.domain_namespace,
        namespace=settings.namespace,
        max_nodes=settings.max_nodes,
    )
    wake: list[Callable[[], None]] = []  # NB: the runner's, once it exists
    fabric = daemon_fabric.FabricMonitor(
        read=inventory.fabric_records, node_name=settings.node_name,
        on_change=lambda: _call_each(wake),
        interval_s=settings.fabric_check_s,
        # NB: the kubelet plugin's judgment, in /imexd: preferred, NVML only without it.
        read_plugin=lambda: fabric_health_file.read(settings.config_dir),
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
        reload_grace_s=settings.reload_grace_s,
        fabric=fabric.health,
    )
    wake.append(runner.wake)
    fabric.start(stop)
    return runner.run(stop)


def _call_each(calls: list[Callable[[], None]]) -> None:
    for call in calls:
        call()
