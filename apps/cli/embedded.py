"""The embedded default: a whole driver deployment in one process, no cluster, no GPU.

An in-memory cluster (with a CEL-evaluating DRA allocator), one real kubelet plugin per
simulated node (gRPC over unix sockets, checkpoint and CDI files on disk), a kubelet
emulator per node that registers the plugin through its registration socket, and the
controller as its binary runs it (informers, work queue, workers: `apps.controller.running`),
reacting to every change as it happens. Used by `computedomain demo`, the scenario tests and
the bench; `Embedded.settle` waits for the controller's answer to what they changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from adapters.fs import procfs
from adapters.grpc import kubelet_emulator
from adapters.imex import simulated as imex_simulated
from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster
from adapters.nvml import simulated
from apps.cli import daemon_fleet as daemon_fleet_mod
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running as controller_running
from apps.controller import settling
from apps.kubeletplugin import daemon_claims as plugin_daemon_claims
from apps.kubeletplugin import settings as plugin_settings
from apps.kubeletplugin import wiring
from apps.pluginkit import serving
from core import errors, gates, kinds, models, names
from core.computedomain import modes, node_facts, objects

log = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class SimulatedNode:
    name: str
    plugin: serving.Plugin[node_facts.ImexNodeFacts]
    kubelet: kubelet_emulator.KubeletEmulator
    settings: plugin_settings.Settings


# How long `start_embedded` waits for the controller's informers to list everything once.
_CONTROLLER_SYNC_S = 30.0
# How long a stopping controller may take to finish the keys its workers hold.
_CONTROLLER_STOP_S = 10.0


@dataclasses.dataclass(kw_only=True)
class RunningController:
    """The controller loop of the deployment, on a thread of its own until `stop`."""

    loop: controller_running.Controller
    metrics: controller_metrics.ControllerMetrics
    settling: settling.Settling
    stop_event: threading.Event
    # Actions the loop had applied at the last `Embedded.settle`.
    counted: int = 0

    @classmethod
    def start(
        cls, cluster: memory_cluster.InMemoryCluster, *, config: models.DriverConfig
    ) -> RunningController:
        """Start the loop and wait until its informers have listed the cluster once."""
        metrics = controller_metrics.ControllerMetrics()
        loop = controller_running.Controller(controller_reconciler.Reconciler(
            cluster=cluster, config=config, metrics=metrics))
        running = cls(loop=loop, metrics=metrics, settling=settling.Settling(loop),
                      stop_event=threading.Event())
        threading.Thread(target=loop.run, args=(running.stop_event,), name="controller",
                         daemon=True).start()
        if not loop.synced.wait(_CONTROLLER_SYNC_S):
            running.stop()
            raise errors.RetryableError(
                f"the controller's informers did not sync within {_CONTROLLER_SYNC_S:g}s")
        return running

    def stop(self) -> None:
        self.stop_event.set()
        self.loop.stopped.wait(_CONTROLLER_STOP_S)


@dataclasses.dataclass(kw_only=True)
class Embedded:
    """A running embedded deployment; create with `start_embedded`."""

    cluster: memory_cluster.InMemoryCluster
    allocator: memory_allocator.Allocator
    controller: RunningController
    config: models.DriverConfig
    notes: tuple[str, ...]
    nodes: dict[str, SimulatedNode]
    workdir: str

    def settle(self, *, timeout_s: float = 30.0) -> int:
        """Wait until the controller has answered every change so far and has nothing left to
        do (see `apps.controller.settling`); returns the actions it applied since the last
        settle. RetryableError if it is still busy after `timeout_s`."""
        self.controller.settling.wait(timeout_s=timeout_s)
        total = self.controller.metrics.actions_applied()
        applied, self.controller.counted = total - self.controller.counted, total
        return applied

    owns_workdir: bool = False
    # The simulated profile of the nodes (their daemons read its fabric records).
    profile: str = ""
    # Real compute-domain-daemon processes of driver-managed daemon pods (started on demand).
    daemon_fleet: daemon_fleet_mod.DaemonFleet | None = None

    def fleet(self) -> daemon_fleet_mod.DaemonFleet:
        """The daemon processes' fleet, started (with its API server) on first use."""
        if self.daemon_fleet is None:
            self.daemon_fleet = daemon_fleet_mod.DaemonFleet(
                self.cluster, workdir=self.workdir, namespace=self.config.namespace,
                profile=self.profile,
                driver_root_of=lambda node: driver_root(self.workdir, node),
            )
        return self.daemon_fleet

    def stop(self) -> None:
        self.controller.stop()
        if self.daemon_fleet is not None:
            self.daemon_fleet.close()
        for node in self.nodes.values():
            node.kubelet.close()
            node.plugin.stop(grace_s=0.5)
        self.cluster.close()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# NB: unix socket paths are limited to 107 bytes; node roots must stay short.
