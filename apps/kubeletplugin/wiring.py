"""Builds a running kubelet plugin from settings and ports (used by `__main__` and the demo)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import tenacity

from adapters.kube import slices as kube_slices
from adapters.nvml import imexctl
from adapters.nvml import real as nvml_real
from apps.kubeletplugin import binding_watch, clique_refresh, fabric_watch
from apps.kubeletplugin import daemon_claims as plugin_daemon_claims
from apps.kubeletplugin import devices as plugin_devices
from apps.kubeletplugin import domains as plugin_domains
from apps.kubeletplugin import driver as plugin_driver
from apps.kubeletplugin import settings as plugin_settings
from apps.pluginkit import device_health as plugin_device_health
from apps.pluginkit import driver as claim_driver
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit import serving
from apps.pluginkit.serving import Plugin
from core import errors, models, names, ports, procdevices
from core.computedomain import binding, cliques, driver_version, node_facts

log = logging.getLogger(__name__)


# Probe failures (NVML crashed or hung in the child) tolerated before the gate decides.
NVML_PROBE_ATTEMPTS = 3


def read_node_facts(
    *,
    node_name: str,
    files: ports.NodeFiles,
    inventory: ports.DeviceInventory,
    crash_on_fabric_errors: bool = True,
    single_node_nvlink: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    probe_attempts: int = NVML_PROBE_ATTEMPTS,
) -> node_facts.ImexNodeFacts:
    """Channel major, boot ID and NVLink clique of this node.

    A missing channel major is a ConfigError (refuse to start). A failed NVML probe (crash,
    hang) is retried `probe_attempts` times with capped backoff. With gate
    CrashOnNVLinkFabricErrors on (the default) a fabric error stops the plugin, as upstream's
    does: a GPU whose registration is incomplete or failed, GPUs that disagree about their
    clique, a probe that keeps failing, or no NVML at all. With the gate off, GPUs whose
    registration is incomplete or failed are skipped (`cliques.clique_id_from_fabric`) and
    the other errors leave the node without a clique (host-managed prepares then fail
    naming it). `single_node_nvlink` (gate FabricManagerPartitioning on a node with an
    NVSwitch fabric): GPUs whose registration is still forming are skipped either way, since
    Fabric Manager registers them only when a partition holding them is activated.
    """
    major = procdevices.imex_channel_major(files.proc_devices())
    probe_failures = 0

    def clique_id_now() -> str:
        nonlocal probe_failures
        try:
            records = inventory.fabric_records()
        except nvml_real.NvmlProbeFailed as exc:
            probe_failures += 1
            if probe_failures >= probe_attempts:
                raise
            # A one-off timeout or crash of the probe child: try again, with backoff.
            raise errors.RetryableError(exc.message) from exc
        return cliques.clique_id_from_fabric(
            records, strict=crash_on_fabric_errors, forming_ok=single_node_nvlink
        )

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(errors.RetryableError),
        wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=30.0, jitter=0.5),
        sleep=sleep,
        before_sleep=lambda state: log.warning(
            "event=nvml_probe_retry node=%s attempt=%d error=%r",
            node_name, state.attempt_number,
            getattr(state.outcome.exception() if state.outcome else None, "message", ""),
        ),
        reraise=True,
    )
    try:
        # NB: only a failed probe raises RetryableError here; a fabric that is still
        # forming is a decision of the gate, taken by clique_id_from_fabric.
        clique_id = retrying(clique_id_now)
    except (errors.PermanentError, nvml_real.NvmlError) as exc:
        # Decision: NvmlUnavailable (no NVML library/driver visible to the plugin) is treated
        # like a fabric error. With the gate on (default) the plugin exits with the message,
        # since on a GPU node it is almost always a missing driver-root mount that a restart
        # with the right chart values fixes; with the gate off the node runs without a clique.
        if crash_on_fabric_errors:
            raise
        event = (
            "nvml_unavailable" if isinstance(exc, nvml_real.NvmlUnavailable)
            else "nvml_probe_failed" if isinstance(exc, nvml_real.NvmlProbeFailed)
            else "nvlink_fabric_error"
        )
        log.error(
            "event=%s node=%s error=%r action=continuing_without_clique "
            "(CrashOnNVLinkFabricErrors=false)", event, node_name, exc.message,
        )
        clique_id = ""
    return node_facts.ImexNodeFacts(
        node_name=names.NodeName(node_name),
        clique_id=clique_id,
        channel_major=major,
        boot_id=files.boot_id(),
    )


def check_driver_version(
    config: models.DriverConfig, *, inventory: ports.DeviceInventory, node_name: str
) -> None:
    """Refuse to start (ConfigError, or the NvmlError that hid the version) when the node's
    driver is too old for the gates this install runs with, as upstream's plugin does."""
    if not driver_version.needs_driver_check(config):
        return
    found = inventory.driver_version()
    driver_version.check_driver_version(config, driver_version=found)
    log.info("event=driver_version_checked node=%s driver=%s minimum=%s", node_name, found,
             driver_version.IMEX_DAEMONS_WITH_DNS_NAMES_MIN_DRIVER)


