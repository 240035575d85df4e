"""`numaNode` as a list (gate DRAListTypeAttributes) as a real kube-apiserver takes it, and the
embedded API server's verdict beside it.

Run with the default v1.34.4 and with KUBE_VERSION=v1.37.2 KUBE_BIN_DIR=...kube-v1.37.2. From
1.36 the server runs with its own alpha gate DRAListTypeAttributes on. The GPU plugin's slice
of a simulated HGX H100 node with the gate on is created: 1.34 refuses it (no such field: the
attribute is left without a value), 1.36+ with the gate keeps the list; a 1.36+ server without
its gate refuses it too (checked on the embedded server only: one real server per module). The
embedded API server, at the same version and gate, gives the same verdict.
"""

from __future__ import annotations

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

from adapters.memory import cluster as memory_cluster
from adapters.nvml import gpu_simulation
from core import errors, models
from core.gpu import slices as gpu_slices

pytestmark = pytest.mark.slow

NODE = "list-node"
NUMA = "resource.kubernetes.io/numaNode"


def _minor(version: str) -> int:
    found = re.match(r"v?1\.(\d+)", version)
    return int(found.group(1)) if found else 0


VERSION = os.environ.get("KUBE_VERSION", realkube_server.DEFAULT_VERSION)
LISTS = _minor(VERSION) >= 36  # the server's own gate is turned on from 1.36


@pytest.fixture(scope="module")
def server() -> Iterator[realkube_server.RealKube]:
    bin_dir = realkube_server.binaries_dir()
    if bin_dir is None or shutil.which("openssl") is None:
        pytest.skip(realkube_server.MISSING)
    gates = {"DRAListTypeAttributes": True} if LISTS else {}
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="realkube-lists-", dir="/tmp"))
    kube = realkube_server.RealKube(workdir, bin_dir=bin_dir, feature_gates=gates).start()
    try:
        yield kube
    finally:
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _slice() -> dict[str, Any]:
    inventory = gpu_simulation.simulated_gpus("hgx-h100", node_name=NODE).gpu_inventory()
    gates = models.FeatureGates(values={"DRAListTypeAttributes": True})
    [built] = gpu_slices.build_gpu_resource_slices(
        inventory, node_name=NODE, gates=gates, generation=1)
    assert any(NUMA in d["attributes"] for d in built["spec"]["devices"])
    return dict(built)


def test_the_real_server_and_the_embedded_one_agree_on_list_attributes(
    server: realkube_server.RealKube,
) -> None:
    version = str(client.VersionApi(server.admin_client()).get_code().git_version)
    api = dynamic.DynamicClient(server.admin_client()).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceSlice")
    embedded = memory_cluster.InMemoryCluster(server_version=version, list_type_attributes=LISTS)
    sent = _slice()
    if LISTS:
        kept = api.create(body=sent).to_dict()
        stored = embedded.create("ResourceSlice", sent)
        for found in (kept, stored):
            numa = [d["attributes"].get(NUMA) for d in found["spec"]["devices"]]
            assert numa == [d["attributes"].get(NUMA) for d in sent["spec"]["devices"]]
            assert all(n is None or list(n) == ["ints"] for n in numa)
        api.delete(name=sent["metadata"]["name"])
        without_gate = memory_cluster.InMemoryCluster(server_version=version)
        with pytest.raises(errors.ClusterError, match="exactly one value must be specified"):
            without_gate.create("ResourceSlice", sent)
        return
    with pytest.raises(client.ApiException) as refused:
        api.create(body=sent)
    assert refused.value.status == 422
    assert "exactly one value must be specified" in str(refused.value.body)
    with pytest.raises(errors.ClusterError, match="exactly one value must be specified"):
        embedded.create("ResourceSlice", sent)
