"""An abandoned GPU prepare is rolled back as core plans it: never past what it did itself.

Covers: two claims share one GPU with time-slicing; the second's prepare is abandoned (the
kubelet gives up) after its time-slice was set; the rollback leaves the GPU's time-slice
alone, because the first claim still holds it (the rule unprepare follows), and drops only the
abandoned claim. A GPU nobody else holds is reset to Default.
"""

from __future__ import annotations

import pathlib

import gpuplugin_env as env

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.pluginkit.driver import PluginPorts
from core import gates, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import configs, devices

NODE = "node-a"
GPU_0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU_1 = "GPU-00000001-0000-0000-0000-000000000000"
LONG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}


def _gpu(minor: int) -> devices.GpuInfo:
    return devices.GpuInfo(
        minor=minor, index=minor, uuid=f"GPU-{minor:08d}-0000-0000-0000-000000000000",
        product_name="NVIDIA H100 80GB HBM3", brand="Nvidia", architecture="Hopper",
        cuda_compute_capability="9.0", driver_version="580.65.06", cuda_driver_version="13.0",
        pci_bus_id=f"0000:{minor + 0x18:02x}:00.0", memory_bytes=80 * 2**30,
    )


class _Call:
    """The kubelet's side of one call: it gives up once `active` is False."""

    def __init__(self) -> None:
        self.active = True

    def is_active(self) -> bool:
        return self.active

    def time_remaining(self) -> float | None:
        return 45.0 if self.active else 0.0


class _Slicer:
    """Records every time-slice set; the kubelet gives up on `abandon` right after one."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], configs.TimeSliceInterval]] = []
        self.abandon: _Call | None = None

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: configs.TimeSliceInterval
    ) -> None:
        self.calls.append((tuple(gpu_uuids), interval))
        if self.abandon is not None:
            self.abandon.active = False


def _driver(tmp_path: pathlib.Path, cluster: memory_cluster.InMemoryCluster,
            slicer: _Slicer) -> gpu_driver.GpuPluginDriver:
    inventory = devices.GpuInventory(gpus=(_gpu(0), _gpu(1)))
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(tmp_path / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(tmp_path / "cdi"), file_name=gpu_cdi.spec_file_name),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=models.FeatureGates(values={gates.TIME_SLICING_SETTINGS: True}),
        inventory=lambda: inventory,
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        time_slicer=slicer,
        retry_budget_s=0.5,
    )
    driver.recover()
    return driver


def test_an_abandoned_prepare_keeps_the_time_slice_another_claim_holds(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    slicer = _Slicer()
    driver = _driver(tmp_path, cluster, slicer)
    first = env.gpu_claim(cluster, "first", node=NODE, devices=("gpu-0",), config=LONG)
    second = env.gpu_claim(cluster, "second", node=NODE, devices=("gpu-0", "gpu-1"), config=LONG)
    assert driver.node_prepare((first,))[first.uid].error == ""

    call = _Call()
    slicer.abandon = call
    answer = driver.node_prepare((second,), call=call)

    assert answer.get(second.uid) is None or answer[second.uid].error != ""
    after_abandon = slicer.calls[2:]
    assert after_abandon == [((GPU_1,), configs.TimeSliceInterval.DEFAULT)]
    checkpoint = driver.load_checkpoint()
    assert second.uid not in checkpoint.entries
    assert checkpoint.entries[first.uid].state is models.ClaimState.PREPARE_COMPLETED