def start_plugin(
    settings: plugin_settings.Settings,
    *,
    config: models.DriverConfig,
    cluster: ports.Cluster,
    node: node_facts.ImexNodeFacts,
    clock: Callable[[], float] = time.time,
    probe_clique: plugin_devices.CliqueProbe | None = None,
    probe_fabric: fabric_watch.FabricProbe | None = None,
) -> Plugin[node_facts.ImexNodeFacts]:
    """Recover state and start serving the kubelet; slices are published once it registers us.

    `probe_clique` re-reads the clique every `settings.clique_refresh_interval_s` (and at
    each slice resync of a host-managed node without one). `probe_fabric` (the fabric records)
    is judged at start and on that interval too: while the fabric is degraded, every published
    device is tainted `compute-domain.nvidia.com/fabric-degraded` and Unhealthy in the
    kubelet's health stream (`fabric_watch`), and a driver-managed node's IMEX daemons read
    it from their domain directory (`fabric_watch.DomainFabricFiles`). Without it every device
    is reported Healthy.
    """
    os.makedirs(settings.plugin_dir, exist_ok=True)
    node = plugin_daemon_claims.with_daemon_facts(node, settings=settings, config=config)
    metrics = plugin_metrics.PluginMetrics(node_name=settings.node_name)
    stopping = threading.Event()
    domains = plugin_domains.DomainCache(cluster)
    # NB: not waited for: the API client may still be loading (a miss reads through anyway).
    domains.start(stopping)
    probe = None
    # NB: only fabric nodes reach the probe: host-managed prepare refuses a node without
    # a clique before any CDI spec is planned.
    if config.host_managed and config.host_imex_check:
        probe = imexctl.HostIMEXProbe(
            driver_root=settings.nvidia_driver_root, socket_path=settings.imex_host_socket
        ).check
    republish: list[Callable[[], None]] = []  # NB: the plugin's slice resync, once serving
    fabric_files: fabric_watch.DomainFabricFiles | None = None
    fabric = (
        fabric_watch.FabricWatch(
            node_name=settings.node_name, probe=probe_fabric, cluster=cluster,
            on_change=lambda: _call_each(republish),
            on_judgment=lambda: fabric_files.sync_all() if fabric_files is not None else None,
        )
        if probe_fabric is not None else None
    )
    if fabric is not None and node.daemon_config_root and not config.host_managed:
        # The driver-managed daemons' view of the fabric (their pods have no NVML).
        fabric_files = fabric_watch.DomainFabricFiles(
            root=node.daemon_config_root, judgment=fabric.judgment)
    checkpoint_store, cdi_dir = serving.open_stores(settings)
    driver = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=cluster,
            checkpoints=checkpoint_store,
            predecessor=serving.open_predecessor(settings, checkpoint_store),
            cdi=plugin_daemon_claims.cdi_store(
                cdi_dir, node=node, config=config,
                template_path=settings.imex_daemon_config_template,
                on_prepared=fabric_files.prepared if fabric_files is not None else None,
            ),
        ),
        node=node,
        config=config,
        clock=clock,
        metrics=metrics,
        host_imex_probe=probe,
        retry_budget_s=settings.retry_budget_s,
        claim_status=True,
        domains=domains.view,
    )
    recovered = driver.recover()
    publisher = kube_slices.SlicePublisher(
        cluster, driver=names.DRIVER_NAME, node_name=settings.node_name
    )
    offered = plugin_devices.NodeDevices(
        driver=driver, config=config, cluster=cluster, probe_clique=probe_clique
    )
    if fabric is not None:
        fabric.check()  # NB: before the first publish, so a degraded node never goes out bare
        if fabric_files is not None:
            fabric_files.sync_all(starting=True)  # NB: even unchanged: a file may be stale
    health = plugin_device_health.PublishedDeviceHealth(
        pool=settings.node_name,
        monitor=fabric.observations if fabric is not None else None,
    )

    def publish() -> None:
        devices = offered.current()
        publisher.publish(fabric.tainted(devices) if fabric is not None else devices)
        health.published(devices)

    plugin = serving.serve(
        driver, settings, driver_name=names.DRIVER_NAME,
        publish=publish, metrics=metrics, stopping=stopping, health=health,
        check=serving.runtime_check(settings, cluster),
    )
    if binding.uses_binding_conditions(config):
        binding_watch.BindingWatch(
            cluster, node_name=settings.node_name, domains=domains,
            timeout_s=settings.binding_ready_timeout_s,
        ).start(stopping)
    if plugin.server.health_streams is not None:
        health.on_change = plugin.server.health_streams.notify
    if fabric is not None:
        republish += [plugin.slices.republish, health.observed_changed]
    if probe_clique is not None or fabric is not None:
        refresh = clique_refresh.CliqueRefresh(
            driver=driver, cluster=cluster, probe_clique=probe_clique,
            label_enabled=settings.gpu_clique_label_enabled,
            interval_s=settings.clique_refresh_interval_s, fabric=fabric,
        )
        refresh.start(stopping)
        plugin.on_last_stop.append(refresh.stop)
    log.info(
        "event=plugin_started node=%s mode=%s isolation=%s clique=%r channel_major=%d "
        "prepared_claims=%d fabric_healthy=%s dra_socket=%s",
        node.node_name, config.mode.value, config.isolation.value, node.clique_id,
        node.channel_major, len(recovered.entries),
        fabric.health.healthy if fabric is not None else "unchecked",
        plugin.server.dra_socket_path,
    )
    return plugin


def _call_each(calls: Sequence[Callable[[], None]]) -> None:
    for call in calls:
        call()