MAX_WORKDIR_LEN = 40


def check_workdir(workdir: str) -> None:
    """Raise ConfigError when a workdir the user named cannot hold the nodes' files and sockets.

    NB: `short_workdir` quietly replaces a long path with a temp dir (what tests want); a
    person who named a directory must hear that it cannot be used instead.
    """
    if not workdir:
        return
    where = f"--workdir {workdir}"
    if len(workdir) > MAX_WORKDIR_LEN:
        raise errors.ConfigError(
            f"{where}: {len(workdir)} characters, more than the {MAX_WORKDIR_LEN} that keep the "
            "nodes' unix socket paths under the kernel's 107-byte limit; use a shorter path "
            "(e.g. under /tmp) or leave --workdir out for a temporary one"
        )
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise errors.ConfigError(f"{where}: exists and is not a directory")
    parent = workdir if os.path.isdir(workdir) else os.path.dirname(os.path.abspath(workdir))
    while parent and not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise errors.ConfigError(f"{where}: {parent} is not writable")


def resolve_config(
    *,
    mode: str,
    isolation: str,
    feature_gates: str = "",
    max_channels: int = 2048,
    channel_slots: int = 8,
) -> modes.ResolvedConfig:
    """The embedded driver's configuration (raises ConfigError): the demo checks it first."""
    gates = feature_gates
    # NB: a substring test: "HostManagedIMEX" is the alias and the start of the gate's name.
    if mode == models.IMEXMode.HOST_MANAGED.value and "HostManagedIMEX" not in gates:
        gates = ",".join(g for g in (gates, "HostManagedIMEXDaemon=true") if g)
    if mode == models.IMEXMode.HOST_MANAGED.value and not isolation:
        # The embedded default story is host channel 0 shared; the driver itself defaults to
        # domain isolation, and channel isolation is asked for explicitly here.
        isolation = models.Isolation.NONE.value
    return modes.resolve_driver_config(
        mode=mode, isolation=isolation, feature_gates=gates, namespace="nvidia-dra-driver",
        max_channels=max_channels, channel_slots=channel_slots,
    )


def short_workdir(workdir: str) -> tuple[str, bool]:
    """`workdir` if socket paths under it fit, else a fresh short temp dir (owned)."""
    if workdir and len(workdir) <= MAX_WORKDIR_LEN:
        os.makedirs(workdir, exist_ok=True)
        return workdir, False
    return tempfile.mkdtemp(prefix="cd-", dir="/tmp"), True


