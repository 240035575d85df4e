"""Fixtures of the Cluster port-contract suite: one harness per Cluster implementation.

To run the suite against another adapter, add a factory to `HARNESS_FACTORIES` returning a
`ClusterHarness` (a real API server adapter must also provide a version the server no longer
keeps, for the 410 Gone test). Every test gets a fresh namespace so runs never collide.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from core import names, ports

_MEMORY_HISTORY_SIZE = 50


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterHarness:
    cluster: ports.Cluster
    #: Returns a resourceVersion the implementation no longer keeps events for.
    expired_resource_version: Callable[[], str]
    close: Callable[[], None] = lambda: None


def _memory_harness() -> ClusterHarness:
    cluster = memory_cluster.InMemoryCluster(history_size=_MEMORY_HISTORY_SIZE)

    def expired() -> str:
        first = cluster.create(
            "Lease", {"metadata": {"name": "history-probe", "namespace": "contract-history"}}
        )
        for i in range(_MEMORY_HISTORY_SIZE + 5):
            cluster.patch(
                "Lease",
                namespace="contract-history",
                name="history-probe",
                patch={"spec": {"leaseTransitions": i + 1}},
            )
        return str(first["metadata"]["resourceVersion"])

    return ClusterHarness(cluster=cluster, expired_resource_version=expired, close=cluster.close)


HARNESS_FACTORIES: dict[str, Callable[[], ClusterHarness]] = {"memory": _memory_harness}


@pytest.fixture(params=sorted(HARNESS_FACTORIES))
def harness(request: pytest.FixtureRequest) -> Iterator[ClusterHarness]:
    made = HARNESS_FACTORIES[request.param]()
    yield made
    made.close()


@pytest.fixture
def cluster(harness: ClusterHarness) -> ports.Cluster:
    return harness.cluster


@pytest.fixture
def namespace() -> str:
    return f"contract-{uuid.uuid4().hex[:8]}"


def compute_domain(name: str, namespace: str, **metadata: Any) -> dict[str, Any]:
    """A ComputeDomain that passes the upstream CRD schema."""
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}},
    }


@pytest.fixture
def make_compute_domain() -> Callable[..., dict[str, Any]]:
    return compute_domain
