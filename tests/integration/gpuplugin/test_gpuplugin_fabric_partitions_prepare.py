"""Fabric Manager partition activation in the GPU plugin (gate FabricManagerPartitioning), on
a simulated HGX H100 node and the simulated Fabric Manager (its activations in a state file, as
the real one keeps them across plugin restarts).

Covers, with the claim driver: 2-, 4- and 8-GPU claims leave their partition active after
prepare and inactive after unprepare; GPUs that form no partition are refused with the message
and nothing is activated; a kill after the activation and before PrepareCompleted, then a
restart, keeps the partition (its PrepareStarted claim owns it) and the retried prepare
completes; a partition active that no claim records is deactivated at start-up; Fabric
Manager refusing the activation fails the claim. With the `gpu-kubelet-plugin` process: the
gate starts it (nvswitch devices in its /proc), a 2-GPU claim is prepared with its partition
active and unprepared with it inactive, a 3-GPU claim is refused with the message; and where
the driver root is no simulated one, opening Fabric Manager says what to do.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping
from typing import Any

import app_processes
import gpuplugin_env as env
import pytest

from adapters import fabricmanager, nvml
from adapters.fabricmanager import opening
from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.pluginkit.driver import PluginPorts
from core import errors, gates, models, names, ports
from core.gpu import cdi as gpu_cdi
from core.gpu import devices, fm_partitions

NODE = "node-a"
GATES = models.FeatureGates(values={gates.FABRIC_MANAGER_PARTITIONING: True})


class _Crash(BaseException):
    """The plugin process dying (not an error the driver handles)."""


class _CrashingCDI:
    """The CDI root; the plugin dies before it writes the spec of `crash_on`."""

    def __init__(self, inner: ports.CDIStore, crash_on: names.ClaimUID | None) -> None:
        self._inner = inner
        self._crash_on = crash_on

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
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


def _fabric(root: pathlib.Path) -> fabricmanager.SimulatedFabricManager:
    return fabricmanager.SimulatedFabricManager(state_path=str(root / "fm-state.json"))


def _driver(
    root: pathlib.Path, cluster: memory_cluster.InMemoryCluster, *,
    fabric: ports.FabricManager, crash_on: names.ClaimUID | None = None,
) -> gpu_driver.GpuPluginDriver:
    sim = nvml.simulated_gpus("hgx-h100", node_name=NODE)
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(root / "checkpoint.json")),
            cdi=_CrashingCDI(
                fs_cdi.CDIDirectory(str(root / "cdi"), file_name=gpu_cdi.spec_file_name),
                crash_on,
            ),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=GATES,
        inventory=sim.gpu_inventory,
        files=lambda: devices.DriverFiles(nvidia_major=195),
        fabric=fabric,
        fabric_partitions=fabric.partitions(),
        retry_budget_s=0.5,
    )
    driver.recover()
    return driver


def _active(fabric: ports.FabricManager) -> set[int]:
    return {p.partition_id for p in fabric.partitions() if p.active}


def _claim(
    cluster: memory_cluster.InMemoryCluster, name: str, *minors: int
) -> models.ClaimRef:
    return env.gpu_claim(cluster, name, node=NODE, devices=tuple(f"gpu-{m}" for m in minors))


@pytest.mark.parametrize(("minors", "partition"), [
    ((4, 6), 6), ((0, 1, 4, 5), 2), (tuple(range(8)), 1),
], ids=["2-gpu", "4-gpu", "8-gpu"])
def test_prepare_activates_the_claims_partition_and_unprepare_deactivates_it(
    tmp_path: pathlib.Path, minors: tuple[int, ...], partition: int
) -> None:
    cluster, fabric = memory_cluster.InMemoryCluster(), _fabric(tmp_path)
    driver = _driver(tmp_path, cluster, fabric=fabric)
    ref = _claim(cluster, "train", *minors)

    assert driver.node_prepare((ref,))[ref.uid].error == ""
    assert _active(fabric) == {partition}
    assert driver.load_checkpoint().entries[ref.uid].record.fabric_partitions == (partition,)

    assert driver.node_unprepare((ref,))[ref.uid].error == ""
    assert _active(fabric) == set()


def test_gpus_that_form_no_partition_are_refused_with_the_message(tmp_path: pathlib.Path) -> None:
    cluster, fabric = memory_cluster.InMemoryCluster(), _fabric(tmp_path)
    driver = _driver(tmp_path, cluster, fabric=fabric)
    ref = _claim(cluster, "three", 0, 1, 2)

    error = driver.node_prepare((ref,))[ref.uid].error

    assert "GPU modules [1, 2, 3] do not form a Fabric Manager partition" in error
    assert "1 (8 GPUs: modules [1, 2, 3, 4, 5, 6, 7, 8])" in error
    assert _active(fabric) == set()
    assert ref.uid not in driver.load_checkpoint().entries


def test_fabric_manager_refusing_the_activation_fails_the_claim(tmp_path: pathlib.Path) -> None:
    cluster, fabric = memory_cluster.InMemoryCluster(), _fabric(tmp_path)
    driver = _driver(tmp_path, cluster, fabric=fabric)
    fabric.activate(2)  # modules 1, 2, 5, 6, by someone else after the start-up clean-up
    ref = _claim(cluster, "pair", 0, 2)

    error = driver.node_prepare((ref,))[ref.uid].error

    assert "cannot activate Fabric Manager partition 4" in error
    assert "FM_ST_IN_USE" in error
    assert _active(fabric) == {2}


def test_a_kill_after_activation_keeps_the_partition_for_its_claim_and_the_retry_completes(
    tmp_path: pathlib.Path,
) -> None:
    cluster, fabric = memory_cluster.InMemoryCluster(), _fabric(tmp_path)
    killed = _claim(cluster, "killed", 5, 7)
    first = _driver(tmp_path, cluster, fabric=fabric, crash_on=killed.uid)
    with pytest.raises(_Crash):
        first.node_prepare((killed,))
    assert _active(fabric) == {7}  # the activation ran; PrepareCompleted did not

    restarted = _driver(tmp_path, cluster, fabric=_fabric(tmp_path))

    assert _active(fabric) == {7}  # its PrepareStarted record owns it
    assert restarted.node_prepare((killed,))[killed.uid].error == ""
    assert restarted.load_checkpoint().entries[killed.uid].state is (
        models.ClaimState.PREPARE_COMPLETED
    )
    assert restarted.node_unprepare((killed,))[killed.uid].error == ""
    assert _active(fabric) == set()


def test_a_partition_no_claim_records_is_deactivated_at_start_up(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster, fabric = memory_cluster.InMemoryCluster(), _fabric(tmp_path)
    first = _driver(tmp_path, cluster, fabric=fabric)
    kept = _claim(cluster, "kept", 0, 1, 4, 5)
    assert first.node_prepare((kept,))[kept.uid].error == ""
    fabric.activate(3)  # left by a plugin killed before its claim's record was written

    with caplog.at_level(logging.INFO):
        _driver(tmp_path, cluster, fabric=_fabric(tmp_path))

    assert _active(fabric) == {2}
    assert any(
        "event=fm_partition_orphan_deactivated" in r.getMessage() and "partition=3" in
        r.getMessage() for r in caplog.records
    )


def test_opening_fabric_manager_outside_a_simulated_root_says_what_to_do(
    tmp_path: pathlib.Path,
) -> None:
    with pytest.raises(errors.PermanentError) as caught:
        opening.open_fabric_manager(driver_root=str(tmp_path), env={})
    assert "cannot load Fabric Manager's library libnvfm.so.1" in caught.value.message
    assert "disable the FabricManagerPartitioning feature gate" in caught.value.message

    (tmp_path / "var/lib/nvidia-simulated").mkdir(parents=True)
    found = opening.open_fabric_manager(driver_root=str(tmp_path), env={})
    assert isinstance(found, fabricmanager.SimulatedFabricManager)
    assert len(found.partitions()) == len(fm_partitions.HGX_8GPU_PARTITIONS)


# ---------------------------------------------------------------- the plugin process


@pytest.mark.skipif(
    not env.can_make_device_nodes(),
    reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
)
def test_gpu_plugin_activates_a_pairs_partition_and_refuses_three_gpus(
    served: app_processes.ServedCluster, gpu_node: env.GpuNode, launch: app_processes.Launch
) -> None:
    process = launch("apps.gpuplugin", gpu_node.plugin_args(
        kubeconfig=served.kubeconfig, feature_gates="FabricManagerPartitioning=true",
    ))
    env.wait_registered(process, gpu_node.registration_socket)
    published = env.wait_slice_devices(served.cluster, node=gpu_node.node)
    assert published["gpu-1"]["attributes"]["partition2"] == {"int": 5}
    fabric = fabricmanager.SimulatedFabricManager(
        state_path=fabricmanager.state_path_in(str(gpu_node.driver_root))
    )

    pair = env.gpu_claim(served.cluster, "pair", node=gpu_node.node, devices=("gpu-1", "gpu-3"))
    assert env.prepare(gpu_node.dra_socket, pair).error == ""
    assert _active(fabric) == {5}
    three = env.gpu_claim(
        served.cluster, "three", node=gpu_node.node, devices=("gpu-4", "gpu-5", "gpu-6")
    )
    refused = env.prepare(gpu_node.dra_socket, three).error
    assert "GPU modules [5, 6, 7] do not form a Fabric Manager partition" in refused
    assert env.unprepare(gpu_node.dra_socket, pair).error == ""
    assert _active(fabric) == set()
