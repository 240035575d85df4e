"""`make faults`: SIGKILL the real kubelet plugin at every durable step, restart it, check.

For each IMEX mode and each operation (prepare, unprepare, recovery of a corrupt
checkpoint at start-up, clean-up of a claim deleted while the plugin was down) the
harness first runs the operation once with `CD_DRA_FAULT_TRACE` set, which lists every
durable step the plugin takes (`adapters.fs._atomic.FAULT_POINTS`) in order. Then, for
every step the operation took, it runs the operation again in a fresh node with
`CD_DRA_FAULT=<point>:<n>`, so the plugin SIGKILLs itself right before that step,
restarts the plugin without the fault, and checks what a kubelet relies on:

- an acked prepare is kept: a new prepare answers the same CDI ids and the file exists;
- an acked unprepare never comes back (no CDI file, no checkpoint entry), nor does the
  entry of a claim deleted from the API once it was cleaned;
- every answer's CDI ids resolve to a device in a CDI file;
- no `.*.tmp` file is left once the plugin has started;
- the checkpoint and the CDI directory agree;
- the operation cut short can be retried, and the node can prepare a new claim.

Mode `mps` runs the GPU plugin (`python -m apps.gpuplugin`, gate MPSSupport, simulated
hgx-h100) instead, every claim an MPS claim of its own GPU: besides the file steps it is also
killed right before each compute mode set and each MPS daemon started, awaited or stopped
(`apps.gpuplugin.fault_marked`). The harness plays the node's deployment controller and kubelet
for the daemons' Deployments (`apps.cli.mps_runner`: the real wrapper, the stand-in
`nvidia-cuda-mps-control`), so a daemon outlives a killed plugin as it would on a node. It
further checks that, after the restart, exactly the prepared claims have a daemon Deployment
and their GPUs are in EXCLUSIVE_PROCESS, and that once every claim is unprepared (or swept)
no Deployment, daemon pod or daemon directory is left, every GPU is back in DEFAULT and no
checkpoint entry remains, also after one more restart.

Mode `mig` runs the GPU plugin with gate DynamicMIG instead, every claim a 1g.10gb MIG
partition of its own GPU: besides the file steps it is killed right before each MIG device
created or destroyed (`mig.create`, `mig.destroy`), so also after a create and before the CDI
write or PrepareCompleted, and after a destroy before the checkpoint drops the claim. The
simulated GPUs keep their MIG state in the driver root, so it outlives the killed plugin; after
the restart the node must hold exactly the MIG devices of the prepared claims, and none once
every claim is unprepared, also after one more restart.

Mode `fm` runs the GPU plugin with gate FabricManagerPartitioning instead, every claim a pair
of GPUs forming a 2-GPU Fabric Manager partition of its own (the simulated HGX board and
Fabric Manager, its activations in the driver root, so they outlive the killed plugin as Fabric
Manager's do): besides the file steps it is killed right before and right after each partition
activation (`fm.activate`, `fm.activated`: after it and before the CDI write or
PrepareCompleted) and right before each deactivation (`fm.deactivate`). After the restart
exactly the prepared claims' partitions must be active, and none once every claim is
unprepared, also after one more restart.

The plugin runs as `python -m apps.kubeletplugin` against an embedded API server, driven
over its real gRPC sockets. The last line of the output is the summary
`faults: <points> injection points x <modes> modes, <n> consistent, <m> inconsistent`
and the exit status is 1 when any case is inconsistent.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from adapters import fabricmanager
from adapters.fs import _atomic
from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import client as grpc_client
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from adapters.nvml import gpu_simulation, simulated
from adapters.nvsmi import simulated as nvsmi_simulated
from apps.cli import gpu_demo, mps_runner
from apps.gpuplugin import settings as gpu_settings
from apps.kubeletplugin import settings as cd_settings
from bench import gpu as gpu_bench
from core import errors, gates, kinds, models, names
from core.computedomain import checkpoint_records as cd_records
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import mps

PROFILE = "gb200-nvl72"
NAMESPACE = "faults"
MPS_MODE = "mps"
MIG_MODE = "mig"
FM_MODE = "fm"
MODES: tuple[str, ...] = ("hostManaged", "driverManaged", MPS_MODE, MIG_MODE, FM_MODE)
GPU_PROFILE = "hgx-h100"
DRIVER_NAMESPACE = "nvidia-dra-driver"
START_TIMEOUT_S = 90.0
CALL_TIMEOUT_S = 30.0
EXIT_TIMEOUT_S = 30.0

_MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "hostManaged": ("--imex-mode", "hostManaged", "--imex-isolation", "none",
                    "--feature-gates", "HostManagedIMEX=true", "--host-imex-check", "false"),
    "driverManaged": ("--imex-mode", "driverManaged"),
}


class Operation(enum.StrEnum):
    """What the plugin is doing when it is killed."""

    PREPARE = "prepare"
    UNPREPARE = "unprepare"
    RECOVERY = "recovery"
    CLEANUP = "cleanup"
    # A graceful stop (SIGTERM): it folds the checkpoint journal into a new snapshot.
    STOP = "stop"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """One kill: the n-th hit of `point` while the plugin runs `operation` in `mode`."""

    mode: str
    operation: Operation
    point: str
    hit: int

    @property
    def fault(self) -> str:
        return f"{self.point}:{self.hit}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """What the checks found after the kill and restart; consistent when `problems` is empty."""

    case: Case
    killed: bool
    problems: tuple[str, ...]

    @property
    def consistent(self) -> bool:
        return not self.problems

    def line(self) -> str:
        c = self.case
        head = f"mode={c.mode} op={c.operation.value} point={c.point} hit={c.hit}"
        if not self.killed:
            head += " (fault not reached)"
        if self.consistent:
            return f"{head}: consistent"
        return f"{head}: INCONSISTENT: " + "; ".join(self.problems)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Summary:
    """All verdicts of a run, and the points the plugin reached at least once."""

    verdicts: tuple[Verdict, ...]
    points: tuple[str, ...]
    modes: tuple[str, ...]

    @property
    def inconsistent(self) -> int:
        return sum(1 for v in self.verdicts if not v.consistent)

    def line(self) -> str:
        consistent = len(self.verdicts) - self.inconsistent
        return (
            f"faults: {len(self.points)} injection points x {len(self.modes)} modes, "
            f"{consistent} consistent, {self.inconsistent} inconsistent"
        )


class PluginProcess:
    """`python -m apps.kubeletplugin` with its output in a file (a full pipe would stall it)."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str], log_path: pathlib.Path,
                 module: str = "apps.kubeletplugin"):
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in reap()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def was_killed(self, timeout_s: float = EXIT_TIMEOUT_S) -> bool:
        """True when the process died of SIGKILL (waiting up to `timeout_s` for it to die)."""
        try:
            code = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return code == -signal.SIGKILL

    def output_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def reap(self) -> None:
        if self.running:
            self.popen.kill()
        self.popen.wait(timeout=EXIT_TIMEOUT_S)
        self._log.close()


