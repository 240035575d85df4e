"""MPS through the GPU claim driver with its real adapters, on the embedded cluster.

The Deployment adapter creates the daemon's Deployment; `apps.cli.mps_runner` plays the
deployment controller and kubelet (it runs the real wrapper, which runs the stand-in
`nvidia-cuda-mps-control` of the driver root); nvidia-smi is the stand-in that records calls.
Covers: prepare answers once the daemon took its settings, and unprepare quits it and
restores DEFAULT; a claim deleted while prepared is cleaned by the stale sweep, daemon and
compute mode included; a plugin that died after starting a daemon (entry PrepareStarted)
leaves nothing running once the kubelet's unprepare comes; a daemon that never turns Ready
fails the prepare with a retryable error naming the Deployment; the wrapper's own paths
(`--check`, a missing control program); host directories made and removed idempotently.
"""

from __future__ import annotations

import dataclasses
import pathlib
import threading
import time
from collections.abc import Callable, Iterator

import gpuplugin_env as env
import pytest

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.fs import driverroot
from adapters.memory import cluster as memory_cluster
from adapters.mps import daemons as mps_daemons
from adapters.mps import hostdirs
from adapters.mps import simulated as mps_simulated
from adapters.nvml import gpu_simulation
from adapters.nvsmi import simulated as smi_simulated
from adapters.nvsmi import timeslice
from apps.cli import gpu_demo, mps_runner
from apps.gpuplugin import driver as gpu_driver
from apps.gpuplugin import mps_daemon
from apps.pluginkit.driver import PluginPorts
from core import errors, gates, kinds, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import mps
from core.gpu import mps as gpu_mps

NODE = "gpu-node-0"
DRIVER_NS = "nvidia-dra-driver"
MPS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
       "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 30}}}


class Crash(BaseException):
    """The plugin process dying at a step (nothing in the plugin catches it)."""


class CrashingDaemons:
    """The real daemons port; `crash_on_await` kills the 'process' once the daemon started."""

    def __init__(self, inner: mps_daemons.DeploymentMpsDaemons) -> None:
        self.inner = inner
        self.crash_on_await = False

    def start(self, daemon: gpu_mps.MpsDaemon) -> None:
        self.inner.start(daemon)

    def await_ready(self, daemon_id: str) -> None:
        if self.crash_on_await:
            self.crash_on_await = False
            raise Crash()
        self.inner.await_ready(daemon_id)

    def stop(self, daemon_id: str) -> None:
        self.inner.stop(daemon_id)


def wait_until(probe: Callable[[], bool], *, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@dataclasses.dataclass
class Node:
    cluster: memory_cluster.InMemoryCluster
    files: gpu_demo.NodeFiles
    daemons: CrashingDaemons
    root: pathlib.Path
    driver: gpu_driver.GpuPluginDriver

    def smi_calls(self) -> tuple[str, ...]:
        return smi_simulated.calls(str(pathlib.Path(self.files.nvidia_smi).parent))

    def restart(self) -> None:
        self.driver = _driver(self)


def _driver(node: Node) -> gpu_driver.GpuPluginDriver:
    smi = timeslice.NvidiaSmiTimeSlicer(node.files.nvidia_smi)
    inventory = gpu_simulation.simulated_gpus("hgx-h100", node_name=NODE).gpu_inventory()
    driver_files = driverroot.DriverRoot(
        node.files.driver_root, dev_root=node.files.dev_root,
        proc_devices=node.files.proc_devices,
    ).driver_files()
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=node.cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(node.root / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(node.root / "cdi"), file_name=gpu_cdi.spec_file_name),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=models.FeatureGates(values={gates.MPS_SUPPORT: True}),
        inventory=lambda: inventory,
        files=lambda: driver_files,
        time_slicer=smi, compute_mode=smi, mps_daemons=node.daemons,
        mps_root=str(node.root / "plugin" / "mps"),
        retry_budget_s=1.0,
    )
    driver.recover()
    return driver


