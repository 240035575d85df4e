"""ComputeDomain created -> ResourceClaimTemplate present, on a real kube-apiserver.

The controller runs as in production (its own process, the chart's env, a token of the chart's
ServiceAccount); the bench creates ComputeDomains as an admin and watches RCTs, timing from the
create call to the RCT's ADDED event. Two shapes: one at a time, and many created at once.
Skipped (with the reason in the JSON) when `make kube-apiserver` has not built the binaries.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import shutil
import sys
import threading
import time
from typing import Any

from bench import stats
from core import kinds, names, ports

_TIER = pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration" / "realkube"


def load_harness() -> tuple[Any, Any]:
    """The real-server tier's modules (`realkube_server`, `realkube_driver`) for bench."""
    sys.path.insert(0, str(_TIER))
    sys.path.insert(0, str(_TIER.parent / "helm"))
    import realkube_driver
    import realkube_server

    return realkube_server, realkube_driver


def _cd(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
    }


class _TemplateWatch:
    """Records when each RCT name is first seen ADDED (monotonic seconds)."""

    def __init__(self, cluster: ports.Cluster, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        start = cluster.list(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=namespace)
        self._thread = threading.Thread(
            target=self._follow, args=(cluster, namespace, start.resource_version), daemon=True
        )
        self._thread.start()

    def _follow(self, cluster: ports.Cluster, namespace: str, version: str) -> None:
        while not self._stop.is_set():
            for event in cluster.watch(
                kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=namespace,
                resource_version=version, timeout_s=5,
            ):
                version = str(event.obj.get("metadata", {}).get("resourceVersion", version))
                if event.type is ports.WatchEventType.ADDED:
                    with self._cond:
                        self.seen.setdefault(str(event.obj["metadata"]["name"]), time.monotonic())
                        self._cond.notify_all()

    def wait(self, name: str, timeout_s: float = 60.0) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: name in self.seen, timeout=timeout_s):
                raise TimeoutError(f"no ResourceClaimTemplate {name} within {timeout_s}s")
            return self.seen[name]

    def stop(self) -> None:
        self._stop.set()


def cd_to_rct_on_real_server(*, one_at_a_time: int = 50, burst: int = 200) -> dict[str, object]:
    """p50/p99 of CD create -> RCT ADDED, one at a time and `burst` created at once."""
    realkube_server, realkube_driver = load_harness()
    kube = realkube_server.start_fresh(prefix="bench-realkube-")
    if kube is None:
        return {"skipped": realkube_server.MISSING}
    workdir = kube.workdir
    driver = realkube_driver.Driver(kube, mode="hostManaged", workdir=workdir).install()
    namespace = realkube_driver.WORKLOAD_NAMESPACE
    admin = driver.admin()
    watch = _TemplateWatch(admin, namespace)
    controller = driver.start_controller()
    try:
        # Warm up: the controller is up and synced once its first CD gets an RCT.
        admin.create(kinds.COMPUTE_DOMAIN.kind, _cd("warmup", namespace))
        watch.wait("warmup-ch", timeout_s=120)
        single: list[float] = []
        for i in range(one_at_a_time):
            started = time.monotonic()
            admin.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"one-{i}", namespace))
            single.append(watch.wait(f"one-{i}-ch") - started)
        created_at: dict[str, float] = {}

        def create(i: int) -> None:
            created_at[f"burst-{i}-ch"] = time.monotonic()
            admin.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"burst-{i}", namespace))

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, range(burst)))
        together = [watch.wait(name) - at for name, at in created_at.items()]
        return {
            "server": "kube-apiserver " + realkube_server.DEFAULT_VERSION + " + etcd (loopback)",
            "one_at_a_time": stats.summarize(single),
            f"{burst}_at_once": stats.summarize(together),
            "goal_p99_ms": {"one_at_a_time": 150, f"{burst}_at_once": 1000},
        }
    finally:
        watch.stop()
        controller.stop()
        driver.stop()
        admin.close()
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    import json

    print(json.dumps(cd_to_rct_on_real_server(), indent=2))