class PluginDied(Exception):
    """The plugin process exited (the injected SIGKILL, or a crash) while we waited on it."""


class Node:
    """One simulated node: its directories, the embedded API server, and claims it knows."""

    module = "apps.kubeletplugin"
    driver = names.DRIVER_NAME
    codec: Any = cd_records.CODEC

    def __init__(self, root: pathlib.Path, *, mode: str) -> None:
        self.root = root
        self.mode = mode
        self.node = str(simulated.profile_nodes(PROFILE)[0])
        self.cluster = memory_cluster.InMemoryCluster()
        self.server = apiserver.EmbeddedAPIServer(self.cluster).start()
        self.kubeconfig = root / "kubeconfig"
        self.server.write_kubeconfig(str(self.kubeconfig))
        (root / "devices").write_text(simulated.simulated_proc_devices(), encoding="utf-8")
        (root / "boot_id").write_text(simulated.simulated_boot_id(self.node) + "\n",
                                      encoding="utf-8")
        self.cdi = fs_cdi.CDIDirectory(str(root / "cdi"))
        self.cd_uid = self._create_domain()
        self._processes: list[PluginProcess] = []

    @property
    def plugin_dir(self) -> pathlib.Path:
        return self.root / "plugin"

    @property
    def checkpoint_path(self) -> pathlib.Path:
        return self.plugin_dir / cd_settings.CHECKPOINT_FILE

    @property
    def last_process(self) -> PluginProcess:
        return self._processes[-1]

    def close(self) -> None:
        for process in self._processes:
            process.reap()
        self.server.stop()
        self.cluster.close()

    # ------------------------------------------------------------ cluster objects

    def _create_domain(self) -> str:
        self.cluster.create(kinds.NODE.kind, {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}})
        created = self.cluster.create(kinds.COMPUTE_DOMAIN.kind, {
            "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": "cd", "namespace": NAMESPACE},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "cd-ch"}}},
        })
        if self.mode == "driverManaged":
            # Stands in for the IMEX daemon the controller would run: ready on this node.
            self.cluster.patch(
                kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="cd", subresource="status",
                patch={"status": {"status": "Ready", "nodes": [{
                    "name": self.node, "ipAddress": "10.0.0.1", "cliqueID": "",
                    "index": 0, "status": "Ready"}]}},
            )
        return str(created["metadata"]["uid"])

    def claim(self, name: str) -> models.ClaimRef:
        """A channel claim of the node's ComputeDomain, allocated to a pod on this node."""
        pod = self.cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
            "spec": {"nodeName": self.node, "containers": [{"name": "main", "image": "x"}]},
        })
        created = self.cluster.create(kinds.RESOURCE_CLAIM.kind, {
            "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": names.CHANNEL_REQUEST_NAME, "exactly": {
                "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
        })
        params = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                  "domainID": self.cd_uid}
        self.cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
            patch={"status": {
                "allocation": {"devices": {
                    "results": [{"request": names.CHANNEL_REQUEST_NAME,
                                 "driver": names.DRIVER_NAME, "pool": self.node,
                                 "device": names.channel_device_name(0)}],
                    "config": [{"source": "FromClaim",
                                "requests": [names.CHANNEL_REQUEST_NAME],
                                "opaque": {"driver": names.DRIVER_NAME,
                                           "parameters": params}}],
                }},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod",
                                 "uid": pod["metadata"]["uid"]}],
            }},
        )
        return models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]),
                               namespace=NAMESPACE, name=name)

    def delete_claim(self, ref: models.ClaimRef) -> None:
        """The claim and its pod leave the API (as while the plugin is down)."""
        self.cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name=f"{ref.name}-pod")
        self.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=ref.name)

    # ------------------------------------------------------------ the plugin

    def start(self, *, fault: str = "", trace: pathlib.Path | None = None) -> PluginProcess:
        """Start the plugin and wait until it answers GetInfo; PluginDied if it exits first."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "NODE_NAME", _atomic.FAULT_ENV,
                            _atomic.FAULT_TRACE_ENV)}
        env["PYTHONUNBUFFERED"] = "1"
        if fault:
            env[_atomic.FAULT_ENV] = fault
        if trace is not None:
            env[_atomic.FAULT_TRACE_ENV] = str(trace)
        log_path = self.root / f"plugin-{len(self._processes)}.log"
        process = PluginProcess(self.plugin_args(), env=env, log_path=log_path,
                                module=self.module)
        self._processes.append(process)
        self._wait_registered(process)
        return process

    def plugin_args(self) -> list[str]:
        """The plugin's flags for this node."""
        return [
            "--node-name", self.node, "--namespace", "nvidia-dra-driver",
            "--nvml", f"simulated:{PROFILE}",
            "--proc-devices", str(self.root / "devices"),
            "--boot-id-path", str(self.root / "boot_id"),
            "--plugin-dir", str(self.plugin_dir),
            "--registry-dir", str(self.root / "registry"),
            "--cdi-root", self.cdi.root, "--kubeconfig", str(self.kubeconfig),
            "--health-port", "0", "--metrics-port", "0", "--retry-budget-seconds", "1",
            *_MODE_FLAGS[self.mode],
        ]

    def _wait_registered(self, process: PluginProcess) -> None:
        socket = self.root / "registry" / f"{self.driver}-reg.sock"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if not process.running:
                raise PluginDied(f"plugin exited with {process.popen.returncode} while starting")
            if grpc_client.try_register(str(socket)) is not None:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"plugin did not register within {START_TIMEOUT_S:.0f}s; output:\n"
                    f"{process.output_tail()}")
            time.sleep(0.02)  # poll the starting plugin, do not spin on it
            time.sleep(0.05)

    def _dra(self) -> grpc_client.DRAClient:
        return grpc_client.DRAClient(str(self.plugin_dir / names.DRA_SOCKET_NAME),
                                     timeout_s=CALL_TIMEOUT_S)

    def prepare(self, ref: models.ClaimRef) -> models.ClaimResult:
        """One NodePrepareResources call; PluginDied when the call as a whole fails."""
        try:
            with self._dra() as dra:
                return dra.prepare([ref]).get(ref.uid, models.ClaimResult(error="(no answer)"))
        except grpc_client.PluginCallError as exc:
            raise PluginDied(exc.message) from exc

    def unprepare(self, ref: models.ClaimRef) -> models.ClaimResult:
        try:
            with self._dra() as dra:
                return dra.unprepare([ref]).get(ref.uid, models.ClaimResult(error="(no answer)"))
        except grpc_client.PluginCallError as exc:
            raise PluginDied(exc.message) from exc

    def wait_cleaned(self, ref: models.ClaimRef, process: PluginProcess) -> None:
        """Until `process` logs that it cleaned `ref`; PluginDied if it exits first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        wanted = f"uid={ref.uid}"
        while True:
            text = process.log_path.read_text(encoding="utf-8", errors="replace")
            if any("event=stale_claim_cleaned" in line and wanted in line
                   for line in text.splitlines()):
                return
            if not process.running:
                raise PluginDied(f"plugin exited with {process.popen.returncode} while cleaning")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"stale claim {ref.name} not cleaned within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.05)

    def holds(self, ref: models.ClaimRef) -> bool:
        """Whether the node still has a CDI file or a live checkpoint entry for `ref`."""
        return os.path.exists(self.cdi.spec_path(ref.uid)) or str(ref.uid) in _safe_entries(self)

    # ------------------------------------------------------------ what is on disk

    def temp_files(self) -> list[str]:
        """Temp files of interrupted writes, relative to the node's root."""
        found = []
        for directory in (self.plugin_dir, pathlib.Path(self.cdi.root)):
            if directory.is_dir():
                found += [str((directory / n).relative_to(self.root)) for n in os.listdir(directory)
                          if _atomic.is_temp_file(n)]
        return sorted(found)

    def entries(self) -> dict[str, models.ClaimState]:
        """Live checkpoint entries (tombstones left out); DecodeError if unreadable."""
        # snapshot + journal
        decoded = fs_checkpoints.read_checkpoint(str(self.checkpoint_path), self.codec)
        if decoded is None:
            return {}
        return {str(uid): e.state for uid, e in decoded.entries.items()
                if e.state is not models.ClaimState.PREPARE_ABORTED}

    def unresolved_ids(self, ref: models.ClaimRef, result: models.ClaimResult) -> list[str]:
        """The answer's CDI ids that name no device in the claim's CDI spec file."""
        ids = [i for d in result.devices for i in d.cdi_device_ids]
        try:
            spec = self.cdi.read(ref.uid)
        except errors.DecodeError:
            spec = None
        if spec is None:
            return ids
        known = {f"{spec.get('kind', '')}={d.get('name', '')}" for d in spec.get("devices", ())}
        return [i for i in ids if i not in known]


