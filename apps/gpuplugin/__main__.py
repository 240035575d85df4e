"""`gpu-kubelet-plugin`: flags -> adapters -> a served, registered `gpu.nvidia.com` plugin."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from adapters.fs import driverroot, procfs
from adapters.fs import vfio as fs_vfio
from adapters.nvml import inventory as nvml_inventory
from adapters.nvsmi import timeslice
from apps.gpuplugin import settings as gpu_settings
from apps.gpuplugin import wiring
from apps.pluginkit import deferred_cluster
from core import errors, gates, models, ports
from core.gpu import devices

log = logging.getLogger("gpu-kubelet-plugin")


class _WithVfio:
    """NVML's GPUs and MIG devices plus the VFIO functions sysfs shows (PassthroughSupport)."""

    def __init__(self, gpus: ports.GpuDiscovery, vfio: fs_vfio.SysfsVfio) -> None:
        self._gpus = gpus
        self._vfio = vfio

    def gpu_inventory(self) -> devices.GpuInventory:
        found = self._gpus.gpu_inventory()
        return devices.GpuInventory(
            gpus=found.gpus, migs=found.migs, vfios=self._vfio.vfio_devices()
        )


def _vfio_nodes(vfio: fs_vfio.SysfsVfio) -> dict[str, tuple[devices.DeviceNode, ...]]:
    nodes: dict[str, tuple[devices.DeviceNode, ...]] = {}
    for function in vfio.vfio_devices():
        try:
            nodes[function.pci_bus_id] = (
                *vfio.api_device_nodes(), *vfio.device_nodes(function.pci_bus_id)
            )
        except errors.DriverError as exc:  # not bound to vfio-pci yet: the planner says so
            log.debug("event=vfio_nodes_unknown pci_bus_id=%s error=%r", function.pci_bus_id,
                      exc.message)
    return nodes


def main(argv: Sequence[str] | None = None) -> int:
    settings = gpu_settings.parse(argv, os.environ)
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("event=shutdown signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def api_client() -> ports.Cluster:
        from adapters.kube import cluster as kube_cluster  # off the start-up path

        return kube_cluster.KubeCluster.from_config(settings.kubeconfig)

    cluster = deferred_cluster.DeferredCluster(api_client).start()
    try:
        resolved_gates = gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates))
        plugin = _start(settings, cluster=cluster, resolved_gates=resolved_gates)
    except errors.DriverError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    problem = cluster.wait()
    if problem is not None:
        log.error("event=startup_failed error=%r", problem.message)
        print(f"error: {problem.message}", file=sys.stderr)
        plugin.stop(grace_s=0)
        return 2
    if settings.metrics_port:
        plugin.metrics.serve(settings.metrics_port)
    stop.wait()
    plugin.stop()
    return 0


def _start(
    settings: gpu_settings.Settings, *, cluster: ports.Cluster, resolved_gates: models.FeatureGates
) -> wiring.Plugin:
    discovery = nvml_inventory.gpu_discovery_from_spec(
        settings.nvml, node_name=settings.node_name, driver_root=settings.container_driver_root
    )
    files = driverroot.DriverRoot(
        settings.container_driver_root, host_root=settings.nvidia_driver_root,
        dev_root=settings.dev_root, proc_devices=settings.proc_devices,
    )
    vfio: fs_vfio.SysfsVfio | None = None
    if resolved_gates.enabled(gates.PASSTHROUGH_SUPPORT):
        vfio = fs_vfio.SysfsVfio(settings.sysfs_root, settings.dev_root)
        discovery = _WithVfio(discovery, vfio)
    nvidia_smi = os.path.join(settings.container_driver_root, "usr/bin/nvidia-smi")
    boot_id = procfs.ProcNodeFiles(
        proc_devices_path=settings.proc_devices, boot_id_path=settings.boot_id_path
    ).boot_id()
    return wiring.start_gpu_plugin(
        settings,
        cluster=cluster,
        discovery=discovery,
        files=files,
        gates=resolved_gates,
        boot_id=boot_id,
        time_slicer=timeslice.NvidiaSmiTimeSlicer(nvidia_smi),
        vfio=vfio,
        vfio_nodes=(lambda: _vfio_nodes(vfio)) if vfio is not None else None,
    )


if __name__ == "__main__":
    sys.exit(main())
