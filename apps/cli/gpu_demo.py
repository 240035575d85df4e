"""`computedomain demo --profile hgx-h100|a100-mig|gb200`: the GPU half's story, narrated.

One simulated GPU node on the in-memory cluster: the `gpu.nvidia.com` plugin runs in this
process (real gRPC over unix sockets, checkpoint and CDI files on disk, a stand-in driver root
with genuine ELF libraries and an ld cache), a kubelet emulator registers it, the CEL allocator
allocates claims against the slice it published as the scheduler would, and the claims are
prepared and unprepared through the DRA socket. `start_gpu_node` is also what the bench uses.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters import fabricmanager
from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.fs import driverroot, simulated_driverroot
from adapters.fs import vfio as fs_vfio
from adapters.grpc import kubelet_emulator
from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster
from adapters.mps import daemons as mps_daemons
from adapters.mps import hostdirs as mps_hostdirs
from adapters.mps import simulated as mps_simulated
from adapters.nvml import gpu_simulation
from adapters.nvml import health_events as nvml_health
from adapters.nvml import simulated as nvml_simulated
from adapters.nvsmi import simulated as nvsmi_simulated
from adapters.nvsmi import timeslice
from apps.cli import (
    embedded,
    gpu_health_demo,
    gpu_mig_demo,
    gpu_mps_demo,
    gpu_shares_demo,
    mps_runner,
)
from apps.gpuplugin import mps_daemon
from apps.gpuplugin import settings as gpu_settings
from apps.gpuplugin import wiring as gpu_wiring
from core import errors, gates, kinds, models, names, ports
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import deviceclasses, mps
from core.gpu import shares as gpu_shares

DRIVER = gpu_settings.DRIVER_NAME
# The demo's `--consumable-shares`: each GPU split into two shares.
SHARES_PER_GPU = "2"
NAMESPACE = "gpu-demo"
NODE_NAME = "gpu-node-0"
# The image the MPS daemons' Deployments name; the demo's MpsRunner runs our wrapper in-process.
MPS_IMAGE = "nvidia-dra-driver:demo"
# How often the plugin looks whether a daemon is Ready (the bench measures through it).
MPS_POLL_S = 0.002
MPS_GATES = f"{gates.MPS_SUPPORT}=true"
MIG_GATES = f"{gates.DYNAMIC_MIG}=true"
HEALTH_GATES = f"{gates.NVML_DEVICE_HEALTH_CHECK}=true"
# How often the simulated health watch reads its events file (the bench measures through it).
HEALTH_POLL_S = 0.001
Say = Callable[[str], None]

# The chart's DeviceClasses of the GPU half (helm templates deviceclass-gpu.yaml and
# deviceclass-mig.yaml); the allocator needs them in the cluster to run their selectors.
def gpu_profiles() -> tuple[str, ...]:
    """The simulated GPU profiles the demo runs (`a100-mig`, `gb200`, `hgx-h100`)."""
    return gpu_simulation.gpu_profile_names()


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeFiles:
    """The files a simulated GPU node's plugin reads, laid out under one directory."""

    driver_root: str
    dev_root: str
    proc_devices: str
    boot_id_path: str
    nvidia_smi: str
    stand_in_device_nodes: bool


