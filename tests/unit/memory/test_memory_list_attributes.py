"""The embedded API server takes list-valued device attributes only where kube-apiserver does:
from Kubernetes 1.36, with its alpha gate DRAListTypeAttributes on (off by default). Any other
server drops `ints`/`strings`/`bools`/`versions` before validation (1.34 has no such fields; a
1.36+ server drops them without its gate), and then refuses the attribute left without a
value, as kube-apiserver's "exactly one value must be specified"."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from core import errors

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
NUMA = "resource.kubernetes.io/numaNode"


def _slice(value: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "node-1-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-1",
                     "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {NUMA: value}}]}}


def _cluster(version: str, **kwargs: Any) -> memory_cluster.InMemoryCluster:
    return memory_cluster.InMemoryCluster(clock=lambda: NOW, server_version=version, **kwargs)


@pytest.mark.parametrize(("version", "gate"), [
    ("v1.34.4", False), ("v1.34.4", True), ("v1.35.0", True), ("v1.37.2", False),
])
def test_a_list_attribute_is_refused_without_the_servers_support(version: str, gate: bool) -> None:
    cluster = _cluster(version, list_type_attributes=gate)
    with pytest.raises(errors.ClusterError, match=r"attributes\[resource.kubernetes.io/numaNode\]"
                       r": Invalid value: exactly one value must be specified"):
        cluster.create("ResourceSlice", _slice({"ints": [0]}))


def test_a_server_of_1_36_on_with_its_gate_keeps_list_attributes() -> None:
    cluster = _cluster("v1.37.2", list_type_attributes=True)
    made = cluster.create("ResourceSlice", _slice({"ints": [1]}))
    assert made["spec"]["devices"][0]["attributes"][NUMA] == {"ints": [1]}


@pytest.mark.parametrize("version", ["v1.34.4", "v1.37.2"])
def test_scalar_attributes_are_kept_everywhere(version: str) -> None:
    made = _cluster(version).create("ResourceSlice", _slice({"int": 1}))
    assert made["spec"]["devices"][0]["attributes"][NUMA] == {"int": 1}


def test_two_values_in_one_attribute_are_refused() -> None:
    cluster = _cluster("v1.37.2", list_type_attributes=True)
    with pytest.raises(errors.ClusterError, match="exactly one value"):
        cluster.create("ResourceSlice", _slice({"int": 1, "ints": [1]}))