class MpsNode(Node):
    """A simulated GPU node whose plugin runs MPS claims, each on a GPU of its own.

    The harness process runs the daemons' Deployments (`mps_runner.MpsRunner`) as the node's
    kubelet would: a daemon outlives a killed plugin. The stand-in nvidia-smi records every
    compute mode set, so a GPU's mode is the last one set on it (DEFAULT if none).
    """

    module = "apps.gpuplugin"
    driver = names.GPU_DRIVER_NAME
    codec = gpu_records.CODEC

    def __init__(self, root: pathlib.Path, *, mode: str) -> None:
        self.root = root
        self.mode = mode
        self.node = gpu_demo.NODE_NAME
        self.cluster = memory_cluster.InMemoryCluster()
        self.server = apiserver.EmbeddedAPIServer(self.cluster).start()
        self.kubeconfig = root / "kubeconfig"
        self.server.write_kubeconfig(str(self.kubeconfig))
        self.files = gpu_demo.lay_out_node_files(str(root / "host"), profile=GPU_PROFILE,
                                                 node_name=self.node)
        self.cluster.create(kinds.NODE.kind, gpu_demo.node_object(self.node))
        self.cdi = fs_cdi.CDIDirectory(str(root / "cdi"), file_name=gpu_cdi.spec_file_name)
        inventory = gpu_simulation.simulated_gpus(GPU_PROFILE, node_name=self.node)
        self.gpu_uuids = {g.name: g.uuid for g in inventory.gpu_inventory().gpus}
        self.gpu_of: dict[str, str] = {}
        self._processes: list[PluginProcess] = []
        self.runner = mps_runner.MpsRunner(self.cluster, namespace=DRIVER_NAMESPACE)

    @property
    def checkpoint_path(self) -> pathlib.Path:
        return self.plugin_dir / gpu_settings.CHECKPOINT_FILE

    def close(self) -> None:
        for process in self._processes:
            process.reap()
        self.runner.close()
        self.server.stop()
        self.cluster.close()

    def plugin_args(self) -> list[str]:
        return [
            "--node-name", self.node, "--namespace", DRIVER_NAMESPACE,
            "--nvml", f"simulated:{GPU_PROFILE}",
            "--nvidia-driver-root", self.files.driver_root, "--dev-root", self.files.dev_root,
            "--proc-devices", self.files.proc_devices,
            "--boot-id-path", self.files.boot_id_path,
            "--sysfs-root", str(self.root / "sys"),
            "--plugin-dir", str(self.plugin_dir),
            "--registry-dir", str(self.root / "registry"),
            "--cdi-root", self.cdi.root, "--kubeconfig", str(self.kubeconfig),
            "--health-port", "0", "--metrics-port", "0", "--retry-budget-seconds", "1",
            "--feature-gates", f"{gates.MPS_SUPPORT}=true", "--mps-image", "faults:mps",
            "--mps-shm-tmpfs", "false",
        ]

    def claim(self, name: str) -> models.ClaimRef:
        """An MPS claim of the next unused GPU, allocated to a pod on this node."""
        device = f"gpu-{len(self.gpu_of)}"
        pod = self.cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
            "spec": {"nodeName": self.node, "containers": [{"name": "main", "image": "x"}]},
        })
        created = self.cluster.create(kinds.RESOURCE_CLAIM.kind, {
            "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com"}}]}},
        })
        self.cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
            patch={"status": {
                "allocation": {"devices": {
                    "results": [{"request": "gpu", "driver": self.driver, "pool": self.node,
                                 "device": device}],
                    "config": [gpu_bench.MPS_CONFIG],
                }},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod",
                                 "uid": pod["metadata"]["uid"]}],
            }},
        )
        uid = str(created["metadata"]["uid"])
        self.gpu_of[uid] = device
        return models.ClaimRef(uid=names.ClaimUID(uid), namespace=NAMESPACE, name=name)

    # ------------------------------------------------------------ what MPS left

    def compute_mode(self, device: str) -> str:
        """The compute mode last set on `device`'s GPU (DEFAULT when never set)."""
        uuid = self.gpu_uuids[device]
        mode = mps.ComputeMode.DEFAULT.value
        for call in nvsmi_simulated.calls(os.path.dirname(self.files.nvidia_smi)):
            words = call.split()
            if words[:3] == ["-i", uuid, "-c"] and len(words) > 3:
                mode = words[3]
        return mode

    def daemon_claims(self) -> dict[str, str]:
        """The claim UID of every daemon Deployment, by Deployment name."""
        return {
            str(d["metadata"]["name"]): str(d["metadata"]["labels"].get(mps.LABEL_CLAIM, ""))
            for d in self.cluster.list(kinds.DEPLOYMENT.kind, namespace=DRIVER_NAMESPACE).items
        }

    def daemon_pods(self) -> list[str]:
        return [str(p["metadata"]["name"]) for p in self.cluster.list(
            kinds.POD.kind, namespace=DRIVER_NAMESPACE,
            label_selector={mps.LABEL_COMPONENT: "true"}).items]

    def daemon_dirs(self) -> list[str]:
        root = self.plugin_dir / mps.CONTROL_FILES_DIR
        return sorted(n for n in os.listdir(root) if (root / n).is_dir()) if root.is_dir() else []

    def device_problems(self, held: Sequence[models.ClaimRef], *, when: str) -> list[str]:
        """Exactly the claims `held` have a daemon (Deployment, directories) and an
        EXCLUSIVE_PROCESS GPU; every other GPU is DEFAULT; nothing held: no daemon pod."""
        wanted = {str(ref.uid) for ref in held}
        problems = [f"{when}: daemon Deployment {name} runs for claim {uid}, not prepared"
                    for name, uid in sorted(self.daemon_claims().items()) if uid not in wanted]
        running = set(self.daemon_claims().values())
        problems += [f"{when}: prepared claim {ref.name} has no daemon Deployment"
                     for ref in held if str(ref.uid) not in running]
        problems += [f"{when}: daemon directory {d} of no prepared claim is left"
                     for d in self.daemon_dirs() if not any(d.startswith(u) for u in wanted)]
        if not held:
            problems += [f"{when}: daemon pod {p} is left" for p in self.daemon_pods()]
        exclusive = {self.gpu_of[u] for u in wanted if u in self.gpu_of}
        for device in sorted(self.gpu_uuids):
            mode = self.compute_mode(device)
            expected = (mps.ComputeMode.EXCLUSIVE_PROCESS if device in exclusive
                        else mps.ComputeMode.DEFAULT)
            if mode != expected:
                problems.append(f"{when}: {device} is in compute mode {mode}, not {expected}")
        return problems


