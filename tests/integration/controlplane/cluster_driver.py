"""The driver installed on the control-plane tier: the chart's objects, its pods run by a kubelet.

Nothing here starts an app by hand. The chart's controller Deployment and kubelet-plugin
DaemonSet become pods through the real controllers, are scheduled by the real scheduler and
started by the real kubelet; the stand-in runtime runs each of our containers as a real process
(a *recipe* per command: the container's env from the kubelet, plus the node-local files a
simulated node needs) with the ServiceAccount token the kubelet projected into the pod. The IMEX
daemons of driver-managed ComputeDomains run the same way, with the stand-in `nvidia-imex`.

The chart is rendered with the kubelet's own directories (upstream's keys
`kubeletPluginsDirectoryPath`/`kubeletRegistrarDirectoryPath`) and a CDI root that the runtime
reads, so the sockets the plugins register and the CDI files they write mean the same to the
kubelet and the runtime, as on a node.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "realkube"))

import control_plane
import realkube_driver
from control_plane import ControlPlane, Kubelet, Runtime
from kubernetes import client, dynamic
from realkube_server import free_port, wait_for

from adapters import fabricmanager
from adapters.imex import simulated as simulated_imex
from adapters.nvml import simulated
from apps.cli import gpu_demo

RELEASE = realkube_driver.RELEASE
NAMESPACE = realkube_driver.NAMESPACE
CD_PROFILE = "gb200-nvl72"
DEFAULT_GPU_PROFILE = "hgx-h100"
NODE = str(simulated.profile_nodes(CD_PROFILE)[0])
VENV_BIN = pathlib.Path(sys.executable).parent
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
HOOK_ANNOTATION = "helm.sh/hook"

Obj = dict[str, Any]

# hostCheck off: no host nvidia-imex runs here to answer the plugin's readiness query.
MODES: dict[str, Obj] = {
    "driverManaged": {},
    "hostManaged-channel": {
        "featureGates": {"HostManagedIMEXDaemon": True},
        "resources": {"computeDomains": {"imex": {
            "mode": "hostManaged", "hostCheck": False, "isolation": "channel"}}},
    },
}


def annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


def hook_weight(obj: Mapping[str, Any]) -> int:
    return int(annotations(obj).get("helm.sh/hook-weight", "0"))


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> Obj:
    """`extra` deep-merged over a copy of `base` (values files, as Helm merges them)."""
    merged = copy.deepcopy(dict(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def containerd_status_info(*, enable_cdi: bool, spec_dirs: tuple[str, ...]) -> dict[str, Any]:
    """A verbose CRI Status info as containerd's: its CRI config under "config" (the stand-in
    runtime answers it, JSON-encoding the non-string values)."""
    return {"config": {"enableCDI": enable_cdi, "cdiSpecDirs": list(spec_dirs)}}


class NodeFiles:
    """What a simulated node's host has besides the kubelet: /proc files, a driver root."""

    def __init__(self, root: pathlib.Path, node: str, *, gpu_profile: str) -> None:
        self.root = root
        self.gpu_profile = gpu_profile
        self.gpu = gpu_demo.lay_out_node_files(str(root / "gpu"), profile=gpu_profile,
                                               node_name=node)
        self.proc_devices = self.gpu.proc_devices
        self.boot_id = self.gpu.boot_id_path
        self.imex_bin = root / "imex-bin"
        simulated_imex.install(str(self.imex_bin))
        # The IMEX management capability beside /proc/devices, as a GB200 driver shows it.
        capability = pathlib.Path(self.proc_devices).parent / "driver/nvidia/capabilities"
        capability.mkdir(parents=True, exist_ok=True)
        (capability / "fabric-imex-mgmt").write_text(simulated_imex.MGMT_CAPABILITY_TEXT,
                                                      encoding="utf-8")


