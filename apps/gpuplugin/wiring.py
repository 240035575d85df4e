"""Builds a running GPU kubelet plugin from settings and ports (used by `__main__`, the demo)."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from adapters.fs import device_metadata as fs_device_metadata
from adapters.fs import health_state
from adapters.fs import vfio as fs_vfio
from adapters.kube import slices as kube_slices
from apps.gpuplugin import driver as gpu_driver
from apps.gpuplugin import health_monitor, served_claims
from apps.gpuplugin import settings as gpu_settings
from apps.pluginkit import device_health as plugin_device_health
from apps.pluginkit import driver as claim_driver
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit import serving
from apps.pluginkit.serving import Plugin

__all__ = ["DeviceCache", "Plugin", "WithVfio", "start_gpu_plugin", "vfio_nodes"]
from core import errors, models, names, ports
from core import gates as feature_gates
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records, devices, fm_partitions, partitions
from core.gpu import health as gpu_health
from core.gpu import passthrough as gpu_passthrough
from core.gpu import shares as gpu_shares
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


class WithVfio:
    """NVML's GPUs and MIG devices plus the VFIO functions sysfs shows (PassthroughSupport)."""

    def __init__(self, gpus: ports.GpuDiscovery, vfio: fs_vfio.SysfsVfio) -> None:
        self._gpus = gpus
        self._vfio = vfio

    def gpu_inventory(self) -> devices.GpuInventory:
        found = self._gpus.gpu_inventory()
        return devices.GpuInventory(
            gpus=found.gpus, migs=found.migs,
            vfios=gpu_passthrough.with_parents(self._vfio.vfio_devices(), found.gpus),
        )