def lay_out_node_files(root: str, *, profile: str, node_name: str) -> NodeFiles:
    """A driver root, dev root, /proc/devices, boot id and nvidia-smi for a simulated node.

    The demo, the GPU app tests and the real-server tests all lay out a node with this.

    The control device nodes are real character nodes where this process may create them
    (root); elsewhere they are links to /dev/null, a character device too, so that the
    driver root check passes (`stand_in_device_nodes` says which).
    """
    driver_root = os.path.join(root, "driver")
    if not os.path.exists(os.path.join(driver_root, "etc/ld.so.cache")):
        simulated_driverroot.install(driver_root)
    dev_root = os.path.join(root, "devroot")
    stand_in = False
    try:
        simulated_driverroot.make_control_nodes(dev_root)
    except PermissionError:
        stand_in = True
        for path, _major, _minor in simulated_driverroot.CONTROL_NODES:
            link = os.path.join(dev_root, path.lstrip("/"))
            if not os.path.lexists(link):
                os.symlink("/dev/null", link)
    proc_dir = os.path.join(root, "proc")
    os.makedirs(proc_dir, exist_ok=True)
    proc_devices = os.path.join(proc_dir, "devices")
    with open(proc_devices, "w", encoding="utf-8") as handle:
        handle.write(nvml_simulated.simulated_proc_devices())
    boot_id_path = os.path.join(proc_dir, "boot_id")
    with open(boot_id_path, "w", encoding="utf-8") as handle:
        handle.write(nvml_simulated.simulated_boot_id(node_name) + "\n")
    simulated = gpu_simulation.simulated_gpus(profile, node_name=node_name)
    if simulated.profile.nvswitch:
        simulated_driverroot.present_nvswitch_fabric(proc_dir)
    inventory = simulated.gpu_inventory()
    # NB: over the driver root's stub, where the plugin looks for nvidia-smi: the stand-in
    # records each call (time-slicing) for tests to read.
    nvidia_smi = nvsmi_simulated.install(
        os.path.join(driver_root, "usr", "bin"), gpu_uuids=tuple(gpu.uuid for gpu in inventory.gpus)
    )
    # Likewise the stand-in nvidia-cuda-mps-control that MPS daemons run from the driver root.
    mps_simulated.install(os.path.join(driver_root, "usr", "bin"))
    return NodeFiles(
        driver_root=driver_root, dev_root=dev_root, proc_devices=proc_devices,
        boot_id_path=boot_id_path, nvidia_smi=nvidia_smi, stand_in_device_nodes=stand_in,
    )


def plugin_settings(
    root: str, *, node_name: str, profile: str, files: NodeFiles, consumable_shares: str = "",
    feature_gates: str = "",
) -> gpu_settings.Settings:
    """The GPU plugin's settings for a simulated node whose state lives under `root`; with
    `consumable_shares` (a `--consumable-shares` value), gate ConsumableShares on too, beside
    `feature_gates` (`--feature-gates`, e.g. "MPSSupport=true")."""
    given = [g for g in (feature_gates,
                         f"{gates.CONSUMABLE_SHARES}=true" if consumable_shares else "") if g]
    return gpu_settings.Settings(
        node_name=node_name,
        namespace="nvidia-dra-driver",
        feature_gates=",".join(given),
        mps_image=MPS_IMAGE,
        mps_shm_tmpfs=False,
        consumable_shares=consumable_shares or "disabled",
        cdi_root=os.path.join(root, "cdi"),
        plugin_dir=os.path.join(root, "plugin"),
        registry_dir=os.path.join(root, "registry"),
        health_port=None,
        metrics_port=None,
        nvidia_driver_root=files.driver_root,
        container_driver_root=files.driver_root,
        dev_root=files.dev_root,
        sysfs_root=os.path.join(root, "sys"),
        nvml=f"simulated:{profile}",
        kubeconfig=None,
        boot_id_path=files.boot_id_path,
        proc_devices=files.proc_devices,
        retry_budget_s=0.2,
        log_verbosity=2,
    )