def unmount_under(root: pathlib.Path) -> None:
    """Unmount everything mounted below `root`, deepest first. The kubelet bind-mounts its own
    root directory and a tmpfs per pod's projected volume, and leaves them when it stops: the
    scratch directory could not be removed, and every run left them behind in /tmp."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        points = [line.split()[4] for line in mounts if len(line.split()) > 4]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", point], check=False, capture_output=True)


class Cluster:
    """One node (`NODE`) with its kubelet and runtime, the control plane, the chart installed."""

    def __init__(self, mode: str, *, values: Mapping[str, Any] | None = None,
                 gpu_profile: str = DEFAULT_GPU_PROFILE,
                 kube_gates: Mapping[str, bool] | None = None,
                 kube_apis: Mapping[str, bool] | None = None,
                 gpu_env: Mapping[str, str] | None = None) -> None:
        bin_dir = control_plane.binaries_dir()
        if bin_dir is None:
            if os.environ.get("CI") == "true":
                pytest.fail(control_plane.MISSING)
            pytest.skip(control_plane.MISSING)
        self.mode = mode
        # Short: unix socket paths are limited to 107 bytes.
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
        # Kubernetes feature gates of every component (API server, scheduler, controllers,
        # kubelet), e.g. an alpha DRA feature a test needs.
        self.kube_gates = dict(kube_gates or {})
        # API group versions the API server serves beyond its defaults (`--runtime-config`),
        # e.g. the alpha API an alpha gate's controllers watch.
        self.plane = ControlPlane(self.workdir / "plane", bin_dir=bin_dir, nodes=(NODE,),
                                  feature_gates=self.kube_gates, runtime_config=kube_apis)
        self.node_root = self.workdir / "n"
        self.cdi_root = self.node_root / "cdi"
        self.cdi_root.mkdir(parents=True)
        self.files = NodeFiles(self.node_root / "host", NODE, gpu_profile=gpu_profile)
        self.values = merge(MODES[mode], values or {})
        # More environment for the GPU plugin's container (e.g. a stand-in sysfs).
        self.gpu_env = dict(gpu_env or {})
        self._ports = [free_port() for _ in range(6)]
        self.runtime: Runtime | None = None
        self.kubelet: Kubelet | None = None

    # -- start / stop -------------------------------------------------------------------

    def start(self) -> Cluster:
        try:
            self.plane.start()
            self.start_node()
            self.install()
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self) -> None:
        recipes = self.node_root / "recipes.json"
        recipes.write_text(json.dumps(self.recipes(), indent=1), encoding="utf-8")
        status_info = self.node_root / "status-info.json"
        if not status_info.exists():
            # Like containerd with CDI on, reading the CDI root the plugins write: the plugins'
            # runtime CDI check (docs/operations.md) asks for this at start.
            status_info.write_text(json.dumps(containerd_status_info(
                enable_cdi=True, spec_dirs=(str(self.cdi_root),))), encoding="utf-8")
        self.runtime = Runtime(
            self.node_root, proto=self.plane.bin_dir / "cri-api.proto",
            api_server=self.plane.kube.url, recipes=recipes, cdi_dirs=(self.cdi_root,),
            status_info=status_info,
            # Absent: the stand-in's own name; a test writes one to answer like CRI-O.
            version_info=self.node_root / "version-info.json",
        )
        self.kubelet = Kubelet(NODE, root=self.node_root, plane=self.plane, runtime=self.runtime,
                               feature_gates=self.kube_gates)
        wait_for(self.kubelet.healthy, what="the kubelet's /healthz", timeout_s=120)
        wait_for(self.node_ready, what=f"node {NODE} Ready", timeout_s=120)

    def stop_node(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        if self.runtime is not None:
            self.runtime.stop()
            self.runtime = None

    def stop(self) -> None:
        self.stop_node()
        self.plane.stop()

    def remove(self) -> None:
        """Delete the scratch directories (kept when KEEP_CONTROLPLANE_DIRS=1, to debug)."""
        if os.environ.get("KEEP_CONTROLPLANE_DIRS") != "1":
            unmount_under(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the chart ----------------------------------------------------------------------

    @property
    def kubelet_dir(self) -> pathlib.Path:
        return self.node_root / "kl"

    def chart_values(self) -> Obj:
        # Ports of its own for every server in the chart: another cluster of this tier may be
        # running beside this one on the same loopback (their pods share the host's ports).
        return merge(self.values, {
            "controller": {"metricsPort": self._ports[0], "healthPort": self._ports[1]},
            "kubeletPlugin": {
                "healthPort": self._ports[2], "metricsPort": self._ports[3],
                "gpus": {"healthPort": self._ports[4], "metricsPort": self._ports[5]},
                "kubeletPluginsDirectoryPath": str(self.kubelet_dir / "plugins"),
                "kubeletRegistrarDirectoryPath": str(self.kubelet_dir / "plugins_registry"),
                "cdiRoot": str(self.cdi_root),
                # The plugins ask the stand-in runtime whether it applies CDI specs.
                "containerRuntimeEndpoint": str(self.node_root / "cri.sock"),
                # A timing, not a path: stale claims are found within a test (chart: 30 s).
                "staleClaimCleanupIntervalSeconds": 2,
            },
        })

    def rendered(self) -> list[Obj]:
        return realkube_driver.render(self.chart_values())

    def install(self) -> None:
        """As `helm install` does: CRDs, the pre-install hooks (the preflight Job, run by the
        kubelet and waited for; deleted once it succeeded), then every other object."""
        objects = self.rendered()
        hooks = [o for o in objects if HOOK_ANNOTATION in annotations(o)]
        self.plane.kube.apply(realkube_driver.render_crds())
        for weight in sorted({hook_weight(h) for h in hooks}):
            batch = [h for h in hooks if hook_weight(h) == weight]
            self.plane.kube.apply(batch)
            for job in (h for h in batch if h["kind"] == "Job"):
                self.wait_job_succeeded(job["metadata"]["namespace"], job["metadata"]["name"])
        for hook in reversed(hooks):
            if "hook-succeeded" in annotations(hook).get("helm.sh/hook-delete-policy", ""):
                self.delete(hook)
        self.plane.kube.apply([o for o in objects if HOOK_ANNOTATION not in annotations(o)])

    def wait_job_succeeded(self, namespace: str, name: str) -> None:
        batch = client.BatchV1Api(self.admin_client())

        def finished() -> str | None:
            job = batch.read_namespaced_job(name, namespace)
            for condition in (job.status.conditions or []) if job.status else []:
                if condition.status == "True" and condition.type in ("Complete", "Failed"):
                    return str(condition.type)
            return None

        outcome = self.eventually(finished, what=f"Job {namespace}/{name} to finish",
                                  timeout_s=120)
        if outcome != "Complete":
            raise AssertionError(f"Job {namespace}/{name} failed:\n{self.logs()}")

    def delete(self, obj: Mapping[str, Any]) -> None:
        api = dynamic.DynamicClient(self.admin_client()).resources.get(
            api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") if api.namespaced else None
        # Background propagation: the Job's pods go with it, as Helm deletes hooks.
        api.delete(name=obj["metadata"]["name"], namespace=namespace,
                   body={"propagationPolicy": "Background"})

    def recipes(self) -> list[Obj]:
        """How the runtime runs our containers: the container's command with the node's files."""
        path = [str(VENV_BIN)]
        # NB: PYTHONPATH: the venv's console scripts import the checkout under test, not the
        # one the venv was installed from (a worktree's tier runs its own code).
        common = {"PYTHONUNBUFFERED": "1", "LOG_VERBOSITY": "4", "PYTHONPATH": str(REPO_ROOT)}
        # Every pod's processes share this host's network: a plugin's health and metrics ports
        # on its pod's IP, so a new plugin pod beside the old one (a surging rollout) can bind
        # them, and the kubelet's probes of the new pod never reach the old one.
        plugin = {**common, "LISTEN_ADDRESS": "{pod_ip}"}
        return [
            {"match": {"command0": "compute-domain-controller"}, "path": path,
             "env": {**common}},
            {"match": {"command0": "computedomain"}, "path": path, "env": {**common}},
            {"match": {"command0": "compute-domain-kubelet-plugin"}, "path": path,
             "env": {**plugin, "NVML": f"simulated:{CD_PROFILE}",
                     "PROC_DEVICES": self.files.proc_devices,
                     "BOOT_ID_PATH": self.files.boot_id,
                     "RETRY_BUDGET_SECONDS": "5"}},
            # An MPS claim's control daemon (a Deployment the GPU plugin creates): the wrapper,
            # its directories as the pod mounts them; it runs the stand-in
            # nvidia-cuda-mps-control the simulated driver root holds (gpu_demo's layout).
            {"match": {"command0": "gpu-kubelet-plugin", "arg1": "mps-control-daemon"},
             "path": path,
             "env": {**common, "MPS_DRIVER_ROOT": "{mount:/driver-root}",
                     "MPS_PIPE_DIRECTORY": "{mount:/driver-root/tmp/nvidia-mps}",
                     "MPS_LOG_DIRECTORY": "{mount:/driver-root/var/log/nvidia-mps}"}},
            {"match": {"command0": "gpu-kubelet-plugin"}, "path": path,
             "env": {**plugin, "NVML": f"simulated:{self.files.gpu_profile}",
                     # No tmpfs: the plugin runs unprivileged here (shm a plain directory).
                     "MPS_SHM_TMPFS": "false", "MPS_READY_TIMEOUT_SECONDS": "20",
                     "NVIDIA_DRIVER_ROOT": self.files.gpu.driver_root,
                     "CONTAINER_DRIVER_ROOT": self.files.gpu.driver_root,
                     "DEV_ROOT": self.files.gpu.dev_root,
                     "PROC_DEVICES": self.files.proc_devices,
                     "BOOT_ID_PATH": self.files.boot_id,
                     "RETRY_BUDGET_SECONDS": "5", **self.gpu_env}},
            {"match": {"command0": "compute-domain-daemon"},
             "path": [str(self.files.imex_bin), *path],
             "env": {**common, "IMEXD_DIR": "{mount:/imexd}", "HOSTS_FILE": "{state}/hosts",
                     "NVML": f"simulated:{CD_PROFILE}"}},
        ]

    # -- observing ----------------------------------------------------------------------

    def admin_client(self) -> client.ApiClient:
        return self.plane.kube.admin_client()

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.admin_client())

    def node_ready(self) -> bool:
        try:
            node = self.core().read_node(NODE)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(c.type == "Ready" and c.status == "True"
                   for c in (node.status.conditions or []))

    def check_alive(self) -> None:
        self.plane.check_running()
        for process in (self.runtime, self.kubelet):
            if process is not None and not process.running:
                raise AssertionError(f"{process.argv[0]} exited:\n{process.output()[-6000:]}")

    def logs(self) -> str:
        """The tail of every component's and container's log, for a failure message."""
        parts = [f"== {name}\n{text[-3000:]}" for name, text in self.plane.component_logs().items()]
        for process in (self.runtime, self.kubelet):
            if process is not None:
                parts.append(f"== {process.log_path.name}\n{process.output()[-3000:]}")
        if self.runtime is not None:
            for log in sorted(self.runtime.state_dir.glob("**/*.log")):
                parts.append(f"== {log.relative_to(self.workdir)}\n"
                             f"{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def eventually(self, probe: Callable[[], Any], *, what: str, timeout_s: float = 90.0) -> Any:
        """`wait_for`, failing early when a component died and with every log on a timeout."""

        def checked() -> Any:
            self.check_alive()
            return probe()

        try:
            return wait_for(checked, what=what, timeout_s=timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None


def active_fabric_partitions(cluster: Cluster) -> set[int]:
    """The partitions the node's simulated Fabric Manager has active now (its state file)."""
    state = fabricmanager.state_path_in(cluster.files.gpu.driver_root)
    assert state is not None, "the GPU node has no simulated driver root"
    fabric = fabricmanager.SimulatedFabricManager(state_path=state)
    return {p.partition_id for p in fabric.partitions() if p.active}


def started(mode: str, *, values: Mapping[str, Any] | None = None,
            gpu_profile: str = DEFAULT_GPU_PROFILE,
            kube_gates: Mapping[str, bool] | None = None,
            kube_apis: Mapping[str, bool] | None = None,
            gpu_env: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """A started `Cluster` for a fixture; stopped and removed afterwards."""
    cluster = Cluster(mode, values=values, gpu_profile=gpu_profile, kube_gates=kube_gates,
                      kube_apis=kube_apis, gpu_env=gpu_env)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        cluster.remove()
