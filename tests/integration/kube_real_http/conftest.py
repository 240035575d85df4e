"""Fixtures running the Cluster port contract through real HTTP.

The chain is the real `KubeCluster` (official client, kubeconfig loading, urllib3, chunked
watch streams) -> `EmbeddedAPIServer` on loopback -> `InMemoryCluster`. The harness and the
CD factory come from the contract suite's own conftest so both parametrizations stay one suite.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kube_real_http_loading
import pytest

from adapters.kube import cluster as kube_cluster
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from core import ports

_HISTORY_SIZE = 50

_contract_conftest = kube_real_http_loading.load_contract_module(
    "conftest.py", as_name="kube_real_http_contract_fixtures"
)


def _http_harness(tmp_path: pathlib.Path) -> Any:
    memory = memory_cluster.InMemoryCluster(history_size=_HISTORY_SIZE)
    server = apiserver.EmbeddedAPIServer(memory).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    kube = kube_cluster.KubeCluster.from_config(str(kubeconfig), component="contract-test")

    def expired() -> str:
        first = kube.create(
            "Lease", {"metadata": {"name": "history-probe", "namespace": "contract-history"}}
        )
        for i in range(_HISTORY_SIZE + 5):
            kube.patch(
                "Lease",
                namespace="contract-history",
                name="history-probe",
                patch={"spec": {"leaseTransitions": i + 1}},
            )
        return str(first["metadata"]["resourceVersion"])

    def close() -> None:
        kube.close()
        server.stop()
        memory.close()

    return _contract_conftest.ClusterHarness(
        cluster=kube, expired_resource_version=expired, close=close
    )


@pytest.fixture
def harness(tmp_path: pathlib.Path) -> Iterator[Any]:
    made = _http_harness(tmp_path)
    yield made
    made.close()


@pytest.fixture
def cluster(harness: Any) -> ports.Cluster:
    port: ports.Cluster = harness.cluster
    return port


@pytest.fixture
def namespace() -> str:
    return f"contract-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_compute_domain() -> Callable[..., dict[str, Any]]:
    factory: Callable[..., dict[str, Any]] = _contract_conftest.compute_domain
    return factory
