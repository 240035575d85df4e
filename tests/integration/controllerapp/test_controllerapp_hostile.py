"""Hostile ComputeDomains through the production controller loop: never accepted silently.

Covers: numNodes 10^12 and 2^70 (refused in driverManaged; ignored in hostManaged, as DESIGN
says, but reported), unknown fields (ignored as the API server's pruning would, but
reported), a 10,000-character name (refused; no message carries the whole name), and garbage
in `status` (reported, then overwritten: the CD is still served). Each gets a Warning event
and a status condition naming the cause (for a status, until it is written anew); every wait
returns as soon as its condition holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from core import kinds, models, names, ports
from core.computedomain import controlling, modes

NS = "ml"
DRIVER_NS = "nvidia-dra-driver"
RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind
CD = kinds.COMPUTE_DOMAIN.kind


def _config(mode: str) -> models.DriverConfig:
    if mode == "hostManaged":
        return modes.resolve_driver_config(
            mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
            namespace=DRIVER_NS,
        ).config
    return modes.resolve_driver_config(
        mode="driverManaged", isolation="", feature_gates="", namespace=DRIVER_NS,
        daemon_image="imex:1",
    ).config


def _cd(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name[:40]}-channel"}},
                 **spec},
    }


def _eventually(probe: Callable[[], bool], *, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _conditions(cluster: ports.Cluster, name: str) -> dict[str, Mapping[str, Any]]:
    status = cluster.get(CD, namespace=NS, name=name).get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return {c["type"]: c for c in conditions or () if isinstance(c, Mapping)}


def _warnings(cluster: ports.Cluster) -> list[Mapping[str, Any]]:
    return [e for e in cluster.list(kinds.EVENT.kind, namespace=NS).items
            if e.get("type") == "Warning"]


@pytest.fixture(params=["hostManaged", "driverManaged"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def cluster(mode: str) -> Iterator[memory_cluster.InMemoryCluster]:
    made = memory_cluster.InMemoryCluster()
    reconciler = controller_reconciler.Reconciler(
        cluster=made, config=_config(mode), metrics=controller_metrics.ControllerMetrics(),
    )
    controller = running.Controller(reconciler, workers=2, resync_s=60, watch_timeout_s=2)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    assert controller.synced.wait(10), "informers never synced"
    try:
        yield made
    finally:
        stop.set()
        assert controller.stopped.wait(10)
        made.close()


def _reported(cluster: ports.Cluster, name: str, *, condition: str) -> Mapping[str, Any]:
    _eventually(lambda: condition in _conditions(cluster, name), what=f"{condition} on {name}")
    found = _conditions(cluster, name)[condition]
    assert found["status"] == "False"
    [event] = [e for e in _warnings(cluster) if e["message"] == found["message"]]
    return event


@pytest.mark.parametrize("num_nodes", [10**12, 2**70], ids=["1e12", "2^70"])
def test_an_absurd_num_nodes_is_never_accepted_silently(
    cluster: memory_cluster.InMemoryCluster, mode: str, num_nodes: int
) -> None:
    cluster.create(CD, _cd("big", numNodes=num_nodes))

    if mode == "driverManaged":
        event = _reported(cluster, "big", condition=controlling.ADMITTED_CONDITION)
        assert cluster.list(RCT, namespace=NS).items == ()
    else:
        event = _reported(cluster, "big", condition=controlling.VALIDATED_CONDITION)
        _eventually(lambda: bool(cluster.list(RCT, namespace=NS).items), what="the RCT")
    assert str(num_nodes) in event["message"] and "numNodes" in event["message"]


def test_unknown_fields_are_reported_by_name(
    cluster: memory_cluster.InMemoryCluster, mode: str
) -> None:
    cd = _cd("typo", numNode=4)
    cd["spec"]["channel"]["allocationMod"] = "All"
    cd["extra"] = {"x": 1}
    cluster.create(CD, cd)

    event = _reported(cluster, "typo", condition=controlling.VALIDATED_CONDITION)
    for field in ("spec.numNode", "spec.channel.allocationMod", "extra"):
        assert field in event["message"]


def test_a_ten_thousand_character_name_is_refused_without_echoing_it(
    cluster: memory_cluster.InMemoryCluster, mode: str
) -> None:
    name = "a" * 10_000
    cluster.create(CD, _cd(name))

    event = _reported(cluster, name, condition=controlling.ADMITTED_CONDITION)
    assert "10000" in event["message"] and len(event["message"]) < 1_000
    assert cluster.list(RCT, namespace=NS).items == ()


@pytest.mark.parametrize("garbage", [
    {"status": "Bogus"},
    {"nodes": "not a list", "channelID": "x"},
    {"nodes": [{"name": 7, "index": "y"}]},
], ids=["status", "nodes", "node"])
def test_garbage_in_status_is_reported_and_overwritten(
    cluster: memory_cluster.InMemoryCluster, mode: str, garbage: dict[str, Any]
) -> None:
    cluster.create(CD, _cd("junk"))
    cluster.patch(CD, namespace=NS, name="junk", patch={"status": garbage}, subresource="status")

    # The condition lasts only until the controller has written the status anew: the event
    # stays.
    _eventually(lambda: any(e["reason"] == controlling.IGNORED_FIELDS_REASON
                            and "status cannot be read" in e["message"]
                            for e in _warnings(cluster)), what="the warning event")
    _eventually(lambda: bool(cluster.list(RCT, namespace=NS).items), what="the CD is served")
    _eventually(lambda: cluster.get(CD, namespace=NS, name="junk")["status"].get("status")
                in ("Ready", "NotReady"), what="status written anew")
