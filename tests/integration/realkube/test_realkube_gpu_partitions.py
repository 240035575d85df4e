"""Dynamic MIG slices (`core.gpu.partitions`) as a real kube-apiserver takes them.

Run with the default v1.34.4 and with KUBE_VERSION=v1.37.2 KUBE_BIN_DIR=...kube-v1.37.2.
Partitionable devices (KEP-4815) are alpha before 1.36: gate DRAPartitionableDevices is turned
on there, as the issue's clusters do. For each simulated node (eight H100s, the A100 node with
one GPU in MIG mode, a GB200 tray) the layout the server's version picks is created and read
back with every counter set and counter consumption intact (a server with the feature off drops
them silently); from 1.35 on, the other layout is refused, so the detection matters.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import realkube_server
from kubernetes import client, dynamic

from adapters.nvml import gpu_simulation
from core.gpu import partitions

pytestmark = pytest.mark.slow

NODE = "mig-node"


def _minor(version: str) -> int:
    found = re.match(r"v?1\.(\d+)", version)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def server() -> Iterator[realkube_server.RealKube]:
    bin_dir = realkube_server.binaries_dir()
    if bin_dir is None or shutil.which("openssl") is None:
        pytest.skip(realkube_server.MISSING)
    # The binaries' version, as the tier names it (KUBE_VERSION; v1.34.4 by default).
    version = os.environ.get("KUBE_VERSION", realkube_server.DEFAULT_VERSION)
    gates = {"DRAPartitionableDevices": True} if _minor(version) < 36 else {}
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="realkube-partitions-", dir="/tmp"))
    kube = realkube_server.RealKube(workdir, bin_dir=bin_dir, feature_gates=gates).start()
    try:
        yield kube
    finally:
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _slices_api(kube: realkube_server.RealKube) -> Any:
    return dynamic.DynamicClient(kube.admin_client()).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceSlice")


def _server_version(kube: realkube_server.RealKube) -> str:
    return str(client.VersionApi(kube.admin_client()).get_code().git_version)


def _publish(kube: realkube_server.RealKube, profile: str,
             layout: partitions.SliceLayout) -> list[dict[str, Any]]:
    inventory = gpu_simulation.simulated_gpus(profile, node_name=NODE).gpu_inventory()
    built = partitions.build_partitioned_slices(
        partitions.plan_partitioned_slices(inventory, layout=layout),
        node_name=NODE, generation=1)
    api = _slices_api(kube)
    created = []
    try:
        for obj in built:
            created.append(api.create(body=obj).to_dict())
    finally:
        for obj in built:
            # The one that failed to be created, and those after it, are not there.
            with contextlib.suppress(client.ApiException):
                api.delete(name=obj["metadata"]["name"])
    for sent, kept in zip(built, created, strict=True):
        spec = kept["spec"]
        assert spec.get("sharedCounters") == sent["spec"].get("sharedCounters")
        assert [d.get("consumesCounters") for d in spec.get("devices") or []] == [
            d.get("consumesCounters") for d in sent["spec"].get("devices", [])]
    return created


@pytest.mark.parametrize("profile", ["hgx-h100", "a100-mig", "gb200"])
def test_the_server_keeps_every_counter_of_the_layout_its_version_picks(
    server: realkube_server.RealKube, profile: str,
) -> None:
    layout = partitions.layout_for(_server_version(server))
    created = _publish(server, profile, layout)
    gpus = len(gpu_simulation.gpu_profile(profile).gpus)
    assert len(created) == (gpus + 1 if layout is partitions.SliceLayout.SPLIT else gpus)


def test_from_1_35_counters_beside_devices_are_refused(
    server: realkube_server.RealKube,
) -> None:
    if partitions.layout_for(_server_version(server)) is partitions.SliceLayout.COMBINED:
        pytest.skip("Kubernetes 1.34 takes counters beside their devices")
    with pytest.raises(client.ApiException) as refused:
        _publish(server, "hgx-h100", partitions.SliceLayout.COMBINED)
    assert refused.value.status == 422
