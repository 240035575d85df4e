"""The embedded cluster under real threads: blocking watches and concurrent writers."""

from __future__ import annotations

import threading
import time

from adapters.memory import cluster as memory_cluster
from core import errors, ports


def test_a_blocked_watch_wakes_up_for_an_event_written_by_another_thread() -> None:
    cluster = memory_cluster.InMemoryCluster()
    start = cluster.list("Lease").resource_version
    received: list[ports.WatchEvent] = []

    def consume() -> None:
        for event in cluster.watch("Lease", resource_version=start, timeout_s=10):
            received.append(event)
            return

    watcher = threading.Thread(target=consume)
    watcher.start()
    time.sleep(0.1)
    began = time.monotonic()
    cluster.create("Lease", {"metadata": {"name": "a", "namespace": "ns"}})
    watcher.join(timeout=5)

    assert not watcher.is_alive()
    assert time.monotonic() - began < 2
    assert [(e.type, e.obj["metadata"]["name"]) for e in received] == [
        (ports.WatchEventType.ADDED, "a")
    ]


def test_concurrent_conditional_patches_lose_no_update() -> None:
    cluster = memory_cluster.InMemoryCluster()
    cluster.create("Lease", {"metadata": {"name": "counter", "namespace": "ns"},
                             "spec": {"leaseTransitions": 0}})
    start = cluster.list("Lease").resource_version
    workers, increments = 8, 25

    def increment() -> None:
        done = 0
        while done < increments:
            current = cluster.get("Lease", namespace="ns", name="counter")
            try:
                cluster.patch(
                    "Lease",
                    namespace="ns",
                    name="counter",
                    patch={"spec": {"leaseTransitions": current["spec"]["leaseTransitions"] + 1}},
                    resource_version=current["metadata"]["resourceVersion"],
                )
            except errors.ConflictError:
                continue
            done += 1

    threads = [threading.Thread(target=increment) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    final = cluster.get("Lease", namespace="ns", name="counter")
    assert final["spec"]["leaseTransitions"] == workers * increments
    events = list(cluster.watch("Lease", resource_version=start, timeout_s=0))
    values = [e.obj["spec"]["leaseTransitions"] for e in events]
    assert values == list(range(1, workers * increments + 1))