class MigNode(MpsNode):
    """A simulated GPU node whose plugin runs dynamic MIG claims (gate DynamicMIG), each a
    1g.10gb partition of a GPU of its own, created at prepare and destroyed at unprepare.

    The simulated GPUs keep their MIG state in the driver root, so it outlives a killed
    plugin as a GPU's does; the harness reads it there. No MPS daemon runs here.
    """

    def plugin_args(self) -> list[str]:
        args = super().plugin_args()
        at = args.index("--feature-gates")
        return [*args[:at], "--feature-gates", f"{gates.DYNAMIC_MIG}=true"]

    def claim(self, name: str) -> models.ClaimRef:
        """A claim of a 1g.10gb partition of the next unused GPU, allocated to a pod here."""
        device = f"gpu-{len(self.gpu_of)}-mig-1g10gb-19-0"
        pod = self.cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
            "spec": {"nodeName": self.node, "containers": [{"name": "main", "image": "x"}]},
        })
        created = self.cluster.create(kinds.RESOURCE_CLAIM.kind, {
            "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "mig.nvidia.com"}}]}},
        })
        self.cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
            patch={"status": {
                "allocation": {"devices": {"results": [{
                    "request": "gpu", "driver": self.driver, "pool": self.node,
                    "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod",
                                 "uid": pod["metadata"]["uid"]}],
            }},
        )
        uid = str(created["metadata"]["uid"])
        self.gpu_of[uid] = device
        return models.ClaimRef(uid=names.ClaimUID(uid), namespace=NAMESPACE, name=name)

    def mig_devices(self) -> set[str]:
        """The MIG devices the simulated node holds now (its state file in the driver root)."""
        gpus = gpu_simulation.simulated_gpus(
            GPU_PROFILE, node_name=self.node,
            state_path=gpu_simulation.state_path_in(self.files.driver_root))
        return {m.name for m in gpus.gpu_inventory().migs}

    def device_problems(self, held: Sequence[models.ClaimRef], *, when: str) -> list[str]:
        """The node holds exactly the MIG devices of the claims `held`."""
        wanted = {self.gpu_of[str(ref.uid)] for ref in held if str(ref.uid) in self.gpu_of}
        found = self.mig_devices()
        return ([f"{when}: MIG device {d} of no prepared claim is left"
                 for d in sorted(found - wanted)]
                + [f"{when}: prepared claim's MIG device {d} is missing"
                   for d in sorted(wanted - found)])


class FabricNode(MpsNode):
    """A simulated HGX node whose plugin activates Fabric Manager partitions (gate
    FabricManagerPartitioning), each claim a pair of GPUs forming a 2-GPU partition of its own.

    The simulated Fabric Manager keeps its activations in the driver root, so they outlive a
    killed plugin as Fabric Manager's do; the harness reads them there.
    """

    # The HGX board's 2-GPU partitions by GPU minor (modules 1+3, 2+4, 5+7, 6+8): 4, 5, 6, 7.
    PAIRS: tuple[tuple[str, str], ...] = (
        ("gpu-0", "gpu-2"), ("gpu-1", "gpu-3"), ("gpu-4", "gpu-6"), ("gpu-5", "gpu-7"),
    )
    PARTITION_OF: dict[tuple[str, str], int] = dict(zip(PAIRS, (4, 5, 6, 7), strict=True))

    def __init__(self, root: pathlib.Path, *, mode: str) -> None:
        super().__init__(root, mode=mode)
        self.pair_of: dict[str, tuple[str, str]] = {}

    def plugin_args(self) -> list[str]:
        args = super().plugin_args()
        at = args.index("--feature-gates")
        return [*args[:at], "--feature-gates", f"{gates.FABRIC_MANAGER_PARTITIONING}=true"]

    def claim(self, name: str) -> models.ClaimRef:
        """A claim of the next unused pair of GPUs, allocated to a pod on this node."""
        pair = self.PAIRS[len(self.pair_of)]
        pod = self.cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
            "spec": {"nodeName": self.node, "containers": [{"name": "main", "image": "x"}]},
        })
        created = self.cluster.create(kinds.RESOURCE_CLAIM.kind, {
            "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 2}}]}},
        })
        self.cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
            patch={"status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpus", "driver": self.driver, "pool": self.node,
                     "device": device} for device in pair]}},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod",
                                 "uid": pod["metadata"]["uid"]}],
            }},
        )
        uid = str(created["metadata"]["uid"])
        self.pair_of[uid] = pair
        return models.ClaimRef(uid=names.ClaimUID(uid), namespace=NAMESPACE, name=name)

    def active_partitions(self) -> set[int]:
        """The partitions Fabric Manager has active now (its state file in the driver root)."""
        fabric = fabricmanager.SimulatedFabricManager(
            state_path=fabricmanager.state_path_in(self.files.driver_root))
        return {p.partition_id for p in fabric.partitions() if p.active}

    def device_problems(self, held: Sequence[models.ClaimRef], *, when: str) -> list[str]:
        """Exactly the partitions of the claims `held` are active."""
        wanted = {self.PARTITION_OF[self.pair_of[str(ref.uid)]] for ref in held
                  if str(ref.uid) in self.pair_of}
        found = self.active_partitions()
        return ([f"{when}: partition {p} of no prepared claim is active"
                 for p in sorted(found - wanted)]
                + [f"{when}: prepared claim's partition {p} is not active"
                   for p in sorted(wanted - found)])


