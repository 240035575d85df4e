"""Builds a running GPU kubelet plugin from settings and ports (used by `__main__`, the demo)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import server as grpc_server
from adapters.kube import slices as kube_slices
from apps.gpuplugin import driver as gpu_driver
from apps.gpuplugin import settings as gpu_settings
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit.driver import PluginPorts
from apps.pluginkit.serving import Plugin, SliceResync, StaleClaimCleanup

__all__ = ["DeviceCache", "Plugin", "start_gpu_plugin"]
from core import models, names, ports
from core.gpu import cdi as gpu_cdi
from core.gpu import devices
from core.gpu import slices as gpu_slices

log = logging.getLogger(__name__)


class DeviceCache:
    """The node's devices as last discovered; each slice resync discovers them again.

    Prepares plan with the last good discovery: a failed one keeps it (and is logged), so
    a flaky NVML probe never makes a prepared GPU look gone.
    """

    def __init__(self, discovery: ports.GpuDiscovery, *, node_name: str) -> None:
        self._discovery = discovery
        self._node_name = node_name
        self._lock = threading.Lock()
        self._current = discovery.gpu_inventory()

    def current(self) -> devices.GpuInventory:
        with self._lock:
            return self._current

    def refresh(self) -> devices.GpuInventory:
        """Discover again; on change, later prepares and the next publish see the new set."""
        found = self._discovery.gpu_inventory()
        with self._lock:
            if found != self._current:
                log.info(
                    "event=gpu_devices_changed node=%s gpus=%d migs=%d vfios=%d",
                    self._node_name, len(found.gpus), len(found.migs), len(found.vfios),
                )
            self._current = found
        return found


def start_gpu_plugin(
    settings: gpu_settings.Settings,
    *,
    cluster: ports.Cluster,
    discovery: ports.GpuDiscovery,
    files: ports.DriverFilesLocator,
    gates: models.FeatureGates,
    boot_id: str,
    time_slicer: ports.TimeSlicer | None = None,
    vfio: ports.VfioBinder | None = None,
    vfio_nodes: Callable[[], Mapping[str, Sequence[devices.DeviceNode]]] | None = None,
    clock: Callable[[], float] = time.time,
) -> Plugin:
    """Discover, recover state and start serving the kubelet; slices follow registration."""
    os.makedirs(settings.plugin_dir, exist_ok=True)
    node = models.NodeFacts(
        node_name=names.NodeName(settings.node_name), clique_id="", channel_major=0,
        boot_id=boot_id,
    )
    found = DeviceCache(discovery, node_name=settings.node_name)
    driver_files = files.driver_files()
    metrics = plugin_metrics.PluginMetrics(node_name=settings.node_name)
    stopping = threading.Event()
    checkpoint_store = fs_checkpoints.FileCheckpointStore(settings.checkpoint_path)
    cdi_dir = fs_cdi.CDIDirectory(settings.cdi_root, file_name=gpu_cdi.spec_file_name)
    for path in (*checkpoint_store.remove_temp_files(), *cdi_dir.remove_temp_files()):
        log.warning("event=temp_file_removed node=%s path=%s", settings.node_name, path)
    driver = gpu_driver.GpuPluginDriver(
        ports=PluginPorts(cluster=cluster, checkpoints=checkpoint_store, cdi=cdi_dir),
        node=node,
        gates=gates,
        inventory=found.current,
        files=lambda: driver_files,
        time_slicer=time_slicer,
        vfio=vfio,
        vfio_nodes=vfio_nodes,
        clock=clock,
        metrics=metrics,
        retry_budget_s=settings.retry_budget_s,
    )
    recovered = driver.recover()
    publisher = kube_slices.SlicePublisher(
        cluster, driver=gpu_settings.DRIVER_NAME, node_name=settings.node_name
    )

    def publish() -> None:
        publisher.publish(gpu_slices.plan_gpu_devices(found.refresh(), gates=gates))

    resync = SliceResync(publish, node_name=settings.node_name)
    server = grpc_server.PluginServer(
        service=driver,
        driver_name=gpu_settings.DRIVER_NAME,
        plugin_dir=settings.plugin_dir,
        registry_dir=settings.registry_dir,
        health_port=settings.health_port,
        on_registered=resync.registered,
    )
    resync.start(stopping)
    server.start()
    threading.Thread(target=metrics.warm_up, name="metrics-warm-up", daemon=True).start()
    cleanup = StaleClaimCleanup(
        driver.clean_stale_claims,
        node_name=settings.node_name,
        interval_s=settings.stale_claim_cleanup_interval_s,
    )
    cleanup.start(stopping)
    inventory = found.current()
    log.info(
        "event=gpu_plugin_started node=%s gpus=%d migs=%d vfios=%d prepared_claims=%d "
        "dra_socket=%s",
        node.node_name, len(inventory.gpus), len(inventory.migs), len(inventory.vfios),
        len(recovered.entries), server.dra_socket_path,
    )
    return Plugin(
        driver=driver, server=server, metrics=metrics, node=node, stopping=stopping,
        slices=resync, cleanup=cleanup,
    )
