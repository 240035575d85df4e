"""`gpu-kubelet-plugin` as a real process on a simulated HGX H100 node, driven like a kubelet.

The plugin runs as `python -m apps.gpuplugin` with `--nvml simulated:hgx-h100`, a simulated
driver root (ELF stubs, a real ld cache, the recording stand-in nvidia-smi) and a dev root with
real control nodes; its `KubeCluster` talks HTTP to an `EmbeddedAPIServer` in this process.
The tests speak to it only through the gRPC clients (registration, DRA v1 and v1beta1) and look
at what it leaves on disk (CDI specs, checkpoint) and in the cluster (ResourceSlices).

Covered: registration; the node's slice with the eight `gpu-N` devices; prepare/unprepare of a
full GPU through both DRA versions (CDI ids, a schema-valid spec with `/dev/nvidia0`, the
control nodes, read-only host-path mounts of the driver's files, `NVIDIA_VISIBLE_DEVICES=void`),
idempotent repeats; TimeSlicing through nvidia-smi; MPS refused without its gate; an unshared
GPU refused to a second claim, naming the first.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

from adapters.fs import simulated_driverroot
from adapters.grpc import client as grpc_client
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from core import models
from core.gpu import cdi as gpu_cdi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not gpuplugin_env.can_make_device_nodes(),
        reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
    ),
]

H100_GPUS = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunningGpuPlugin:
    cluster: memory_cluster.InMemoryCluster
    gpu: GpuNode
    process: app_processes.AppProcess
    info: grpc_client.PluginInfo

    def claim(
        self, name: str, *, devices: tuple[str, ...] = ("gpu-0",),
        config: Mapping[str, Any] | None = None,
    ) -> models.ClaimRef:
        return gpuplugin_env.gpu_claim(
            self.cluster, name, node=self.gpu.node, devices=devices, config=config
        )


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGpuPlugin]:
    """One plugin process (and API server) shared by this module's tests."""
    logs = tmp_path_factory.mktemp("gpuplugin")
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = logs / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpuapp-", dir="/tmp"))
    gpu = GpuNode.create(root, node=app_processes.first_node())
    process = app_processes.AppProcess(
        "apps.gpuplugin", gpu.plugin_args(kubeconfig=kubeconfig), log_path=logs / "plugin.log"
    )
    try:
        info = gpuplugin_env.wait_registered(process, gpu.registration_socket)
        yield RunningGpuPlugin(cluster=cluster, gpu=gpu, process=process, info=info)
    finally:
        process.kill()
        server.stop()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ registration and slices


def test_gpu_plugin_registers_as_the_gpu_dra_plugin_speaking_v1_and_v1beta1(
    plugin: RunningGpuPlugin,
) -> None:
    assert plugin.info.type == "DRAPlugin"
    assert plugin.info.name == "gpu.nvidia.com"
    assert plugin.info.endpoint == str(plugin.gpu.dra_socket)
    assert set(plugin.info.supported_versions) >= {"v1.DRAPlugin", "v1beta1.DRAPlugin"}


def test_gpu_plugin_publishes_the_eight_h100s_of_its_node_in_its_own_pool(
    plugin: RunningGpuPlugin,
) -> None:
    published = gpuplugin_env.wait_slice_devices(plugin.cluster, node=plugin.gpu.node)

    assert sorted(published) == sorted(f"gpu-{minor}" for minor in range(H100_GPUS))
    expected = {g.minor: g for g in plugin.gpu.inventory("hgx-h100").gpus}
    for minor in range(H100_GPUS):
        attributes = published[f"gpu-{minor}"]["attributes"]
        assert attributes["type"] == {"string": "gpu"}
        assert attributes["uuid"] == {"string": expected[minor].uuid}
        assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
        assert "memory" in published[f"gpu-{minor}"]["capacity"]
    for slice_ in gpuplugin_env.node_slices(plugin.cluster, node=plugin.gpu.node):
        assert slice_["spec"]["pool"]["name"] == plugin.gpu.node


# ------------------------------------------------------------------ prepare / unprepare


