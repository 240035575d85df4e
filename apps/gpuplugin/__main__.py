"""`gpu-kubelet-plugin`: flags -> adapters -> a served, registered `gpu.nvidia.com` plugin."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from adapters import fabricmanager, nvml
from adapters.fabricmanager import opening as fm_opening
from adapters.fs import cdihook, driverroot, kernel_modules, procfs
from adapters.fs import vfio as fs_vfio
from adapters.mps import daemons as mps_daemons
from adapters.mps import hostdirs as mps_hostdirs
from adapters.nvml import gpu_simulation, health_events
from adapters.nvml import inventory as nvml_inventory
from adapters.nvsmi import timeslice
from apps.gpuplugin import fault_marked, mps_daemon, wiring
from apps.gpuplugin import settings as gpu_settings
from apps.pluginkit import process
from apps.shell import logs, signals
from core import errors, gates, models, ports
from core.gpu import health as gpu_health
from core.gpu import mps
from core.gpu import shares as gpu_shares

log = logging.getLogger("gpu-kubelet-plugin")


def check_host_root(host_root: str) -> None:
    """Upstream's start-up checks under PassthroughSupport: the host's root file system is
    mounted at `host_root`, and its kernel has the IOMMU on (some IOMMU group exists)."""
    if not os.path.isdir(host_root):
        raise errors.ConfigError(
            f"feature gate {gates.PASSTHROUGH_SUPPORT}=true needs the host's root file system "
            f"at --host-root (env HOST_ROOT), but {host_root} is not a directory: mount the "
            "host's / there (the Helm chart does under this gate)"
        )
    groups = os.path.join(host_root, "sys/kernel/iommu_groups")
    try:
        enabled = bool(os.listdir(groups))
    except FileNotFoundError:
        enabled = False
    except OSError as exc:
        raise errors.ConfigError(f"cannot list {groups} ({exc.strerror})") from exc
    if not enabled:
        raise errors.ConfigError(
            f"feature gate {gates.PASSTHROUGH_SUPPORT}=true needs the IOMMU, but the kernel "
            f"shows no IOMMU group ({groups} is empty or missing): turn it on in firmware and "
            "on the kernel command line (intel_iommu=on or amd_iommu=on), or turn the gate off"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [mps_daemon.SUBCOMMAND]:
        return mps_daemon.main(args[1:])
    settings = gpu_settings.parse(argv, os.environ)
    logs.configure(settings.log_verbosity)
    stop = signals.stop_on_signals(log)
    return process.run(
        lambda cluster: _start(settings, cluster=cluster, resolved_gates=_gates(settings)),
        kubeconfig=settings.kubeconfig, metrics_port=settings.metrics_port, stop=stop, log=log,
        listen_address=settings.listen_address,
    )


def _gates(settings: gpu_settings.Settings) -> models.FeatureGates:
    """The effective gates, or ConfigError: upstream's rules broken, a feature not built, or
    (PassthroughSupport) no host root or IOMMU."""
    resolved = gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates))
    gates.validate_gate_dependencies(resolved)
    gates.refuse_unbuilt(resolved, gates.Component.GPU_PLUGIN)
    # NB: checked here, beside the gates it needs, so a bad value stops the start at once.
    gpu_shares.parse_consumable_shares(settings.consumable_shares, gates=resolved)
    gpu_health.xid_policy(settings.additional_xids_to_ignore)
    if resolved.enabled(gates.PASSTHROUGH_SUPPORT):
        check_host_root(settings.host_root)
    return resolved


def _start(
    settings: gpu_settings.Settings, *, cluster: ports.Cluster, resolved_gates: models.FeatureGates
) -> wiring.Plugin[models.NodeFacts]:
    discovery = nvml_inventory.gpu_discovery_from_spec(
        settings.nvml, node_name=settings.node_name, driver_root=settings.container_driver_root
    )
    files = driverroot.DriverRoot(
        settings.container_driver_root, host_root=settings.nvidia_driver_root,
        dev_root=settings.dev_root, proc_devices=settings.proc_devices,
    )
    vfio: fs_vfio.SysfsVfio | None = None
    if resolved_gates.enabled(gates.PASSTHROUGH_SUPPORT):
        vfio = fs_vfio.SysfsVfio(
            settings.sysfs_root, settings.dev_root,
            modules=kernel_modules.ChrootModprobe(settings.host_root),
        )
        discovery = wiring.WithVfio(discovery, vfio)
    nvidia_smi = os.path.join(settings.container_driver_root, "usr/bin/nvidia-smi")
    boot_id = procfs.ProcNodeFiles(
        proc_devices_path=settings.proc_devices, boot_id_path=settings.boot_id_path
    ).boot_id()
    hook = cdihook.locate(
        settings.nvidia_cdi_hook_path, plugin_dir=settings.plugin_dir,
        container_driver_root=settings.container_driver_root,
        host_driver_root=settings.nvidia_driver_root,
    )
    log.info("event=cdi_hook path=%s source=%s hooks=%s", hook.path or "-", hook.source.value,
             "on" if hook.path else "off")
    smi = timeslice.NvidiaSmiTimeSlicer(nvidia_smi)
    return wiring.start_gpu_plugin(
        settings,
        cluster=cluster,
        discovery=discovery,
        files=files,
        cdi_hook_path=hook.path,
        gates=resolved_gates,
        boot_id=boot_id,
        time_slicer=smi,
        vfio=vfio,
        vfio_nodes=(lambda: wiring.vfio_nodes(vfio)) if vfio is not None else None,
        iommufd=vfio,
        consumable=gpu_shares.parse_consumable_shares(
            settings.consumable_shares, gates=resolved_gates),
        compute_mode=fault_marked.MarkedComputeMode(smi),
        mps_daemons=(
            fault_marked.MarkedMpsDaemons(_mps_daemons(settings, cluster))
            if resolved_gates.enabled(gates.MPS_SUPPORT) else None
        ),
        mig=(
            fault_marked.MarkedMigPartitioner(_mig_partitioner(discovery))
            if resolved_gates.enabled(gates.DYNAMIC_MIG) else None
        ),
        health_events=(
            _health_events(settings, discovery)
            if resolved_gates.enabled(gates.NVML_DEVICE_HEALTH_CHECK) else None
        ),
        xid_policy=gpu_health.xid_policy(settings.additional_xids_to_ignore),
        fabric=(
            _fabric_manager(settings)
            if resolved_gates.enabled(gates.FABRIC_MANAGER_PARTITIONING) else None
        ),
    )


def _fabric_manager(settings: gpu_settings.Settings) -> ports.FabricManager | None:
    """Fabric Manager, on a node with an NVSwitch fabric (as upstream: else none, and the
    gate changes nothing); the /proc it reads is the one /proc/devices is read from."""
    proc_root = os.path.dirname(settings.proc_devices) or "/proc"
    if not fabricmanager.has_nvswitch_fabric(proc_root=proc_root, sys_root=settings.sysfs_root):
        log.info("event=fm_skipped reason=no_nvswitch_fabric proc_root=%s", proc_root)
        return None
    return fault_marked.MarkedFabricManager(fm_opening.open_fabric_manager(
        driver_root=settings.container_driver_root, env=os.environ,
    ))


def _health_events(
    settings: gpu_settings.Settings, discovery: ports.GpuDiscovery
) -> ports.GpuHealthEvents:
    """NVML's event loop on the GPUs `discovery` probes; for simulated GPUs, the events
    appended to the simulated driver root's events file (raised by tests and the demo)."""
    if isinstance(discovery, gpu_simulation.SimulatedGpus):
        uuids = [gpu.uuid for gpu in discovery.gpu_inventory().gpus]
        return health_events.simulated_health_events(
            health_events.simulated_events_path(settings.container_driver_root), uuids)
    return health_events.NvmlHealthEvents(driver_root=settings.container_driver_root)


