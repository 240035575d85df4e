"""`settling`: when the controller loop has answered every change and has nothing left to do.

Covers: a change is answered by the time `wait` returns (no polling for the end state after
it); a change an informer has not finished handling is not settled; a key backing off keeps
the loop unsettled, and `wait` says so when it gives up.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.controller import reconciler as controller_reconciler
from apps.controller import running, settling
from core import errors, kinds, names
from core.computedomain import modes

NS = "ml"
CD = kinds.COMPUTE_DOMAIN.kind
RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind


class _WebhookDown(errors.ClusterError):
    status = 500


class _Cluster(memory_cluster.InMemoryCluster):
    """The embedded cluster, refusing template creates (as a down webhook) while told to."""

    refusing = False

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        if kind == RCT and self.refusing:
            raise _WebhookDown("admission webhook unavailable")
        return super().create(kind, obj)


def _cd(name: str) -> dict[str, Any]:
    return {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}}}


def _status(cluster: memory_cluster.InMemoryCluster, name: str) -> str:
    return str((cluster.get(CD, namespace=NS, name=name).get("status") or {}).get("status"))


@contextlib.contextmanager
def _loop(
    cluster: memory_cluster.InMemoryCluster, *,
    before_settling: Callable[[running.Controller], None] | None = None,
) -> Iterator[tuple[running.Controller, settling.Settling]]:
    config = modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
        namespace="nvidia-dra-driver",
    ).config
    controller = running.Controller(
        controller_reconciler.Reconciler(cluster=cluster, config=config), workers=4,
        resync_s=3600,
    )
    if before_settling is not None:
        before_settling(controller)
    settled = settling.Settling(controller)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    assert controller.synced.wait(30)
    try:
        yield controller, settled
    finally:
        stop.set()
        assert controller.stopped.wait(30)


def test_a_change_is_answered_when_the_wait_returns() -> None:
    cluster = memory_cluster.InMemoryCluster()
    with _loop(cluster) as (_, settled):
        cluster.create(CD, _cd("a"))
        settled.wait()

        assert _status(cluster, "a") == "Ready"
        cluster.get(RCT, namespace=NS, name="a-channel")
        assert settled.is_settled()


def test_a_change_an_informer_is_still_handling_is_not_settled() -> None:
    cluster = memory_cluster.InMemoryCluster()
    entered, release = threading.Event(), threading.Event()

    def hold(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if new is not None and new["metadata"]["name"] == "held" and not release.is_set():
            entered.set()
            release.wait(30)

    def add_holding_handler(controller: running.Controller) -> None:
        controller.caches.domains.add_handler(hold)

    with _loop(cluster, before_settling=add_holding_handler) as (_, settled):
        cluster.create(CD, _cd("held"))
        assert entered.wait(10)

        assert not settled.is_settled()

        release.set()
        settled.wait()
        assert _status(cluster, "held") == "Ready"


def test_a_key_backing_off_is_not_settled_and_the_wait_says_so() -> None:
    cluster = _Cluster()
    cluster.refusing = True
    with _loop(cluster) as (_, settled):
        cluster.create(CD, _cd("a"))

        with pytest.raises(errors.RetryableError, match=r"did not settle within 0\.5s"):
            settled.wait(timeout_s=0.5)

        cluster.refusing = False
        settled.wait()
        assert _status(cluster, "a") == "Ready"