@pytest.fixture
def node(tmp_path: pathlib.Path) -> Iterator[Node]:
    cluster = memory_cluster.InMemoryCluster()
    files = gpu_demo.lay_out_node_files(str(tmp_path / "host"), profile="hgx-h100",
                                        node_name=NODE)
    control_root = str(tmp_path / "plugin" / "mps")
    host = mps.DaemonHost(
        namespace=DRIVER_NS, node_name=NODE, image="driver:test",
        command=("gpu-kubelet-plugin", mps_daemon.SUBCOMMAND),
        host_driver_root=files.driver_root, control_root=control_root,
    )
    daemons = CrashingDaemons(mps_daemons.DeploymentMpsDaemons(
        cluster, host=host, dirs=hostdirs.MpsHostDirs(control_root, tmpfs=False),
        ready_timeout_s=10.0, gone_timeout_s=10.0, poll_s=0.01,
    ))
    runner = mps_runner.MpsRunner(cluster, namespace=DRIVER_NS)
    built = Node(cluster=cluster, files=files, daemons=daemons, root=tmp_path,
                 driver=None)  # type: ignore[arg-type]
    built.driver = _driver(built)
    try:
        yield built
    finally:
        runner.close()


def _daemon_log_dir(node: Node, uid: str) -> str:
    [name] = [d["metadata"]["name"] for d in
              node.cluster.list(kinds.DEPLOYMENT.kind, namespace=DRIVER_NS).items]
    assert name.startswith(f"mps-control-daemon-{uid}-")
    return mps.daemon_dirs(str(node.root / "plugin" / "mps"),
                           name.removeprefix(mps.DAEMON_NAME_PREFIX)).log


def _deployments(node: Node) -> tuple[object, ...]:
    return node.cluster.list(kinds.DEPLOYMENT.kind, namespace=DRIVER_NS).items


def test_prepare_answers_with_the_daemon_configured_and_unprepare_quits_it(node: Node) -> None:
    claim = env.gpu_claim(node.cluster, "mps", node=NODE, devices=("gpu-0",), config=MPS)
    assert node.driver.node_prepare((claim,))[claim.uid].error == ""
    log_dir = _daemon_log_dir(node, claim.uid)
    state = mps_simulated.state(log_dir)
    assert state is not None and state["activeThreadPercentage"] == 30
    gpu = str(state["visibleDevices"])
    assert f"-i {gpu} -c EXCLUSIVE_PROCESS" in node.smi_calls()

    assert node.driver.node_unprepare((claim,))[claim.uid].error == ""
    assert _deployments(node) == ()
    assert not pathlib.Path(log_dir).exists()
    assert node.smi_calls()[-1] == f"-i {gpu} -c DEFAULT"


def test_the_stale_sweep_stops_the_daemon_of_a_deleted_claim(node: Node) -> None:
    claim = env.gpu_claim(node.cluster, "gone", node=NODE, devices=("gpu-1",), config=MPS)
    assert node.driver.node_prepare((claim,))[claim.uid].error == ""
    log_dir = _daemon_log_dir(node, claim.uid)
    node.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=claim.namespace, name=claim.name)

    (removed,) = node.driver.clean_stale_claims()
    assert removed.entry.claim_uid == claim.uid
    assert _deployments(node) == ()
    assert mps_simulated.state(log_dir) is None
    assert node.smi_calls()[-1].endswith("-c DEFAULT")


def test_a_daemon_started_before_a_crash_goes_with_the_kubelets_unprepare(node: Node) -> None:
    claim = env.gpu_claim(node.cluster, "crash", node=NODE, devices=("gpu-2",), config=MPS)
    # The plugin dies after starting the daemon, before the CDI spec: the entry says
    # PrepareStarted and records the daemon.
    node.daemons.crash_on_await = True
    with pytest.raises(Crash):
        node.driver.node_prepare((claim,))
    entry = node.driver.load_checkpoint().entries[claim.uid]
    assert entry.state is models.ClaimState.PREPARE_STARTED and entry.record.mps
    assert len(_deployments(node)) == 1
    node.restart()
    assert node.driver.node_unprepare((claim,))[claim.uid].error == ""
    assert _deployments(node) == ()
    assert node.smi_calls()[-1].endswith("-c DEFAULT")