def new_node(root: pathlib.Path, *, mode: str) -> Node:
    """The node of `mode`: a ComputeDomain node, or a GPU node running MPS, MIG or Fabric
    Manager claims."""
    if mode == FM_MODE:
        return FabricNode(root, mode=mode)
    if mode == MIG_MODE:
        return MigNode(root, mode=mode)
    return MpsNode(root, mode=mode) if mode == MPS_MODE else Node(root, mode=mode)


# ---------------------------------------------------------------- one operation


@dataclasses.dataclass
class Ledger:
    """What the kubelet was told: acked prepares (with their ids) and acked unprepares."""

    prepared: dict[str, tuple[models.ClaimRef, tuple[str, ...]]] = dataclasses.field(
        default_factory=dict)
    unprepared: dict[str, models.ClaimRef] = dataclasses.field(default_factory=dict)
    # Claims deleted from the API while prepared: the plugin must clean them, for good.
    deleted: dict[str, models.ClaimRef] = dataclasses.field(default_factory=dict)
    in_flight: tuple[Operation, models.ClaimRef] | None = None


def _ids(result: models.ClaimResult) -> tuple[str, ...]:
    return tuple(i for d in result.devices for i in d.cdi_device_ids)


def _acked_prepare(node: Node, ref: models.ClaimRef, ledger: Ledger) -> None:
    result = node.prepare(ref)
    if result.error:
        raise AssertionError(f"setup prepare of {ref.name} failed: {result.error}")
    ledger.prepared[str(ref.uid)] = (ref, _ids(result))


