"""Dynamic MIG (gate DynamicMIG) in the GPU plugin, on the simulated NVML.

Covers, with the claim driver over one simulated HGX H100 node (shared across "restarts"):
prepare creates the MIG device and its CDI spec holds the created device's nodes; unprepare
destroys it; a kill after the create and before PrepareCompleted, then a restart, leaves
exactly the completed claims' devices, and the kubelet's retried prepare creates it again;
a teardown that fails stops the start; the partitioner and slice layout the plugin picks.
With the `gpu-kubelet-plugin` process: the gate is accepted, the node publishes its counter
sets in a slice of their own (the embedded API server says v1.35) and one slice of partitions
per GPU, and a partition is prepared and unprepared.
"""

from __future__ import annotations

import pathlib

import app_processes
import gpuplugin_env as env
import pytest

from adapters import nvml
from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import __main__ as gpu_main
from apps.gpuplugin import driver as gpu_driver
from apps.gpuplugin import wiring
from apps.pluginkit.driver import PluginPorts
from core import errors, gates, models, names, ports
from core.gpu import cdi as gpu_cdi
from core.gpu import devices, partitions

NODE = "node-a"
_1G = "gpu-0-mig-1g10gb-19-3"
_2G = "gpu-1-mig-2g20gb-14-0"
GATES = models.FeatureGates(values={gates.DYNAMIC_MIG: True})


class _Crash(BaseException):
    """The plugin process dying (not an error the driver handles)."""


class _CrashingCDI:
    """The CDI root; the plugin dies before it writes the spec of `crash_on`."""

    def __init__(self, inner: ports.CDIStore, crash_on: names.ClaimUID | None) -> None:
        self._inner = inner
        self._crash_on = crash_on

    def write(self, claim_uid: names.ClaimUID, spec: dict[str, object]) -> None:
        if claim_uid == self._crash_on:
            raise _Crash(claim_uid)
        self._inner.write(claim_uid, spec)

    def delete(self, claim_uid: names.ClaimUID) -> None:
        self._inner.delete(claim_uid)

    def claim_uids(self) -> frozenset[names.ClaimUID]:
        return self._inner.claim_uids()

    def read(self, claim_uid: names.ClaimUID) -> dict[str, object] | None:
        found = self._inner.read(claim_uid)
        return None if found is None else dict(found)


class _FailingDestroy:
    """A partitioner whose destroys fail (NVML refusing)."""

    def __init__(self, inner: nvml.SimulatedGpus) -> None:
        self._inner = inner

    def create_mig_device(self, placement: devices.MigPlacement) -> devices.MigDeviceInfo:
        return self._inner.create_mig_device(placement)

    def destroy_mig_device(self, placement: devices.MigPlacement) -> bool:
        raise nvml.NvmlMigFailed(f"destroying {placement} failed")


def _cdi_dir(root: pathlib.Path) -> fs_cdi.CDIDirectory:
    return fs_cdi.CDIDirectory(str(root / "cdi"), file_name=gpu_cdi.spec_file_name)


def _driver(
    root: pathlib.Path, cluster: memory_cluster.InMemoryCluster, sim: nvml.SimulatedGpus, *,
    crash_on: names.ClaimUID | None = None, mig: ports.MigPartitioner | None = None,
) -> gpu_driver.GpuPluginDriver:
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(root / "checkpoint.json")),
            cdi=_CrashingCDI(_cdi_dir(root), crash_on),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=GATES,
        inventory=sim.gpu_inventory,
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        mig=mig or sim,
        retry_budget_s=0.5,
    )
    driver.recover()
    return driver


def _migs(sim: nvml.SimulatedGpus) -> set[str]:
    return {m.name for m in sim.gpu_inventory().migs}


def _claim(cluster: memory_cluster.InMemoryCluster, name: str, device: str) -> models.ClaimRef:
    return env.gpu_claim(cluster, name, node=NODE, devices=(device,), device_class=env.MIG_CLASS)


def test_prepare_creates_the_device_with_its_nodes_and_unprepare_destroys_it(
    tmp_path: pathlib.Path,
) -> None:
    cluster, sim = memory_cluster.InMemoryCluster(), nvml.simulated_gpus("hgx-h100")
    driver = _driver(tmp_path, cluster, sim)
    ref = _claim(cluster, "one", _1G)

    assert driver.node_prepare((ref,))[ref.uid].error == ""

    (mig,) = sim.gpu_inventory().migs
    assert mig.name == _1G
    spec = _cdi_dir(tmp_path).read(ref.uid)
    assert spec is not None
    nodes = env.spec_node_paths(dict(spec))
    assert {"/dev/nvidia0", f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
            f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}"} <= set(nodes)

    assert driver.node_unprepare((ref,))[ref.uid].error == ""
    assert _migs(sim) == set()
    assert _cdi_dir(tmp_path).read(ref.uid) is None


