"""Channel isolation bench: channel assignment with 2,000 live ComputeDomains, and CD -> Ready.

The controller runs as in production (informers, work queue, 16 workers) on the embedded
cluster with hostManaged/channel. Ready is seen through a watch of the bench's own.
- `cd_to_ready`: one CD at a time, created -> `status.status: Ready` (its channel assigned,
  recorded, and its RCT created), at 0 and at `live` live CDs;
- `assignment`: the leader's assignment step alone (`ChannelAllocator.channel_for`: snapshot of
  the caches, table rebuild, lowest free ID) for a new CD with `live` CDs holding channels.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from adapters.kube import informer
from adapters.memory import cluster as memory_cluster
from apps.controller import reconciler as controller_reconciler
from apps.controller import running
from bench import stats
from core import kinds, models, names
from core.computedomain import modes

NAMESPACE = "bench-channels"


def _config() -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEX=true",
        namespace="nvidia-dra-driver",
    ).config


def _cd(name: str) -> dict[str, Any]:
    return {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}}}


class _Ready:
    """When each CD was first seen Ready (through a watch)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._seen: dict[str, float] = {}

    def on_change(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if new is None or (new.get("status") or {}).get("status") != "Ready":
            return
        with self._lock:
            self._seen.setdefault(str(new["metadata"]["name"]), time.perf_counter())
            self._lock.notify_all()

    def wait(self, name: str, *, timeout_s: float = 60.0) -> float:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while name not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"ComputeDomain {name} never became Ready")
                self._lock.wait(left)
            return self._seen[name]


def run(*, live: int = 2000, runs: int = 200) -> dict[str, Any]:
    """Both measurements on one embedded cluster; p50/p99/n in ms."""
    cluster = memory_cluster.InMemoryCluster()
    ready = _Ready()
    watch = informer.Informer(cluster, kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE)
    watch.add_handler(ready.on_change)
    stop = threading.Event()
    reconciler = controller_reconciler.Reconciler(cluster=cluster, config=_config())
    controller = running.Controller(reconciler, workers=16, resync_s=3600)
    try:
        watch.start(stop)
        watch.synced.wait(60)
        threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
        if not controller.synced.wait(120):
            raise TimeoutError("the controller's informers never synced")
        result: dict[str, Any] = {}
        result["cd_to_ready_0_live"] = _cd_to_ready(cluster, ready, prefix="first", runs=runs)
        for i in range(live):
            cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"live-{i}"))
        for i in range(live):
            ready.wait(f"live-{i}", timeout_s=300)
        result[f"cd_to_ready_{live}_live"] = _cd_to_ready(cluster, ready, prefix="probe",
                                                          runs=runs)
        result[f"assignment_{live}_live"] = _assignment(reconciler, runs=runs)
        result["live_domains"] = live
        return result
    finally:
        stop.set()
        controller.stopped.wait(30)
        cluster.close()


def _cd_to_ready(cluster: memory_cluster.InMemoryCluster, ready: _Ready, *, prefix: str,
                 runs: int) -> dict[str, float]:
    samples = []
    for i in range(runs):
        started = time.perf_counter()
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"{prefix}-{i}"))
        samples.append(ready.wait(f"{prefix}-{i}") - started)
        # Deleted again (not waited for): the live count stays put and IDs stay free.
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=f"{prefix}-{i}")
    return stats.summarize(samples)


def _assignment(reconciler: controller_reconciler.Reconciler, *, runs: int) -> dict[str, float]:
    samples = []
    for i in range(runs):
        cd = models.ComputeDomain(
            meta=models.ObjectMeta(name=f"new-{i}", namespace=NAMESPACE, uid=f"new-uid-{i}"),
            spec=models.ComputeDomainSpec(
                channel=models.ChannelSpec(resource_claim_template_name=f"new-{i}-channel")),
        )
        started = time.perf_counter()
        channel, _ = reconciler.channels.channel_for(cd)
        samples.append(time.perf_counter() - started)
        assert channel is not None
        reconciler.channels.forget(cd.uid)  # keep the table at the same size
    return stats.summarize(samples)