def test_a_daemon_that_never_turns_ready_fails_the_prepare_naming_it(node: Node) -> None:
    daemons = node.daemons.inner
    daemons._ready_timeout_s = 0.05  # NB: a short wait for the test
    # No runner answers in that namespace: the daemon's pod never comes.
    daemons._host = dataclasses.replace(daemons._host, namespace="elsewhere")
    claim = env.gpu_claim(node.cluster, "stuck", node=NODE, devices=("gpu-3",), config=MPS)
    error = node.driver.node_prepare((claim,))[claim.uid].error
    assert "is not Ready after 0.05s (no pod yet)" in error
    assert "kubectl -n elsewhere describe deployment mps-control-daemon-" in error


# ---------------------------------------------------------------- the wrapper and directories


def test_the_wrapper_fails_without_a_control_program_and_its_probe_says_not_ready(
    tmp_path: pathlib.Path,
) -> None:
    environ = {"MPS_DRIVER_ROOT": str(tmp_path / "empty-root"), "PATH": str(tmp_path),
               "MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
               "MPS_LOG_DIRECTORY": str(tmp_path / "log")}
    (tmp_path / "log").mkdir()
    assert mps_daemon.run(environ, stop=threading.Event()) == 1
    assert mps_daemon.check(environ) == 1


def test_the_wrapper_configures_the_daemon_and_quits_it_on_stop(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    mps_simulated.install(str(root / "usr" / "bin"))
    environ = {"MPS_DRIVER_ROOT": str(root), "PATH": "/usr/bin:/bin",
               "MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
               "MPS_LOG_DIRECTORY": str(tmp_path / "log"),
               "CUDA_VISIBLE_DEVICES": "GPU-a",
               "MPS_CONTROL_COMMANDS": "set_default_device_pinned_mem_limit GPU-a 512M"}
    stop = threading.Event()
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(mps_daemon.run(environ, stop=stop)))
    thread.start()
    try:
        wait_until(lambda: mps_daemon.check(environ) == 0 or bool(done), what="startup")
        state = mps_simulated.state(str(tmp_path / "log"))
        assert state is not None and state["pinnedMemLimits"] == {"GPU-a": "512M"}
    finally:
        stop.set()
        thread.join(timeout=30)
    assert done == [0]
    assert mps_simulated.state(str(tmp_path / "log")) is None


def test_host_dirs_are_made_and_removed_idempotently(tmp_path: pathlib.Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2048000 kB\n")
    dirs = hostdirs.MpsHostDirs(str(tmp_path / "mps"), tmpfs=False, meminfo=str(meminfo))
    assert dirs.shm_size() == "1024000k"
    made = dirs.create("d1")
    assert dirs.create("d1") == made and dirs.daemon_ids() == frozenset({"d1"})
    dirs.remove("d1")
    dirs.remove("d1")
    assert not pathlib.Path(made.root).exists()
    broken = hostdirs.MpsHostDirs(str(tmp_path / "mps"), meminfo=str(tmp_path / "none"))
    assert broken.shm_size() == hostdirs.FALLBACK_SHM_SIZE


def test_a_stopped_daemon_whose_pod_lingers_is_retried(node: Node) -> None:
    node.daemons.inner._gone_timeout_s = 0.05  # NB: a short wait for the test
    node.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lingering", "namespace": DRIVER_NS,
                     "labels": {mps.LABEL_APP: mps.deployment_name("x-1")}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    })
    with pytest.raises(errors.RetryableError, match="still terminating"):
        node.daemons.inner.stop("x-1")
