"""The running controller adopts a ComputeDomain the upstream driver created, without deleting it.

Covers: upstream-shaped objects (CD with its finalizer and no stamp, workload and daemon RCTs,
DaemonSet and daemon pod without our target label, an allocated and reserved workload claim)
exist before the controller starts; the real controller loop (informers, work queue, caches,
reconciler) stamps the CD, emits one `AdoptedFromUpstream` event, logs one
`event=compute_domain_adopted` line, takes the DaemonSet over in place (its informer sees
upstream's DaemonSet, which carries no target label), and leaves the RCTs, the claim's
allocation and the daemon pod as they were.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from adapters.memory import cluster as memory_cluster
from apps.controller import metrics as controller_metrics
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from core import kinds, names
from core.computedomain import controlling, modes
from tests.unit.controller import upstream_shapes as upstream

NS = "ml"
DRIVER_NS = "nvidia-dra-driver"


def _eventually(probe: Callable[[], bool], *, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def cluster() -> Iterator[memory_cluster.InMemoryCluster]:
    made = memory_cluster.InMemoryCluster()
    yield made
    made.close()


def test_a_compute_domain_made_by_upstream_is_adopted_without_deletion(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    uid = str(cluster.create(kinds.COMPUTE_DOMAIN.kind, upstream.compute_domain(
        name="cd", namespace=NS))["metadata"]["uid"])
    daemon = names.daemonset_name(uid)
    rct = kinds.RESOURCE_CLAIM_TEMPLATE.kind
    claim = kinds.RESOURCE_CLAIM.kind
    cluster.create(rct, upstream.workload_rct(cd_name="cd", namespace=NS, cd_uid=uid))
    cluster.create(rct, upstream.daemon_rct(driver_namespace=DRIVER_NS, cd_uid=uid))
    ds_uid = cluster.create(kinds.DAEMON_SET.kind, upstream.daemonset(
        driver_namespace=DRIVER_NS, cd_uid=uid))["metadata"]["uid"]
    cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-a", "labels": {names.COMPUTE_DOMAIN_LABEL: uid}}})
    cluster.create(kinds.POD.kind, upstream.daemon_pod(driver_namespace=DRIVER_NS, cd_uid=uid,
                                                       node="node-a"))
    cluster.create(claim, upstream.workload_claim(name="worker-0-channel", namespace=NS,
                                                  cd_uid=uid, node="node-a"))
    cluster.patch(claim, namespace=NS, name="worker-0-channel", subresource="status",
                  patch=upstream.allocation(node="node-a", pod_uid="pod-1"))
    kept = {(kind, ns, name): dict(cluster.get(kind, namespace=ns, name=name)) for kind, ns, name
            in ((rct, NS, "cd-channel"), (rct, DRIVER_NS, daemon), (claim, NS, "worker-0-channel"),
                (kinds.POD.kind, DRIVER_NS, f"{daemon}-node-a"))}

    config = modes.resolve_driver_config(mode="driverManaged", isolation="", feature_gates="",
                                         namespace=DRIVER_NS, daemon_image="imex:1").config
    reconciler = controller_reconciler.Reconciler(
        cluster=cluster, config=config, metrics=controller_metrics.ControllerMetrics())
    controller = running.Controller(reconciler, workers=2, resync_s=60, watch_timeout_s=2)
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="apps.controller.reconciler")
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert controller.synced.wait(10), "informers never synced"

        def taken_over() -> bool:
            ds = cluster.get(kinds.DAEMON_SET.kind, namespace=DRIVER_NS, name=daemon)
            return ds["spec"].get("updateStrategy", {}).get("type") == "OnDelete"

        _eventually(taken_over, what="upstream's DaemonSet taken over")
        time.sleep(0.3)  # a few more syncs: nothing else may happen
    finally:
        stop.set()
        assert controller.stopped.wait(10)

    cd = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NS, name="cd")
    assert cd["metadata"]["uid"] == uid and not cd["metadata"].get("deletionTimestamp")
    assert cd["metadata"]["annotations"][names.ADMITTED_MODE_ANNOTATION] == "driverManaged"
    assert cd["metadata"]["annotations"][names.ADMITTED_ISOLATION_ANNOTATION] == "domain"
    ds = cluster.get(kinds.DAEMON_SET.kind, namespace=DRIVER_NS, name=daemon)
    assert ds["metadata"]["uid"] == ds_uid
    assert ds["metadata"]["labels"][names.COMPUTE_DOMAIN_TARGET_LABEL] == names.TARGET_DAEMON
    assert ds["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": names.DAEMON_REQUEST_NAME, "resourceClaimTemplateName": daemon}]
    for (kind, ns, name), before in kept.items():
        assert dict(cluster.get(kind, namespace=ns, name=name)) == before, (kind, name)
    events = [e for e in cluster.list(kinds.EVENT.kind, namespace=NS).items
              if e.get("reason") == controlling.ADOPTED_REASON]
    assert len(events) == 1 and events[0]["type"] == "Normal"
    adopted = [r.getMessage() for r in caplog.records if "event=compute_domain_adopted" in
               r.getMessage()]
    assert adopted == [f"event=compute_domain_adopted cd={NS}/cd uid={uid} "
                       "mode=driverManaged isolation=domain daemonset=taken_over"]