def node_object(name: str) -> dict[str, Any]:
    """The Node the allocator schedules onto."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def device_class_objects(
    gate_values: models.FeatureGates | None = None,
) -> tuple[dict[str, Any], ...]:
    """The GPU half's DeviceClasses, as the chart installs them (gates at their defaults
    unless given)."""
    return deviceclasses.device_classes(gate_values or gates.resolve_gates({}))


@dataclasses.dataclass(kw_only=True)
class GpuNode:
    """A running simulated GPU node: cluster, allocator, plugin and its kubelet."""

    cluster: memory_cluster.InMemoryCluster
    allocator: memory_allocator.Allocator
    plugin: gpu_wiring.Plugin[models.NodeFacts]
    kubelet: kubelet_emulator.KubeletEmulator
    settings: gpu_settings.Settings
    files: NodeFiles
    profile: str
    workdir: str
    owns_workdir: bool
    # With gate MPSSupport: plays deployment controller and kubelet for the daemons.
    mps_runner: mps_runner.MpsRunner | None = None
    # The simulated NVML the plugin discovers (and, with DynamicMIG, partitions).
    gpus: gpu_simulation.SimulatedGpus | None = None
    # With gate NVMLDeviceHealthCheck: the simulated watch (`nvml_health.raise_simulated_event`
    # on `files.driver_root` raises an event).
    health_events: nvml_health.NvmlHealthEvents | None = None
    # With gate FabricManagerPartitioning on an NVSwitch profile (hgx-h100): the simulated
    # Fabric Manager, its activations kept in the driver root.
    fabric: fabricmanager.SimulatedFabricManager | None = None

    def stop(self) -> None:
        """Stop kubelet, plugin, MPS daemons and cluster; remove the workdir when made here."""
        self.kubelet.close()
        self.plugin.stop(grace_s=0.5)
        if self.mps_runner is not None:
            self.mps_runner.close()
        self.cluster.close()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def mps_daemons_of(
    cluster: memory_cluster.InMemoryCluster, settings: gpu_settings.Settings, files: NodeFiles,
) -> mps_daemons.DeploymentMpsDaemons:
    """The MPS daemons port as the plugin's `__main__` wires it (Deployments in the driver's
    namespace), with shm a plain directory (no mount privilege here) and a fine Ready poll."""
    host = mps.DaemonHost(
        namespace=settings.namespace, node_name=settings.node_name, image=settings.mps_image,
        command=("gpu-kubelet-plugin", mps_daemon.SUBCOMMAND),
        host_driver_root=files.driver_root, control_root=settings.mps_control_root,
    )
    return mps_daemons.DeploymentMpsDaemons(
        cluster, host=host,
        dirs=mps_hostdirs.MpsHostDirs(settings.mps_control_root, tmpfs=settings.mps_shm_tmpfs),
        ready_timeout_s=settings.mps_ready_timeout_s, gone_timeout_s=20.0, poll_s=MPS_POLL_S,
    )


def start_plugin(
    cluster: memory_cluster.InMemoryCluster, settings: gpu_settings.Settings, files: NodeFiles,
    *, profile: str, gpus: gpu_simulation.SimulatedGpus | None = None,
    health_events: ports.GpuHealthEvents | None = None,
    fabric: ports.FabricManager | None = None,
    vfio: fs_vfio.SysfsVfio | None = None,
) -> gpu_wiring.Plugin[models.NodeFacts]:
    """Start the GPU plugin in this process for a simulated node (no registration wait);
    with gate MPSSupport it runs MPS daemons as Deployments in `cluster`; with gate DynamicMIG
    it creates and destroys MIG devices on `gpus` (the simulated NVML; a fresh one if None);
    `health_events` (gate NVMLDeviceHealthCheck) taint the devices they find sick; `fabric`
    (gate FabricManagerPartitioning) gives the partitions the GPUs publish; `vfio` (gate
    PassthroughSupport) discovers and binds the passthrough functions, as `__main__` wires
    it."""
    resolved = gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates))
    if gpus is None:
        gpus = gpu_simulation.simulated_gpus(profile, node_name=settings.node_name)
    with open(files.boot_id_path, encoding="utf-8") as handle:
        boot_id = handle.read().strip()
    smi = timeslice.NvidiaSmiTimeSlicer(files.nvidia_smi)
    discovery: ports.GpuDiscovery = gpus if vfio is None else gpu_wiring.WithVfio(gpus, vfio)
    return gpu_wiring.start_gpu_plugin(
        settings,
        cluster=cluster,
        discovery=discovery,
        vfio=vfio,
        vfio_nodes=None if vfio is None else (lambda: gpu_wiring.vfio_nodes(vfio)),
        iommufd=vfio,
        files=driverroot.DriverRoot(
            files.driver_root, dev_root=files.dev_root, proc_devices=files.proc_devices
        ),
        gates=resolved,
        boot_id=boot_id,
        time_slicer=smi,
        consumable=gpu_shares.parse_consumable_shares(settings.consumable_shares, gates=resolved),
        compute_mode=smi,
        mps_daemons=(mps_daemons_of(cluster, settings, files)
                     if resolved.enabled(gates.MPS_SUPPORT) else None),
        mig=gpus if resolved.enabled(gates.DYNAMIC_MIG) else None,
        health_events=health_events,
        fabric=fabric,
    )


def simulated_fabric(
    gpus: gpu_simulation.SimulatedGpus, files: NodeFiles, *, gate_values: models.FeatureGates
) -> fabricmanager.SimulatedFabricManager | None:
    """The simulated Fabric Manager of an NVSwitch profile under gate
    FabricManagerPartitioning (activations kept in the driver root); else None."""
    if not (gpus.profile.nvswitch and gate_values.enabled(gates.FABRIC_MANAGER_PARTITIONING)):
        return None
    return fabricmanager.SimulatedFabricManager(
        state_path=fabricmanager.state_path_in(files.driver_root)
    )


def start_gpu_node(
    workdir: str, *, profile: str, node_name: str = NODE_NAME, consumable_shares: str = "",
    feature_gates: str = "",
    cluster: memory_cluster.InMemoryCluster | None = None,
    vfio: fs_vfio.SysfsVfio | None = None,
) -> GpuNode:
    """Bring up the in-memory cluster and one registered GPU plugin with its slice published
    (GPUs shared by consumable capacity when `consumable_shares` is given, e.g. "2"; the
    plugin's `--feature-gates` are `feature_gates`). With MPSSupport among them, an
    `MpsRunner` runs the daemons' Deployments (stopped with the node); with
    NVMLDeviceHealthCheck, the simulated health watch reads the driver root's events file
    (ready before this returns).

    `cluster` (default: a fresh one) is the embedded API server to use; `vfio` (gate
    PassthroughSupport) discovers and binds the passthrough functions.

    ConfigError listing the profiles for an unknown one.
    """
    if profile not in gpu_profiles():
        raise errors.ConfigError(
            f"unknown GPU demo profile {profile!r}; GPU profiles: {', '.join(gpu_profiles())}"
        )
    root, owned = embedded.short_workdir(workdir)
    cluster = cluster or memory_cluster.InMemoryCluster()
    try:
        files = lay_out_node_files(root, profile=profile, node_name=node_name)
        settings = plugin_settings(root, node_name=node_name, profile=profile, files=files,
                                   consumable_shares=consumable_shares,
                                   feature_gates=feature_gates)
        cluster.create(kinds.NODE.kind, node_object(node_name))
        resolved = gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates))
        for device_class in device_class_objects(resolved):
            cluster.create(kinds.DEVICE_CLASS.kind, device_class)
        runner = (mps_runner.MpsRunner(cluster, namespace=settings.namespace)
                  if resolved.enabled(gates.MPS_SUPPORT) else None)
        gpus = gpu_simulation.simulated_gpus(profile, node_name=node_name)
        watch = (nvml_health.simulated_health_events(
                     nvml_health.simulated_events_path(files.driver_root),
                     [gpu.uuid for gpu in gpus.gpu_inventory().gpus], poll_s=HEALTH_POLL_S)
                 if resolved.enabled(gates.NVML_DEVICE_HEALTH_CHECK) else None)
        fabric = simulated_fabric(gpus, files, gate_values=resolved)
        try:
            plugin = start_plugin(cluster, settings, files, profile=profile, gpus=gpus,
                                  health_events=watch, fabric=fabric, vfio=vfio)
        except BaseException:
            if runner is not None:
                runner.close()
            raise
    except BaseException:
        cluster.close()
        if owned:
            shutil.rmtree(root, ignore_errors=True)
        raise
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=settings.registry_dir)
    node = GpuNode(
        cluster=cluster, allocator=memory_allocator.Allocator(cluster), plugin=plugin,
        kubelet=kubelet, settings=settings, files=files, profile=profile, workdir=root,
        owns_workdir=owned, mps_runner=runner, gpus=gpus, health_events=watch, fabric=fabric,
    )
    try:
        kubelet.wait_for_plugin(DRIVER, timeout_s=10)
        if not plugin.slices.published.wait(10):
            raise errors.RetryableError(f"node {node_name}: GPU ResourceSlice not published in 10s")
        if watch is not None and not watch.wait_ready(10):
            raise errors.RetryableError(f"node {node_name}: GPU health watch not ready in 10s")
    except BaseException:
        node.stop()
        raise
    return node


def claim_object(name: str, device_class: str) -> dict[str, Any]:
    """A ResourceClaim for one device of `device_class`."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
    }


