"""Builds a running kubelet plugin from settings and ports (used by `__main__` and the demo)."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable

import tenacity

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import server as grpc_server
from adapters.kube import slices as kube_slices
from adapters.nvml import imexctl
from apps.kubeletplugin import domains as plugin_domains
from apps.kubeletplugin import driver as plugin_driver
from apps.kubeletplugin import metrics as plugin_metrics
from apps.kubeletplugin import settings as plugin_settings
from core import cliques, errors, models, names, ports, procdevices, slices

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plugin:
    driver: plugin_driver.PluginDriver
    server: grpc_server.PluginServer
    metrics: plugin_metrics.PluginMetrics
    node: models.NodeFacts
    stopping: threading.Event

    def stop(self, grace_s: float = 2.0) -> None:
        self.stopping.set()
        self.server.stop(grace_s)


def read_node_facts(
    *,
    node_name: str,
    files: ports.NodeFiles,
    inventory: ports.DeviceInventory,
    crash_on_fabric_errors: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> models.NodeFacts:
    """Channel major, boot ID and NVLink clique of this node.

    A missing channel major is a ConfigError (refuse to start); a fabric that is still
    coming up is retried with capped backoff instead of crash-looping. A fabric error (GPUs
    disagree) stops the plugin unless gate CrashOnNVLinkFabricErrors is off, in which case
    the node runs without a clique (host-managed prepares then fail naming it).
    """
    major = procdevices.imex_channel_major(files.proc_devices())
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(errors.RetryableError),
        wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=30.0, jitter=0.5),
        sleep=sleep,
        before_sleep=lambda state: log.warning(
            "event=fabric_not_ready node=%s attempt=%d error=%r",
            node_name, state.attempt_number,
            getattr(state.outcome.exception() if state.outcome else None, "message", ""),
        ),
        reraise=True,
    )
    try:
        # NB: ask NVML again on every attempt; the fabric state is what we are waiting for.
        clique_id = retrying(lambda: cliques.clique_id_from_fabric(inventory.fabric_records()))
    except errors.PermanentError as exc:
        if crash_on_fabric_errors:
            raise
        log.error(
            "event=nvlink_fabric_error node=%s error=%r action=continuing_without_clique "
            "(CrashOnNVLinkFabricErrors=false)", node_name, exc.message,
        )
        clique_id = ""
    return models.NodeFacts(
        node_name=names.NodeName(node_name),
        clique_id=clique_id,
        channel_major=major,
        boot_id=files.boot_id(),
    )


def start_plugin(
    settings: plugin_settings.Settings,
    *,
    config: models.DriverConfig,
    cluster: ports.Cluster,
    node: models.NodeFacts,
    clock: Callable[[], float] = time.time,
) -> Plugin:
    """Recover state, publish the node's devices, and start serving the kubelet."""
    os.makedirs(settings.plugin_dir, exist_ok=True)
    metrics = plugin_metrics.PluginMetrics(node_name=settings.node_name)
    stopping = threading.Event()
    domains = plugin_domains.DomainCache(cluster)
    domains.start(stopping)
    domains.wait_synced(timeout_s=10)  # a miss still reads through, so never fatal
    probe = None
    if config.host_managed and config.host_imex_check:
        probe = imexctl.HostIMEXProbe(
            driver_root=settings.nvidia_driver_root, socket_path=settings.imex_host_socket
        ).check
    driver = plugin_driver.PluginDriver(
        ports=plugin_driver.PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node,
        config=config,
        clock=clock,
        metrics=metrics,
        host_imex_probe=probe,
        retry_budget_s=settings.retry_budget_s,
        domains=domains.view,
    )
    recovered = driver.recover()
    kube_slices.SlicePublisher(
        cluster, driver=names.DRIVER_NAME, node_name=settings.node_name
    ).publish(slices.plan_slice_devices(config))
    server = grpc_server.PluginServer(
        service=driver,
        driver_name=names.DRIVER_NAME,
        plugin_dir=settings.plugin_dir,
        registry_dir=settings.registry_dir,
        health_port=settings.health_port,
    )
    server.start()
    log.info(
        "event=plugin_started node=%s mode=%s isolation=%s clique=%r channel_major=%d "
        "prepared_claims=%d dra_socket=%s",
        node.node_name, config.mode.value, config.isolation.value, node.clique_id,
        node.channel_major, len(recovered.entries), server.dra_socket_path,
    )
    return Plugin(driver=driver, server=server, metrics=metrics, node=node, stopping=stopping)