def _setup(node: Node, operation: Operation, ledger: Ledger, *, traced: Callable[[], None],
           fault: str, trace: pathlib.Path | None) -> None:
    """Bring the node to the state before `operation`, then run it (killed, maybe)."""
    if operation is Operation.RECOVERY:
        # A claim acked, the plugin killed, and the checkpoint found corrupt at the next start:
        # start-up then quarantines the file and rebuilds state from the CDI specs.
        clean = node.start()
        _acked_prepare(node, node.claim("kept"), ledger)
        clean.popen.kill()
        clean.popen.wait(timeout=EXIT_TIMEOUT_S)
        with open(node.checkpoint_path, "r+b") as checkpoint_file:
            checkpoint_file.seek(20)
            checkpoint_file.write(b"#")
        traced()
        node.start(fault=fault, trace=trace)
        return
    if operation is Operation.CLEANUP:
        # A claim acked, the plugin down, the claim deleted meanwhile: the next start cleans
        # its entry and CDI file (and must keep the other claim).
        clean = node.start()
        _acked_prepare(node, node.claim("kept"), ledger)
        gone = node.claim("gone")
        _acked_prepare(node, gone, ledger)
        clean.popen.kill()
        clean.popen.wait(timeout=EXIT_TIMEOUT_S)
        node.delete_claim(gone)
        ledger.prepared.pop(str(gone.uid))
        ledger.deleted[str(gone.uid)] = gone
        traced()
        node.wait_cleaned(gone, node.start(fault=fault, trace=trace))
        return
    if operation is Operation.STOP:
        stopping = node.start(fault=fault, trace=trace)
        _acked_prepare(node, node.claim("kept"), ledger)
        traced()
        stopping.popen.send_signal(signal.SIGTERM)
        stopping.popen.wait(timeout=EXIT_TIMEOUT_S)
        return
    node.start(fault=fault, trace=trace)
    if operation is Operation.PREPARE:
        ref = node.claim("victim")
        traced()
        ledger.in_flight = (operation, ref)
        result = node.prepare(ref)
        ledger.in_flight = None
        if not result.error:
            ledger.prepared[str(ref.uid)] = (ref, _ids(result))
        return
    ref = node.claim("victim")
    _acked_prepare(node, ref, ledger)
    traced()
    ledger.in_flight = (operation, ref)
    result = node.unprepare(ref)
    ledger.in_flight = None
    if not result.error:
        ledger.prepared.pop(str(ref.uid), None)
        ledger.unprepared[str(ref.uid)] = ref