def pod_object(name: str, claim: str) -> dict[str, Any]:
    """A pod using the claim `claim`."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


@dataclasses.dataclass(kw_only=True)
class GpuReport:
    """What the GPU story observed (asserted by tests, summarised by the demo)."""

    slice_devices: tuple[str, ...] = ()
    allocated: dict[str, str] = dataclasses.field(default_factory=dict)
    cdi_ids: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    cdi_specs: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    leftover_cdi_files: int = 0
    leftover_checkpoint_entries: int = 0


def _attr(device: Mapping[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), "?"))


def run_story(node: GpuNode, *, say: Say) -> GpuReport:
    """Publish, allocate, prepare, show the CDI edits, unprepare; returns what was observed."""
    report = GpuReport()
    cluster = node.cluster
    say(f"GPU plugin registered through plugins_registry as {DRIVER} "
        f"({node.kubelet.plugins[DRIVER].endpoint if DRIVER in node.kubelet.plugins else '?'})")
    slices = [s for s in cluster.list(kinds.RESOURCE_SLICE.kind).items
              if s["spec"].get("driver") == DRIVER]
    devices = [d for s in slices for d in s["spec"].get("devices") or ()]
    report.slice_devices = tuple(d["name"] for d in devices)
    pool = slices[0]["spec"]["pool"] if slices else {}
    say(f"{len(slices)} ResourceSlice(s) published for {node.settings.node_name} (pool "
        f"{pool.get('name')}, generation {pool.get('generation')}): {len(devices)} devices: "
        + ", ".join(report.slice_devices))
    for device in devices:
        memory = ((device.get("capacity") or {}).get("memory") or {}).get("value", "?")
        extra = (f" profile={_attr(device, 'profile')}"
                 if _attr(device, "type") == "mig" else "")
        say(f"  {device['name']}: type={_attr(device, 'type')} "
            f"productName={_attr(device, 'productName')} "
            f"architecture={_attr(device, 'architecture')} uuid={_attr(device, 'uuid')} "
            f"memory={memory}{extra}")
    wanted = [("full-gpu", "gpu.nvidia.com")]
    if any(_attr(d, "type") == "mig" for d in devices):
        wanted.append(("mig-slice", "mig.nvidia.com"))
    scheduled: list[memory_allocator.ScheduledPod] = []
    for claim_name, device_class in wanted:
        cluster.create(kinds.RESOURCE_CLAIM.kind, claim_object(claim_name, device_class))
        pod = node.allocator.schedule_pod(pod_object(f"{claim_name}-pod", claim_name))
        scheduled.append(pod)
        device = pod.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"]
        report.allocated[claim_name] = device
        say(f"claim {NAMESPACE}/{claim_name} (DeviceClass {device_class}) allocated {device} "
            f"on {pod.node_name} by the class's CEL selector")
    cdi_dir = fs_cdi.CDIDirectory(node.settings.cdi_root, file_name=gpu_cdi.spec_file_name)
    for pod in scheduled:
        claim = pod.claims[0]
        refs = embedded.claim_refs((claim,))
        results = node.kubelet.prepare(DRIVER, refs)
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise errors.PermanentError(f"NodePrepareResources failed: {'; '.join(failed)}")
        ids = tuple(i for r in results.values() for d in r.devices for i in d.cdi_device_ids)
        report.cdi_ids[claim["metadata"]["name"]] = ids
        say(f"NodePrepareResources for {claim['metadata']['name']}: {', '.join(ids)}")
        spec = cdi_dir.read(refs[0].uid)
        if spec is not None:
            report.cdi_specs[claim["metadata"]["name"]] = spec
            _show_spec(spec, say=say)
    embedded.unprepare_and_delete_pods(
        node.kubelet, node.allocator, cluster, scheduled, driver=DRIVER, namespace=NAMESPACE)
    report.leftover_cdi_files = len(cdi_dir.claim_uids())
    current = fs_checkpoints.read_checkpoint(node.settings.checkpoint_path, gpu_records.CODEC)
    report.leftover_checkpoint_entries = 0 if current is None else sum(
        1 for e in current.entries.values() if e.state is not models.ClaimState.PREPARE_ABORTED
    )
    say(f"NodeUnprepareResources for {len(scheduled)} claim(s); left: "
        f"{report.leftover_cdi_files} CDI spec files, "
        f"{report.leftover_checkpoint_entries} checkpoint entries")
    return report


def _show_spec(spec: Mapping[str, Any], *, say: Say) -> None:
    say(f"  CDI spec kind={spec.get('kind')} cdiVersion={spec.get('cdiVersion')}")
    edits: list[tuple[str, Mapping[str, Any]]] = [
        (f"device {d['name']}", d.get("containerEdits") or {}) for d in spec.get("devices") or ()
    ]
    edits.append(("spec-wide", spec.get("containerEdits") or {}))
    for where, edit in edits:
        nodes = [n["path"] for n in edit.get("deviceNodes") or ()]
        env = list(edit.get("env") or ())
        mounts = list(edit.get("mounts") or ())
        say(f"  {where}: deviceNodes={nodes} env={env} mounts={len(mounts)}")


def _mig_chapter(profile: str, *, workdir: str, say: Say) -> gpu_mig_demo.MigReport | None:
    """The dynamic MIG chapter on `a100-mig` (its claims' profiles are A100 40GB ones and
    fill its one partitionable GPU); None on the other profiles."""
    if profile != gpu_mig_demo.PROFILE:
        say(f"dynamic MIG chapter: shown on --profile {gpu_mig_demo.PROFILE} only")
        return None
    before = len(gpu_simulation.simulated_gpus(profile, node_name=NODE_NAME).gpu_inventory().migs)
    node = start_gpu_node(os.path.join(workdir, "mig") if workdir else "",
                          profile=profile, feature_gates=MIG_GATES)
    try:
        say(f"restarted the GPU plugin with --feature-gates={MIG_GATES}: MIG devices are "
            "created when a claim is prepared, in the layout the scheduler chose")
        return gpu_mig_demo.run_mig_story(
            node, torn_down=before - len(gpu_mig_demo.mig_devices(node)), say=say)
    finally:
        node.stop()


def _health_chapter(profile: str, *, workdir: str, say: Say) -> gpu_health_demo.HealthReport | None:
    """The device health chapter, on profiles with two GPUs not in MIG mode; None elsewhere."""
    inventory = gpu_simulation.simulated_gpus(profile, node_name=NODE_NAME).gpu_inventory()
    if sum(1 for g in inventory.gpus if not g.mig_enabled) < 2:
        say(f"device health chapter: needs two GPUs not in MIG mode, {profile} has fewer")
        return None
    node = start_gpu_node(os.path.join(workdir, "health") if workdir else "",
                          profile=profile, feature_gates=HEALTH_GATES)
    try:
        say(f"restarted the GPU plugin with --feature-gates={HEALTH_GATES}: it watches the "
            "NVML event loop (here the simulated NVML's, raised by this demo) and taints sick "
            "GPUs in its ResourceSlice (KEP-5055 device taints)")
        return gpu_health_demo.run_health_story(node, say=say)
    finally:
        node.stop()


def run(profile: str, *, workdir: str) -> int:
    """The GPU demo for one profile; 0 when every claim was prepared and cleaned up."""
    started = time.monotonic()
    step = 0

    def say(line: str) -> None:
        nonlocal step
        if line.startswith("  "):
            print(f"        {line.strip()}", flush=True)
            return
        step += 1
        print(f"[{step:2d}] {time.monotonic() - started:5.2f}s  {line}", flush=True)

    print(f"GPU DRA driver demo ({DRIVER}): profile={profile}", flush=True)
    try:
        node = start_gpu_node(workdir, profile=profile)
    except (errors.DriverError, OSError) as exc:
        print(f"error: {getattr(exc, 'message', str(exc))}", file=sys.stderr)
        return 1
    shares_node: GpuNode | None = None
    mps_node: GpuNode | None = None
    try:
        try:
            stand_in = (" (stand-in device nodes: not root)"
                        if node.files.stand_in_device_nodes else "")
            say(f"started in-memory cluster and the GPU kubelet plugin for "
                f"{node.settings.node_name} (real gRPC over unix sockets; simulated driver root "
                f"under {node.files.driver_root}{stand_in})")
            report = run_story(node, say=say)
        finally:
            node.stop()
        shares_node = start_gpu_node(os.path.join(workdir, "shares") if workdir else "",
                                     profile=profile, consumable_shares=SHARES_PER_GPU)
        say(f"restarted the GPU plugin with --consumable-shares={SHARES_PER_GPU} "
            f"(gate {gates.CONSUMABLE_SHARES})")
        shared = gpu_shares_demo.run_shares_story(shares_node, say=say)
        shares_node.stop()
        shares_node = None
        mps_node = start_gpu_node(os.path.join(workdir, "mps") if workdir else "",
                                  profile=profile, feature_gates=MPS_GATES)
        say(f"restarted the GPU plugin with --feature-gates={MPS_GATES}: each MPS claim gets "
            f"its own control daemon Deployment in {mps_node.settings.namespace} (here this "
            "demo plays their deployment controller and kubelet, running the real wrapper and "
            "a stand-in nvidia-cuda-mps-control)")
        with_mps = gpu_mps_demo.run_mps_story(mps_node, say=say)
        mps_node.stop()
        mps_node = None
        with_mig = _mig_chapter(profile, workdir=workdir, say=say)
        with_health = _health_chapter(profile, workdir=workdir, say=say)
    except (errors.DriverError, memory_allocator.AllocationError) as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {errno.errorcode.get(exc.errno or 0, '?')}: {exc}", file=sys.stderr)
        return 1
    finally:
        for started_node in (shares_node, mps_node):
            if started_node is not None:
                started_node.stop()
    ok = (report.leftover_cdi_files == 0 and report.leftover_checkpoint_entries == 0
          and shared.clean and len(set(shared.allocated.values())) == 1 and with_mps.clean
          and (with_mig is None or with_mig.clean)
          and (with_health is None or with_health.clean))
    prepared = (len(report.cdi_ids) + len(shared.allocated) + 1
                + (0 if with_mig is None else len(with_mig.allocated)))
    print(f"done in {time.monotonic() - started:.1f}s: {prepared} claim(s) prepared "
          f"and unprepared, {'clean' if ok else 'NOT clean'}", flush=True)
    return 0 if ok else 1