def _node_files(workdir: str, node: str, *, major: int) -> procfs.ProcNodeFiles:
    """Real files standing in for the node's /proc entries."""
    proc_dir = os.path.join(workdir, node, "proc")
    os.makedirs(proc_dir, exist_ok=True)
    devices = os.path.join(proc_dir, "devices")
    boot_id = os.path.join(proc_dir, "boot_id")
    with open(devices, "w", encoding="utf-8") as f:
        f.write(simulated.simulated_proc_devices(major=major))
    capability = plugin_daemon_claims.capability_path(devices)
    os.makedirs(os.path.dirname(capability), exist_ok=True)
    with open(capability, "w", encoding="utf-8") as f:
        f.write(imex_simulated.MGMT_CAPABILITY_TEXT)
    if not os.path.exists(boot_id):
        with open(boot_id, "w", encoding="utf-8") as f:
            f.write(simulated.simulated_boot_id(node) + "\n")
    return procfs.ProcNodeFiles(proc_devices_path=devices, boot_id_path=boot_id)


def node_settings(
    workdir: str, node: str, *, config: models.DriverConfig, profile: str, retry_budget_s: float
) -> plugin_settings.Settings:
    root = os.path.join(workdir, node)
    return plugin_settings.Settings(
        node_name=node,
        namespace=config.namespace,
        feature_gates="",
        imex_mode=config.mode.value,
        imex_isolation=config.isolation.value,
        cdi_root=os.path.join(root, "cdi"),
        plugin_dir=os.path.join(root, "plugin"),
        registry_dir=os.path.join(root, "registry"),
        health_port=None,
        metrics_port=None,
        nvidia_driver_root="/",
        host_imex_check=False,
        imex_host_socket="",
        nvml=f"simulated:{profile}",
        cluster="memory",
        kubeconfig=None,
        proc_devices=os.path.join(root, "proc/devices"),
        boot_id_path=os.path.join(root, "proc/boot_id"),
        retry_budget_s=retry_budget_s,
        log_verbosity=2,
        channel_slots=config.channel_slots,
    )


def _node_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": fake_ip(name)}]},
    }


def fake_ip(name: str) -> str:
    digest = sum(ord(c) * (i + 1) for i, c in enumerate(name))
    return f"10.{digest % 200}.{(digest // 200) % 250}.{len(name) % 250 + 1}"


def driver_root(workdir: str, node: str) -> str:
    """The simulated driver root of a node: only its simulated state lives there."""
    return os.path.join(workdir, node, "driver-root")


def fabric_state_file(workdir: str, node: str) -> str:
    """The file that degrades a simulated node's NVLink fabric
    (`simulated.degrade_simulated_fabric`), under the node's simulated driver root."""
    return os.path.join(driver_root(workdir, node), simulated.STATE_DIR,
                        simulated.FABRIC_STATE_FILE)


def start_node(
    embedded: Embedded, node: str, *, profile: str, retry_budget_s: float, major: int = 242,
    clique_refresh_interval_s: float | None = None,
    container_runtime_endpoint: str = "none",
) -> SimulatedNode:
    """Start (or restart) the plugin of one simulated node and register it with its kubelet.

    The plugin judges the node's fabric health at start and every clique refresh interval
    (`clique_refresh_interval_s`, default the plugin's 10 minutes); `fabric_state_file`
    degrades it on demand. The container-runtime CDI check is off unless
    `container_runtime_endpoint` names a CRI socket (a stand-in runtime:
    `adapters.grpc.cri_fake`).
    """
    settings = dataclasses.replace(
        node_settings(
            embedded.workdir, node, config=embedded.config, profile=profile,
            retry_budget_s=retry_budget_s,
        ),
        container_runtime_endpoint=container_runtime_endpoint,
    )
    if clique_refresh_interval_s is not None:
        settings = dataclasses.replace(
            settings, clique_refresh_interval_s=clique_refresh_interval_s)
    inventory = simulated.SimulatedInventory(
        profile=profile, node_name=node,
        fabric_state_file=fabric_state_file(embedded.workdir, node),
    )
    facts = wiring.read_node_facts(
        node_name=node,
        files=_node_files(embedded.workdir, node, major=major),
        inventory=inventory,
        crash_on_fabric_errors=embedded.config.gates.enabled(
            gates.CRASH_ON_NVLINK_FABRIC_ERRORS),
    )
    plugin = wiring.start_plugin(
        settings, config=embedded.config, cluster=embedded.cluster, node=facts,
        probe_fabric=inventory.fabric_records,
    )
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=settings.registry_dir)
    kubelet.wait_for_plugin(names.DRIVER_NAME, timeout_s=10)
    # Slices are published once the kubelet confirmed the registration; the scheduler needs them.
    if not plugin.slices.published.wait(10):
        raise errors.RetryableError(f"node {node}: ResourceSlices not published within 10s")
    simulated_node = SimulatedNode(name=node, plugin=plugin, kubelet=kubelet, settings=settings)
    embedded.nodes[node] = simulated_node
    return simulated_node