def _check(node: Node, ledger: Ledger) -> list[str]:
    """Restart without the fault and check every invariant; returns the problems found.

    After the kubelet's retries, the plugin is killed and started once more, so that an
    unprepare acked by the restarted plugin is also checked never to come back.
    """
    problems = _restart_and_look(node, ledger)
    if problems and problems[0].startswith("restarted plugin"):
        return problems
    for ref, ids in ledger.prepared.values():
        problems += _reprepare(node, ref, expect_ids=ids, what=f"acked prepare of {ref.name}")
    if ledger.in_flight is not None:
        operation, ref = ledger.in_flight
        if operation is Operation.PREPARE:
            problems += _reprepare(node, ref, expect_ids=None,
                                   what=f"retried prepare of {ref.name}")
        retried = node.unprepare(ref)
        if retried.error:
            problems.append(f"retried unprepare of {ref.name} failed: {retried.error}")
        else:
            ledger.prepared.pop(str(ref.uid), None)
            ledger.unprepared[str(ref.uid)] = ref
        ledger.in_flight = None
    fresh = node.claim("fresh")
    fresh_problems = _reprepare(node, fresh, expect_ids=None, what="prepare of a new claim")
    problems += fresh_problems
    if isinstance(node, MpsNode):
        held = [ref for ref, _ids in ledger.prepared.values()]
        held += [] if fresh_problems else [fresh]
        problems += node.device_problems(held, when="after the restart")
        problems += _drain(node, ledger, held)
    if ledger.unprepared or ledger.deleted:
        node.last_process.reap()
        again = _restart_and_look(node, ledger, cleaned_before=True)
        if isinstance(node, MpsNode):
            again += node.device_problems((), when="after one more restart")
        problems += [p for p in again if p not in problems]
    return problems


def _drain(node: MpsNode, ledger: Ledger, held: Sequence[models.ClaimRef]) -> list[str]:
    """Unprepare every claim still prepared; then nothing of MPS may be left on the node."""
    problems = []
    for ref in held:
        result = node.unprepare(ref)
        if result.error:
            problems.append(f"unprepare of {ref.name} failed: {result.error}")
            continue
        ledger.prepared.pop(str(ref.uid), None)
        ledger.unprepared[str(ref.uid)] = ref
    problems += node.device_problems((), when="after every claim was unprepared")
    entries = _safe_entries(node)
    if entries:
        problems.append(f"after every claim was unprepared: checkpoint entries left: "
                        f"{sorted(entries)}")
    return problems


def _restart_and_look(node: Node, ledger: Ledger, *, cleaned_before: bool = False) -> list[str]:
    """Start the plugin without a fault; check the files and that acked unprepares stay gone."""
    try:
        node.start()
    except PluginDied as exc:
        return [f"restarted plugin did not come up: {exc}"]
    problems: list[str] = []
    # NB: the clean-up runs in the background from start-up: look once it has let go.
    if cleaned_before:
        problems += [f"cleaned claim {ref.name} came back after a restart"
                     for ref in ledger.deleted.values() if node.holds(ref)]
    else:
        problems += [f"claim {ref.name}, deleted from the API, is still held on the node "
                     f"{START_TIMEOUT_S:.0f}s after start-up"
                     for ref in ledger.deleted.values() if not _released(node, ref)]
    leftovers = node.temp_files()
    if leftovers:
        problems.append(f"temp files left after start-up: {', '.join(leftovers)}")
    problems += _disk_agreement(node)
    entries = _safe_entries(node)
    for uid, ref in ledger.unprepared.items():
        if os.path.exists(node.cdi.spec_path(ref.uid)):
            problems.append(f"acked unprepare of {ref.name} came back: its CDI file exists")
        if uid in entries:
            problems.append(f"acked unprepare of {ref.name} came back in the checkpoint")
    return problems


