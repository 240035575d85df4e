"""Claim device status on the in-memory cluster: a GPU prepare writes the claim's
`status.devices`, an unprepare clears it, other drivers' entries stay, and an API failure
neither fails nor delays the prepare: the write is retried on the next stale-claim sweep.

Waits on the writer going idle (`wait_idle`), never on a sleep.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import gpuplugin_env as env

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.pluginkit.driver import PluginPorts
from core import errors, kinds, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import devices

NODE = "node-a"
GPU_1 = "GPU-00000001-0000-0000-0000-000000000000"
OTHER = {"driver": "nic.example.com", "pool": NODE, "device": "eth1", "conditions": []}


class _FlakyCluster(memory_cluster.InMemoryCluster):
    """Fails every status patch while `failing` is set."""

    failing = False

    def patch(
        self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
        subresource: str = "", resource_version: str = "",
    ) -> Mapping[str, Any]:
        if self.failing and subresource == "status" and "devices" in (patch.get("status") or {}):
            raise errors.ClusterError("503 Service Unavailable (injected)")
        return super().patch(kind, namespace=namespace, name=name, patch=patch,
                             subresource=subresource, resource_version=resource_version)


def _gpu(minor: int) -> devices.GpuInfo:
    return devices.GpuInfo(
        minor=minor, index=minor, uuid=f"GPU-{minor:08d}-0000-0000-0000-000000000000",
        product_name="NVIDIA H100 80GB HBM3", brand="Nvidia", architecture="Hopper",
        cuda_compute_capability="9.0", driver_version="580.65.06", cuda_driver_version="13.0",
        pci_bus_id=f"0000:{minor + 0x18:02x}:00.0", memory_bytes=80 * 2**30,
    )


def _driver(tmp_path: pathlib.Path,
            cluster: memory_cluster.InMemoryCluster) -> gpu_driver.GpuPluginDriver:
    inventory = devices.GpuInventory(gpus=(_gpu(0), _gpu(1)))
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(tmp_path / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(tmp_path / "cdi"), file_name=gpu_cdi.spec_file_name),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=models.FeatureGates(values={}),
        inventory=lambda: inventory,
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        retry_budget_s=0.5,
        claim_status=True,
    )
    driver.recover()
    return driver


def _status_devices(cluster: memory_cluster.InMemoryCluster,
                    ref: models.ClaimRef) -> list[dict[str, Any]]:
    claim = cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name)
    return list((claim.get("status") or {}).get("devices") or [])


def _settle(driver: gpu_driver.GpuPluginDriver) -> None:
    writer = driver.device_statuses
    assert writer is not None
    assert writer.wait_idle(timeout_s=30)


def test_prepare_writes_our_entries_beside_others_and_unprepare_clears_only_ours(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    driver = _driver(tmp_path, cluster)
    ref = env.gpu_claim(cluster, "one", node=NODE, devices=("gpu-1",))
    cluster.patch(kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name,
                  subresource="status", patch={"status": {"devices": [OTHER]}})
    cluster.set_conflict_injection(1)  # our first write meets a concurrent change: read again

    assert driver.node_prepare((ref,))[ref.uid].error == ""
    _settle(driver)
    other, ours = _status_devices(cluster, ref)
    assert other == OTHER
    assert (ours["driver"], ours["pool"], ours["device"]) == ("gpu.nvidia.com", NODE, "gpu-1")
    assert ours["conditions"][0]["type"] == "Ready"
    assert ours["conditions"][0]["status"] == "True"
    assert ours["data"] == {"type": "gpu", "uuid": GPU_1, "pciBusID": "0000:19:00.0",
                            "productName": "NVIDIA H100 80GB HBM3"}

    assert driver.node_unprepare((ref,))[ref.uid].error == ""
    _settle(driver)
    assert _status_devices(cluster, ref) == [OTHER]


def test_an_api_failure_does_not_fail_the_prepare_and_is_retried_by_the_sweep(
    tmp_path: pathlib.Path,
) -> None:
    cluster = _FlakyCluster()
    driver = _driver(tmp_path, cluster)
    ref = env.gpu_claim(cluster, "flaky", node=NODE, devices=("gpu-1",))
    cluster.failing = True

    assert driver.node_prepare((ref,))[ref.uid].error == ""
    _settle(driver)
    writer = driver.device_statuses
    assert writer is not None and writer.failed == frozenset({ref.uid})
    assert _status_devices(cluster, ref) == []

    cluster.failing = False
    driver.clean_stale_claims()
    _settle(driver)
    assert writer.failed == frozenset()
    assert [d["device"] for d in _status_devices(cluster, ref)] == ["gpu-1"]


def test_a_claim_deleted_before_the_write_needs_nothing(tmp_path: pathlib.Path) -> None:
    cluster = _FlakyCluster()
    driver = _driver(tmp_path, cluster)
    ref = env.gpu_claim(cluster, "gone", node=NODE, devices=("gpu-1",))
    cluster.failing = True
    assert driver.node_prepare((ref,))[ref.uid].error == ""
    _settle(driver)
    cluster.failing = False
    assert driver.node_unprepare((ref,))[ref.uid].error == ""
    cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name)
    _settle(driver)
    writer = driver.device_statuses
    assert writer is not None and writer.failed == frozenset()


def test_without_claim_status_nothing_is_written(tmp_path: pathlib.Path) -> None:
    cluster = memory_cluster.InMemoryCluster()
    driver = gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(str(tmp_path / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(tmp_path / "cdi"), file_name=gpu_cdi.spec_file_name),
        ),
        node=models.NodeFacts(node_name=names.NodeName(NODE), boot_id="boot-1"),
        gates=models.FeatureGates(values={}),
        inventory=lambda: devices.GpuInventory(gpus=(_gpu(1),)),
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
    )
    driver.recover()
    ref = env.gpu_claim(cluster, "quiet", node=NODE, devices=("gpu-1",))
    assert driver.node_prepare((ref,))[ref.uid].error == ""
    assert driver.device_statuses is None
    assert _status_devices(cluster, ref) == []