def _mig_partitioner(discovery: ports.GpuDiscovery) -> ports.MigPartitioner:
    """Dynamic MIG's creates and destroys on the GPUs `discovery` probes (simulated or NVML)."""
    if isinstance(discovery, nvml.SimulatedGpus):
        return discovery
    if isinstance(discovery, nvml.NvmlInventory):
        return nvml.NvmlMigPartitioner(inventory=discovery)
    raise errors.ConfigError(
        f"feature gate {gates.DYNAMIC_MIG}=true needs NVML or simulated GPUs (--nvml); "
        f"{type(discovery).__name__} cannot create MIG devices"
    )


def _mps_daemons(
    settings: gpu_settings.Settings, cluster: ports.Cluster
) -> mps_daemons.DeploymentMpsDaemons:
    """MPS control daemons as Deployments of the plugin's image (gate MPSSupport)."""
    if not settings.mps_image:
        raise errors.ConfigError(
            "feature gate MPSSupport is on but --mps-image (env MPS_IMAGE) is empty: set it to "
            "this driver's image (the Helm chart does), so MPS daemons can be started"
        )
    # Upstream's rule: the daemon runs chrooted into a driver root with its own /dev/shm.
    chrooted_shm = os.path.isdir(os.path.join(settings.container_driver_root, "dev/shm"))
    host = mps.DaemonHost(
        namespace=settings.namespace,
        node_name=settings.node_name,
        image=settings.mps_image,
        command=("gpu-kubelet-plugin", mps_daemon.SUBCOMMAND),
        host_driver_root=settings.nvidia_driver_root,
        control_root=settings.mps_control_root,
        shm_mount_path=(
            f"{mps.DRIVER_ROOT_MOUNT}/dev/shm" if chrooted_shm else mps.SHM_CONTAINER_PATH
        ),
        image_pull_policy=settings.mps_image_pull_policy,
        image_pull_secrets=settings.mps_image_pull_secrets,
        service_account=settings.mps_service_account,
    )
    log.info("event=mps_enabled image=%s namespace=%s control_root=%s shm_tmpfs=%s",
             host.image, host.namespace, host.control_root, settings.mps_shm_tmpfs)
    return mps_daemons.DeploymentMpsDaemons(
        cluster, host=host,
        dirs=mps_hostdirs.MpsHostDirs(settings.mps_control_root, tmpfs=settings.mps_shm_tmpfs),
        ready_timeout_s=settings.mps_ready_timeout_s,
    )


if __name__ == "__main__":
    sys.exit(main())