def _released(node: Node, ref: models.ClaimRef) -> bool:
    """Whether the node lets go of `ref` (no CDI file, no entry) before the deadline."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while node.holds(ref):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _safe_entries(node: Node) -> dict[str, models.ClaimState]:
    try:
        return node.entries()
    except errors.DecodeError:
        return {}


def _disk_agreement(node: Node) -> list[str]:
    try:
        entries = node.entries()
    except errors.DecodeError as exc:
        return [f"checkpoint unreadable after restart: {exc.message}"]
    files = {str(uid) for uid in node.cdi.claim_uids()}
    problems = [f"claim {uid} is PrepareCompleted in the checkpoint but has no CDI file"
                for uid, state in sorted(entries.items())
                if state is models.ClaimState.PREPARE_COMPLETED and uid not in files]
    problems += [f"CDI file of claim {uid} has no checkpoint entry"
                 for uid in sorted(files - set(entries))]
    return problems


def _reprepare(node: Node, ref: models.ClaimRef, *, expect_ids: tuple[str, ...] | None,
               what: str) -> list[str]:
    try:
        result = node.prepare(ref)
    except PluginDied as exc:
        return [f"{what}: the plugin failed the call: {exc}"]
    if result.error:
        return [f"{what} answered an error: {result.error}"]
    problems = []
    if expect_ids is not None and _ids(result) != expect_ids:
        problems.append(f"{what} answered other CDI ids {_ids(result)} (acked {expect_ids})")
    unresolved = node.unresolved_ids(ref, result)
    if unresolved:
        problems.append(f"{what} answered CDI ids with no CDI file behind them: {unresolved}")
    return problems


# ---------------------------------------------------------------- the matrix


def _new_root() -> pathlib.Path:
    # NB: short, under /tmp: unix socket paths must stay under 107 bytes.
    return pathlib.Path(tempfile.mkdtemp(prefix="cdf-", dir="/tmp"))


def trace_operation(mode: str, operation: Operation) -> list[str]:
    """Every durable step of the process `operation` runs in, in order of its hits.

    Steps taken before the operation starts (plugin start-up, setup prepares) carry a
    leading "-": `cases_of` counts them, since the n of `<point>:<n>` counts from the start
    of the process, but makes no case of them.
    """
    root = _new_root()
    trace = root / "trace"
    node = new_node(root, mode=mode)
    mark = [0]

    def traced() -> None:
        mark[0] = len(_read_trace(trace))

    try:
        _setup(node, operation, Ledger(), traced=traced, fault="", trace=trace)
        hits = _read_trace(trace)
    finally:
        node.close()
        shutil.rmtree(root, ignore_errors=True)
    return [f"-{point}" if i < mark[0] else point for i, point in enumerate(hits)]


def _read_trace(trace: pathlib.Path) -> list[str]:
    try:
        return trace.read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return []


def cases_of(mode: str, operation: Operation, hits: Sequence[str],
             points: frozenset[str] | None = None) -> Iterator[Case]:
    """One case per hit inside the operation, numbered per point since the process began."""
    counts: dict[str, int] = {}
    for hit in hits:
        point = hit.removeprefix("-")
        counts[point] = counts.get(point, 0) + 1
        if hit.startswith("-") or (points is not None and point not in points):
            continue
        yield Case(mode=mode, operation=operation, point=point, hit=counts[point])


def run_case(case: Case, *, keep_failed: bool = False) -> Verdict:
    """Run `case` in a fresh node: kill at its hit, restart, check.

    With `keep_failed`, an inconsistent node's directory (files, plugin logs) is kept and
    named in the verdict.
    """
    root = _new_root()
    node = new_node(root, mode=case.mode)
    ledger = Ledger()
    killed = False
    try:
        died = False
        try:
            _setup(node, case.operation, ledger, traced=lambda: None, fault=case.fault,
                   trace=None)
        except PluginDied:
            died = True
        faulted = node.last_process
        # NB: the caller may see the socket close a moment before the child can be reaped.
        killed = faulted.was_killed(timeout_s=EXIT_TIMEOUT_S if died else 0)
        if not killed and not faulted.running:
            problems = [f"plugin exited with {faulted.popen.returncode}, not by the injected "
                        f"SIGKILL:\n{faulted.output_tail()}"]
        else:
            faulted.reap()
            problems = _check(node, ledger)
    except PluginDied as exc:
        problems = [f"plugin died during the checks: {exc}"]
    except AssertionError as exc:  # a setup step or a start-up that never finished
        problems = [str(exc)]
    finally:
        node.close()
    if problems and keep_failed:
        problems.append(f"node kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return Verdict(case=case, killed=killed, problems=tuple(problems))


def run_matrix(
    *,
    modes: Sequence[str] = MODES,
    operations: Sequence[Operation] = tuple(Operation),
    points: frozenset[str] | None = None,
    report: Callable[[str], None] = print,
    keep_failed: bool = False,
) -> Summary:
    """Trace, then kill at every traced hit (of `points`, if given) in every mode x operation."""
    verdicts: list[Verdict] = []
    reached: set[str] = set()
    for mode in modes:
        for operation in operations:
            hits = trace_operation(mode, operation)
            for case in cases_of(mode, operation, hits, points):
                reached.add(case.point)
                verdict = run_case(case, keep_failed=keep_failed)
                verdicts.append(verdict)
                report(verdict.line())
    return Summary(verdicts=tuple(verdicts), points=tuple(sorted(reached)), modes=tuple(modes))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--operations", default=",".join(o.value for o in Operation))
    parser.add_argument("--points", default="", help="only these points (comma-separated)")
    parser.add_argument("--keep-failed", action="store_true",
                        help="keep the directory of each inconsistent node for inspection")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    points = frozenset(p for p in args.points.split(",") if p) or None
    summary = run_matrix(
        modes=[m for m in args.modes.split(",") if m],
        operations=[Operation(o) for o in args.operations.split(",") if o],
        points=points,
        keep_failed=args.keep_failed,
    )
    unreached = sorted(set(_atomic.FAULT_POINTS) - set(summary.points))
    if unreached:
        print(f"points never reached by these operations: {', '.join(unreached)}")
    print(summary.line())
    return 1 if summary.inconsistent else 0


if __name__ == "__main__":
    sys.exit(main())