def vfio_nodes(vfio: fs_vfio.SysfsVfio) -> dict[str, tuple[devices.DeviceNode, ...]]:
    """The vfio nodes of each function bound to vfio-pci now, by PCI address."""
    nodes: dict[str, tuple[devices.DeviceNode, ...]] = {}
    for function in vfio.vfio_devices():
        try:
            # NB: the group node alone, as upstream: the IOMMU API node only where the
            # claim's VfioDeviceConfig asks for it (`enableAPIDevice`), spec-wide.
            nodes[function.pci_bus_id] = vfio.device_nodes(function.pci_bus_id)
        except errors.DriverError as exc:  # not bound to vfio-pci yet: the planner says so
            log.debug("event=vfio_nodes_unknown pci_bus_id=%s error=%r", function.pci_bus_id,
                      exc.message)
    return nodes


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
    cdi_hook_path: str = "",
    consumable: gpu_shares.ConsumableShares = gpu_shares.DISABLED,
    compute_mode: ports.ComputeModeSetter | None = None,
    mps_daemons: ports.MpsDaemons | None = None,
    mig: ports.MigPartitioner | None = None,
    health_events: ports.GpuHealthEvents | None = None,
    xid_policy: gpu_health.XidPolicy = gpu_health.DEFAULT_XID_POLICY,
    fabric: ports.FabricManager | None = None,
    metadata: ports.DeviceMetadataStore | None = None,
    iommufd: ports.IommufdNodes | None = None,
) -> Plugin[models.NodeFacts]:
    """Discover, recover state and start serving the kubelet; slices follow registration.

    `cdi_hook_path` (a host path of nvidia-cdi-hook) puts the toolkit's hooks into every
    claim's CDI spec; empty, none. `consumable` (`--consumable-shares`) publishes full GPUs
    and MIG devices for several claims at once. `mps_daemons` (gate MPSSupport) runs MPS
    claims' control daemons, their files under `settings.mps_control_root`; None refuses MPS
    claims. `mig` (gate DynamicMIG) creates MIG devices at prepare: the plugin then publishes
    every partition a GPU could hold (`core.gpu.partitions`, laid out for the API server's
    version, read through `cluster`, a `ports.ServerVersion`, at the first publish) and,
    before serving, destroys the MIG devices no completed claim holds. `health_events` (gate
    NVMLDeviceHealthCheck) are watched from the start: each device they find sick is tainted
    in the published slice (`core.gpu.health`, `xid_policy`) and reported in the kubelet's
    health stream; the taints survive a plugin restart within one boot of the node.
    `fabric` (gate FabricManagerPartitioning, on a node with an NVSwitch fabric) is read once
    at start: every GPU with a module id publishes its partitions (`partition<size>`), each
    prepare activates the partition its GPUs form (refusing GPUs that form none) and each
    unprepare deactivates it; before serving, active partitions no claim records are
    deactivated. Gate PassthroughSupport: the slice leaves out the siblings of prepared GPUs and
    passthrough functions (`core.gpu.passthrough`, read from the checkpoint at each publish)
    and is published again after every prepare and unprepare. Gate DeviceMetadata: each
    prepared claim gets its metadata files (`metadata`; by default under the plugin dir and
    CDI root, `adapters.fs.device_metadata`). `iommufd` finds the iommufd node of a function
    bound for a `PreferIommuFD` claim (the spec is written after the bind).
    """
    dynamic_mig = mig is not None and gates.enabled(feature_gates.DYNAMIC_MIG)
    if dynamic_mig and not isinstance(cluster, ports.ServerVersion):
        raise TypeError("dynamic MIG needs a cluster port that tells its server version")
    layouts: list[partitions.SliceLayout] = []  # NB: read once, at the first publish
    os.makedirs(settings.plugin_dir, exist_ok=True)
    node = models.NodeFacts(node_name=names.NodeName(settings.node_name), boot_id=boot_id)
    found = DeviceCache(discovery, node_name=settings.node_name)
    fabric_partitions = _fabric_partitions(fabric, gates=gates, node_name=settings.node_name)
    driver_files = dataclasses.replace(files.driver_files(), cdi_hook_path=cdi_hook_path)
    metrics = plugin_metrics.PluginMetrics(
        node_name=settings.node_name, driver=names.GPU_DRIVER_NAME,
        device_type_of=checkpoint_records.prepared_device_type,
        device_types=checkpoint_records.PREPARED_DEVICE_TYPES,
    )
    stopping = threading.Event()
    checkpoint_store, cdi_dir = serving.open_stores(
        settings, cdi_file_name=gpu_cdi.spec_file_name
    )
    driver = gpu_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=cluster, checkpoints=checkpoint_store, cdi=cdi_dir,
            predecessor=serving.open_predecessor(settings, checkpoint_store),
        ),
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
        claim_status=True,
        compute_mode=compute_mode,
        mps_daemons=mps_daemons,
        mps_root=settings.mps_control_root,
        mig=mig if dynamic_mig else None,
        fabric=fabric if fabric_partitions is not None else None,
        fabric_partitions=fabric_partitions,
        iommufd=iommufd,
    )
    passthrough = gates.enabled(feature_gates.PASSTHROUGH_SUPPORT)
    list_attributes = gates.enabled(feature_gates.DRA_LIST_TYPE_ATTRIBUTES)
    if metadata is None and gates.enabled(feature_gates.DEVICE_METADATA):
        metadata = fs_device_metadata.MetadataFiles(
            driver=gpu_settings.DRIVER_NAME, plugin_dir=settings.plugin_dir,
            cdi_root=settings.cdi_root,
        )
    recovered = driver.recover()
    if dynamic_mig:
        found.refresh()  # NB: without the MIG devices the recovery destroyed
    publisher = kube_slices.SlicePublisher(
        cluster, driver=gpu_settings.DRIVER_NAME, node_name=settings.node_name
    )

    republish: list[Callable[[], None]] = []  # NB: the plugin's slice resync, once serving
    monitor = (
        health_monitor.GpuHealthMonitor(
            events=health_events, boot_id=boot_id, policy=xid_policy,
            store=health_state.HealthStateFile(
                os.path.join(settings.plugin_dir, health_state.FILE_NAME)),
            placements=lambda: gpu_health.placements(found.current()),
            on_change=lambda: _call_each(republish),
        )
        if health_events is not None else None
    )
    health = plugin_device_health.PublishedDeviceHealth(
        pool=settings.node_name,
        monitor=monitor.observations if monitor is not None else None,
    )
    effect_none: list[bool] = []  # NB: read once, at the first publish of a tainted device

    def tainted(devices: Sequence[models.JSONObject]) -> Sequence[models.JSONObject]:
        if monitor is None:
            return devices
        state = monitor.state
        if not state.taints:
            return devices
        if not effect_none:
            effect_none.append(_effect_none_supported(cluster))
        return gpu_health.with_taints(devices, state, effect_none=effect_none[0])

    def hidden(inventory: devices.GpuInventory) -> frozenset[str]:
        if not passthrough:
            return frozenset()
        with checkpoint_store.locked():
            current = driver.load_checkpoint()
        return gpu_passthrough.hidden_siblings(
            inventory, gpu_passthrough.held_devices(current)
        )

    publishing = threading.Lock()  # NB: the resync thread and kubelet calls both publish

    def publish() -> None:
        with publishing:
            publish_unlocked()

    def publish_unlocked() -> None:
        if dynamic_mig:
            assert isinstance(cluster, ports.ServerVersion)
            layouts[:] = layouts or [_slice_layout(cluster)]
            contents = partitions.plan_partitioned_slices(
                found.refresh(), layout=layouts[0], consumable=consumable,
                fabric_partitions=fabric_partitions,
            )
            if list_attributes:
                contents = tuple(
                    dataclasses.replace(content, devices=tuple(
                        gpu_slices.with_list_numa_node(d) for d in content.devices
                    ))
                    for content in contents
                )
            publisher.publish_built(lambda generation, node_uid: (
                partitions.build_partitioned_slices(
                    contents, node_name=settings.node_name, generation=generation,
                    node_uid=node_uid,
                )
            ))
            health.published([d for content in contents for d in content.devices])
            return
        inventory = found.refresh()
        devices = gpu_slices.plan_gpu_devices(
            inventory, gates=gates, consumable=consumable,
            fabric_partitions=fabric_partitions, hidden=hidden(inventory),
        )
        publisher.publish(tainted(devices))
        health.published(devices)

    resync: list[serving.SliceResync] = []  # NB: the plugin's, once serving

    def publish_after_call() -> None:
        """Publish now, so the answer the kubelet gets is never ahead of the slice; on
        failure the resync loop publishes again."""
        try:
            publish()
        except Exception:
            for loop in resync:
                loop.republish()
            raise

    def vfio_device(vfio: devices.VfioDeviceInfo) -> models.JSONObject:
        built = gpu_slices.vfio_device(vfio)
        return gpu_slices.with_list_numa_node(built) if list_attributes else built

    service = served_claims.GpuPluginService(
        driver, cluster=cluster, driver_name=gpu_settings.DRIVER_NAME,
        plugin_dir=settings.plugin_dir, metadata=metadata,
        attributes=lambda: served_claims.vfio_attributes(found.current(), vfio_device),
        after_call=publish_after_call if passthrough else None,
    )
    def clean_stale_claims() -> None:
        service.after_stale_cleanup(driver.clean_stale_claims())

    plugin = serving.serve(
        driver, settings, driver_name=gpu_settings.DRIVER_NAME, publish=publish,
        metrics=metrics, stopping=stopping, health=health,
        check=serving.runtime_check(settings, cluster), service=service,
        clean=clean_stale_claims,
    )
    resync.append(plugin.slices)
    if plugin.server.health_streams is not None:
        health.on_change = plugin.server.health_streams.notify
    if monitor is not None:
        republish += [plugin.slices.republish, health.observed_changed]
        monitor.start()
        plugin.on_stop.append(monitor.stop)
    inventory = found.current()
    log.info(
        "event=gpu_plugin_started node=%s gpus=%d migs=%d vfios=%d prepared_claims=%d "
        "consumable_shares=%s dra_socket=%s",
        node.node_name, len(inventory.gpus), len(inventory.migs), len(inventory.vfios),
        len(recovered.entries), consumable, plugin.server.dra_socket_path,
    )
    return plugin


