"""Fixtures of the KubeCluster tests: the embedded API server (with a bearer token, so
authentication is exercised) and our adapter pointed at it."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from adapters.kube import cluster
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster

TOKEN = "test-token"


@pytest.fixture
def memory() -> Iterator[memory_cluster.InMemoryCluster]:
    made = memory_cluster.InMemoryCluster()
    yield made
    made.close()


@pytest.fixture
def server(memory: memory_cluster.InMemoryCluster) -> Iterator[apiserver.EmbeddedAPIServer]:
    with apiserver.EmbeddedAPIServer(memory, token=TOKEN) as served:
        yield served


@pytest.fixture
def kube(
    server: apiserver.EmbeddedAPIServer, tmp_path: pathlib.Path
) -> Iterator[cluster.KubeCluster]:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kc = cluster.KubeCluster.from_config(str(path), component="test-controller")
    yield kc
    kc.close()