def start_embedded(
    *,
    workdir: str,
    profile: str = "gb200-nvl72",
    mode: str = "hostManaged",
    isolation: str = "",
    feature_gates: str = "",
    retry_budget_s: float = 0.2,
    node_limit: int | None = None,
    max_channels: int = 2048,
    channel_slots: int = 8,
    clique_refresh_interval_s: float | None = None,
) -> Embedded:
    """Bring up cluster, DeviceClasses, nodes with their plugins and kubelets, controller.

    `clique_refresh_interval_s` replaces the plugins' 10 minutes between re-reads of the
    clique and the fabric's health (tests degrade the fabric and wait for the taint)."""
    resolved = resolve_config(
        mode=mode, isolation=isolation, feature_gates=feature_gates,
        max_channels=max_channels, channel_slots=channel_slots,
    )
    workdir, owned = short_workdir(workdir)
    cluster = memory_cluster.InMemoryCluster()
    for device_class in objects.device_classes(resolved.config):
        cluster.create(kinds.DEVICE_CLASS.kind, device_class)
    embedded = Embedded(
        cluster=cluster,
        allocator=memory_allocator.Allocator(cluster),
        controller=RunningController.start(cluster, config=resolved.config),
        config=resolved.config,
        notes=resolved.notes,
        nodes={},
        workdir=workdir,
        owns_workdir=owned,
        profile=profile,
    )
    try:
        node_names = simulated.profile_nodes(profile)[:node_limit]
        for node in node_names:
            cluster.create(kinds.NODE.kind, _node_object(node))
        for node in node_names:
            start_node(embedded, node, profile=profile, retry_budget_s=retry_budget_s,
                       clique_refresh_interval_s=clique_refresh_interval_s)
    except BaseException:
        embedded.stop()  # NB: nothing started may outlive a failed start (threads, sockets)
        raise
    return embedded


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[Embedded]:
    embedded = start_embedded(**kwargs)
    try:
        yield embedded
    finally:
        embedded.stop()


def unprepare_and_delete_pods(
    kubelet: Any, allocator: memory_allocator.Allocator, cluster: memory_cluster.InMemoryCluster,
    scheduled: Iterable[memory_allocator.ScheduledPod], *, driver: str, namespace: str,
) -> None:
    """As the kubelet and scheduler would once each pod is gone: unprepare its claims of
    `driver`, give its devices back and delete it; an unprepare error stops the demo."""
    for pod in scheduled:
        results = kubelet.unprepare(driver, claim_refs(pod.claims))
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise errors.RetryableError(f"NodeUnprepareResources failed: {'; '.join(failed)}")
        allocator.release_pod(pod.pod)
        cluster.delete(kinds.POD.kind, namespace=namespace, name=pod.pod["metadata"]["name"])


def claim_refs(claims: tuple[Mapping[str, Any], ...]) -> tuple[models.ClaimRef, ...]:
    return tuple(
        models.ClaimRef(
            uid=names.ClaimUID(c["metadata"]["uid"]),
            namespace=c["metadata"]["namespace"],
            name=c["metadata"]["name"],
        )
        for c in claims
    )


def wait_until(
    predicate: Any, *, timeout_s: float, what: str, every_s: float = 0.01
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise errors.RetryableError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(every_s)
