"""Gate ComputeDomainBindingConditions on the real control plane: workload pod created ->
Running, with the gate and without it, in one run.

Two clusters of the control-plane tier run side by side on the newest Kubernetes release
(`KUBE_LATEST`, where DRADeviceBindingConditions is on by default), the chart in
driver-managed mode, one with our gate on. Samples alternate between them (and which goes
first), so load drift on the machine falls on both alike. Each sample: a ComputeDomain
created and its ResourceClaimTemplate present (not timed); then the workload pod created ->
Running (timed: claim, scheduling, node label, IMEX daemon pod Ready, domain Ready, then
binding and prepare); the pod's FailedPrepareDynamicResources Events counted; pod and domain
deleted and the node released before the next sample. Polled every 50 ms.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from collections.abc import Iterator
from typing import Any

from bench import controlplane, stats

DEFAULT_KUBE_LATEST = "v1.37.2"
GATE_ON = {"featureGates": {"ComputeDomainBindingConditions": True}}
PREPARE_FAILED = "FailedPrepareDynamicResources"


@contextlib.contextmanager
def _newest_kube() -> Iterator[str]:
    """KUBE_VERSION / KUBE_BIN_DIR pointed at KUBE_LATEST's binaries for the block."""
    version = os.environ.get("KUBE_LATEST", DEFAULT_KUBE_LATEST)
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    saved = {k: os.environ.get(k) for k in ("KUBE_VERSION", "KUBE_BIN_DIR")}
    os.environ["KUBE_VERSION"] = version
    os.environ["KUBE_BIN_DIR"] = str(cache / "cd-dra-driver" / f"kube-{version}")
    try:
        yield version
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(*, runs: int) -> dict[str, Any]:
    """Pod -> Running with and without the gate, `runs` samples each, interleaved."""
    with _newest_kube() as version:
        cluster_driver, workloads, cd_steps = controlplane.load_harness()
        if cluster_driver.control_plane.binaries_dir() is None:
            return {"skipped": f"Kubernetes {version}: {cluster_driver.control_plane.MISSING} "
                    "(make kube-latest)"}
        clusters = {"gate_off": cluster_driver.Cluster("driverManaged"),
                    "gate_on": cluster_driver.Cluster("driverManaged", values=GATE_ON)}
        samples: dict[str, list[float]] = {mode: [] for mode in clusters}
        failures = {mode: 0 for mode in clusters}
        try:
            for cluster in clusters.values():
                cluster.start()
                workloads.ensure_namespace(cluster)
            for i in range(runs):
                order = list(clusters) if i % 2 == 0 else list(reversed(clusters))
                for mode in order:
                    took, failed = _sample(clusters[mode], f"bench-bc-{i}",
                                           cluster_driver, workloads, cd_steps)
                    samples[mode].append(took)
                    failures[mode] += failed
        finally:
            for cluster in clusters.values():
                cluster.stop()
                cluster.remove()
    off, on = (stats.summarize(samples[m]) for m in ("gate_off", "gate_on"))
    return {
        "kubernetes": version,
        "pod_to_running_gate_off": off,
        "pod_to_running_gate_on": on,
        "ratio_on_over_off": {"p50": round(on["p50_ms"] / off["p50_ms"], 3),
                              "p99": round(on["p99_ms"] / off["p99_ms"], 3)},
        "failed_prepare_events": failures,
        "poll_interval_ms": 50,
    }


def _sample(cluster: Any, cd_name: str, cluster_driver: Any, workloads: Any,
            cd_steps: Any) -> tuple[float, int]:
    """One workload pod created -> Running (s) and its FailedPrepareDynamicResources Events."""
    workloads.create(cluster, cd_steps.compute_domain(cd_name))
    cluster.eventually(
        lambda: [t for t in workloads.list_objects(
            cluster, "resource.k8s.io/v1", "ResourceClaimTemplate", "team-a")
            if t["metadata"]["name"] == f"{cd_name}-ch"],
        what=f"{cd_name}'s ResourceClaimTemplate")
    pod = f"{cd_name}-worker"
    started = time.monotonic()
    workloads.create(cluster, workloads.pod(
        pod, claims=[("channel", {"resourceClaimTemplateName": f"{cd_name}-ch"})]))
    workloads.running(cluster, pod, timeout_s=240)
    took = time.monotonic() - started
    failed = sum(int(e.count or 1)
                 for e in cluster.core().list_namespaced_event("team-a").items
                 if e.involved_object.name == pod and e.reason == PREPARE_FAILED)
    cluster.core().delete_namespaced_pod(pod, "team-a")
    cluster.eventually(
        lambda: cd_steps.node_label(cluster) is None
        and cluster_driver.NODE not in cd_steps.status_nodes(cluster, cd_name),
        what="the node released", timeout_s=120)
    workloads.resources(cluster, cd_steps.CD_API, "ComputeDomain").delete(
        name=cd_name, namespace="team-a")
    cluster.eventually(lambda: cd_steps.read_cd(cluster, cd_name) is None,
                       what="the ComputeDomain deleted", timeout_s=120)
    return took, failed