def _fabric_partitions(
    fabric: ports.FabricManager | None, *, gates: models.FeatureGates, node_name: str
) -> tuple[fm_partitions.Partition, ...] | None:
    """Fabric Manager's partitions, read once: which GPUs form a partition is fixed by the
    baseboard, only activation changes (and the published attributes do not show it)."""
    if fabric is None or not gates.enabled(feature_gates.FABRIC_MANAGER_PARTITIONING):
        return None
    found = fm_partitions.check_partitions(fabric.partitions())
    log.info(
        "event=fm_partitions_read node=%s partitions=%d sizes=%s active=%s", node_name,
        len(found), ",".join(str(n) for n in sorted({p.size for p in found})),
        ",".join(str(p.partition_id) for p in found if p.active) or "-",
    )
    return found


def _call_each(calls: Sequence[Callable[[], None]]) -> None:
    for call in calls:
        call()


def _effect_none_supported(cluster: ports.Cluster) -> bool:
    """Whether the API server takes taint effect `None`; without a version to read, assume
    not (such taints only inform: leaving them out never makes a slice be refused)."""
    if not isinstance(cluster, ports.ServerVersion):
        return False
    version = cluster.server_version()
    supported = gpu_health.effect_none_supported(version)
    log.info("event=device_taint_effects server_version=%s effect_none=%s", version, supported)
    return supported


def _slice_layout(cluster: ports.ServerVersion) -> partitions.SliceLayout:
    """Where dynamic MIG's counters go, for the API server's version."""
    version = cluster.server_version()
    try:
        layout = partitions.layout_for(version)
    except ValueError as exc:
        raise errors.ClusterError(f"GET /version: {exc}") from exc
    log.info("event=dynamic_mig_slice_layout server_version=%s layout=%s", version, layout.value)
    return layout