@pytest.mark.parametrize("version", gpuplugin_env.VERSIONS)
def test_gpu_plugin_prepares_a_full_gpu_with_a_schema_valid_self_sufficient_cdi_spec(
    plugin: RunningGpuPlugin, version: grpc_client.DRAVersion
) -> None:
    gpu = plugin.gpu
    ref = plugin.claim(f"full-{version}")

    prepared = gpuplugin_env.prepare(gpu.dra_socket, ref, version=version)

    assert prepared.error == ""
    (device,) = prepared.devices
    assert (device.pool_name, device.device_name) == (gpu.node, "gpu-0")
    assert device.cdi_device_ids == (f"k8s.gpu.nvidia.com/claim={ref.uid}-gpu-0",)
    spec = gpuplugin_env.read_spec(gpu.cdi_file(ref.uid))
    assert spec["kind"] == gpu_cdi.KIND_CLAIM
    nodes = gpuplugin_env.spec_node_paths(spec)
    assert "/dev/nvidia0" in nodes
    assert {path for path, _, _ in simulated_driverroot.CONTROL_NODES} <= set(nodes)
    assert not any(f"/dev/nvidia{m}" in nodes for m in range(1, H100_GPUS))
    assert "NVIDIA_VISIBLE_DEVICES=void" in gpuplugin_env.spec_env(spec)
    mounts = gpuplugin_env.spec_mounts(spec)
    containers = {m["containerPath"] for m in mounts}
    assert {"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/bin/nvidia-smi"} <= containers
    for mount in mounts:
        # Host paths are the driver root's (what the runtime on the host reads), read-only.
        assert mount["hostPath"].startswith(f"{gpu.driver_root}/"), mount
        assert os.path.isfile(mount["hostPath"]), mount
        assert "ro" in mount["options"], mount
    assert str(ref.uid) in gpuplugin_env.checkpoint_uids(gpu.checkpoint)

    again = gpuplugin_env.prepare(gpu.dra_socket, ref, version=version)

    assert again == prepared
    assert gpuplugin_env.read_spec(gpu.cdi_file(ref.uid)) == spec

    unprepared = gpuplugin_env.unprepare(gpu.dra_socket, ref, version=version)

    assert unprepared == models.ClaimResult()
    assert not gpu.cdi_file(ref.uid).exists()
    assert str(ref.uid) not in gpuplugin_env.checkpoint_uids(gpu.checkpoint)
    assert gpuplugin_env.unprepare(gpu.dra_socket, ref, version=version) == unprepared


def test_gpu_plugin_applies_a_time_slicing_config_through_the_drivers_nvidia_smi(
    plugin: RunningGpuPlugin,
) -> None:
    gpu = plugin.gpu
    uuid = {g.minor: g.uuid for g in gpu.inventory("hgx-h100").gpus}[1]
    ref = plugin.claim(
        "sliced", devices=("gpu-1",), config=gpuplugin_env.time_slicing("Long")
    )

    prepared = gpuplugin_env.prepare(gpu.dra_socket, ref)

    assert prepared.error == ""
    calls = gpu.smi_calls()
    assert f"-i {uuid} -c DEFAULT" in calls
    assert f"compute-policy -i {uuid} --set-timeslice 3" in calls
    assert calls.index(f"-i {uuid} -c DEFAULT") < calls.index(
        f"compute-policy -i {uuid} --set-timeslice 3"
    )
    assert gpuplugin_env.unprepare(gpu.dra_socket, ref).error == ""


def test_gpu_plugin_refuses_an_mps_config_without_its_gate(plugin: RunningGpuPlugin) -> None:
    gpu = plugin.gpu
    ref = plugin.claim(
        "mps", devices=("gpu-2",), config=gpuplugin_env.gpu_config(sharing={"strategy": "MPS"})
    )

    refused = gpuplugin_env.prepare(gpu.dra_socket, ref)

    assert refused.devices == ()
    assert "MPS" in refused.error
    assert "needs feature gate MPSSupport" in refused.error
    assert not gpu.cdi_file(ref.uid).exists()
    assert str(ref.uid) not in gpuplugin_env.checkpoint_uids(gpu.checkpoint)


def test_gpu_plugin_refuses_an_unshared_gpu_to_a_second_claim_naming_the_first(
    plugin: RunningGpuPlugin,
) -> None:
    gpu = plugin.gpu
    first = plugin.claim("holder", devices=("gpu-4",))
    second = plugin.claim("latecomer", devices=("gpu-4",))
    assert gpuplugin_env.prepare(gpu.dra_socket, first).error == ""

    refused = gpuplugin_env.prepare(gpu.dra_socket, second)

    assert refused.devices == ()
    assert "gpu-4" in refused.error
    assert f"{first.namespace}/{first.name}" in refused.error
    assert not gpu.cdi_file(second.uid).exists()
    assert gpu.cdi_file(first.uid).exists()

    # Once the first lets go, the second gets it.
    assert gpuplugin_env.unprepare(gpu.dra_socket, first).error == ""
    assert gpuplugin_env.prepare(gpu.dra_socket, second).error == ""
    assert gpuplugin_env.unprepare(gpu.dra_socket, second).error == ""


def test_gpu_plugin_lets_two_time_sliced_claims_share_one_gpu(plugin: RunningGpuPlugin) -> None:
    gpu = plugin.gpu
    config = gpuplugin_env.time_slicing("Short")
    refs = [plugin.claim(f"share-{i}", devices=("gpu-5",), config=config) for i in range(2)]

    results = [gpuplugin_env.prepare(gpu.dra_socket, ref) for ref in refs]

    assert [r.error for r in results] == ["", ""]
    assert all(gpu.cdi_file(ref.uid).exists() for ref in refs)
    for ref in refs:
        assert gpuplugin_env.unprepare(gpu.dra_socket, ref).error == ""