def test_a_kill_between_create_and_completed_then_restart_keeps_only_prepared_devices(
    tmp_path: pathlib.Path,
) -> None:
    cluster, sim = memory_cluster.InMemoryCluster(), nvml.simulated_gpus("hgx-h100")
    done = _claim(cluster, "done", _1G)
    killed = _claim(cluster, "killed", _2G)
    first = _driver(tmp_path, cluster, sim, crash_on=killed.uid)
    assert first.node_prepare((done,))[done.uid].error == ""
    with pytest.raises(_Crash):
        first.node_prepare((killed,))
    assert _migs(sim) == {_1G, _2G}  # the create ran; PrepareCompleted did not

    restarted = _driver(tmp_path, cluster, sim)

    assert _migs(sim) == {_1G}
    entries = restarted.load_checkpoint().entries
    assert entries[done.uid].state is models.ClaimState.PREPARE_COMPLETED
    # The kubelet retries the prepare: the device is created again and the claim completes.
    assert restarted.node_prepare((killed,))[killed.uid].error == ""
    assert _migs(sim) == {_1G, _2G}
    assert restarted.load_checkpoint().entries[killed.uid].state is (
        models.ClaimState.PREPARE_COMPLETED
    )


def test_a_teardown_that_fails_stops_the_start(tmp_path: pathlib.Path) -> None:
    cluster, sim = memory_cluster.InMemoryCluster(), nvml.simulated_gpus("hgx-h100")
    sim.create_mig_device(devices.MigPlacement(parent_minor=0, gi_profile_id=19, placement_start=3))
    with pytest.raises(nvml.NvmlMigFailed):
        _driver(tmp_path, cluster, sim, mig=_FailingDestroy(sim))
    assert _migs(sim) == {_1G}


# ---------------------------------------------------------------- the plugin process


pytestmark_process = pytest.mark.skipif(
    not env.can_make_device_nodes(),
    reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
)


@pytestmark_process
def test_gpu_plugin_publishes_partitions_and_prepares_one(
    served: app_processes.ServedCluster, gpu_node: env.GpuNode, launch: app_processes.Launch
) -> None:
    process = launch("apps.gpuplugin", gpu_node.plugin_args(
        kubeconfig=served.kubeconfig, profile="hgx-h100", feature_gates="DynamicMIG=true",
    ))
    env.wait_registered(process, gpu_node.registration_socket)
    published = env.wait_slice_devices(served.cluster, node=gpu_node.node)

    slices = env.node_slices(served.cluster, node=gpu_node.node)
    counters_only = [s for s in slices if "devices" not in s["spec"]]
    assert len(counters_only) == 1  # v1.35: the counter sets in a slice of their own
    assert len(counters_only[0]["spec"]["sharedCounters"]) == 8
    assert {_1G, "gpu-0"} <= set(published)
    assert "consumesCounters" in published[_1G]

    ref = env.gpu_claim(
        served.cluster, "part", node=gpu_node.node, devices=(_1G,), device_class=env.MIG_CLASS
    )
    prepared = env.prepare(gpu_node.dra_socket, ref)
    assert prepared.error == ""
    nodes = env.spec_node_paths(env.read_spec(gpu_node.cdi_file(ref.uid)))
    assert "/dev/nvidia0" in nodes
    assert any(n.startswith("/dev/nvidia-caps/nvidia-cap") for n in nodes)
    assert env.unprepare(gpu_node.dra_socket, ref).error == ""
    assert not gpu_node.cdi_file(ref.uid).exists()


# ---------------------------------------------------------------- wiring


def test_the_partitioner_is_the_simulated_node_or_nvml_and_nothing_else() -> None:
    sim = nvml.simulated_gpus("hgx-h100")
    assert gpu_main._mig_partitioner(sim) is sim
    real = nvml.NvmlInventory(driver_root="/")
    made = gpu_main._mig_partitioner(real)
    assert isinstance(made, nvml.NvmlMigPartitioner) and made.inventory is real
    with pytest.raises(errors.ConfigError, match="cannot create MIG devices"):
        gpu_main._mig_partitioner(_NoMig())


def test_the_slice_layout_follows_the_server_version() -> None:
    old = memory_cluster.InMemoryCluster(server_version="v1.34.4")
    assert wiring._slice_layout(old) is partitions.SliceLayout.COMBINED
    assert wiring._slice_layout(memory_cluster.InMemoryCluster()) is partitions.SliceLayout.SPLIT
    with pytest.raises(errors.ClusterError, match="not a Kubernetes version"):
        wiring._slice_layout(memory_cluster.InMemoryCluster(server_version="banana"))


class _NoMig:
    """A discovery that cannot create MIG devices."""

    def gpu_inventory(self) -> devices.GpuInventory:
        return devices.GpuInventory()
