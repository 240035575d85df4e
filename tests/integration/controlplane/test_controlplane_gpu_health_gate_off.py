"""GPU health taints on a control plane without gate DRADeviceTaints (the default before 1.36).

kube-apiserver then drops ResourceSlice `devices[].taints` without an error, so the scheduler
allocates a GPU the plugin found broken. The plugin cannot fix that; it says so (an error
naming the gate, as upstream's slice controller reports its DroppedFieldsError) and does not
rewrite the pool, with a new generation, at every resync while the taints stay the same.

The gate is turned off explicitly in every component (GA but not locked in 1.37; there with
DRADeviceTaintRules, which needs it): run
the module with KUBE_VERSION=v1.34.4 and v1.37.2. One simulated HGX H100 node, the chart with
the GPU half and gate NVMLDeviceHealthCheck.
"""

from __future__ import annotations

import time
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import Cluster
from test_controlplane_gpu_health import (
    FATAL_XID,
    PROFILE,
    allocated,
    gpu_devices,
    kube_minor,
    plugin_logs,
    raise_xid,
    start_pod,
    taints,
    template,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU = "gpu-0"
# The plugin's slice resync period (apps.pluginkit.serving.SLICE_RESYNC_PERIOD_S), and a margin.
RESYNC_S = 60.0 + 8.0


def kube_gates() -> dict[str, bool]:
    """DRADeviceTaints off; from 1.35 DRADeviceTaintRules too (it needs DRADeviceTaints; GA
    and on by default in 1.37)."""
    gates = {"DRADeviceTaints": False}
    return {**gates, "DRADeviceTaintRules": False} if kube_minor() >= 35 else gates


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"resources": {"gpus": {"enabled": True}},
              "featureGates": {"NVMLDeviceHealthCheck": True}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile=PROFILE,
                                      kube_gates=kube_gates())


def gpu_pool_generation(cluster: Cluster) -> int:
    (found,) = {s["spec"]["pool"]["generation"]
                for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
                if s["spec"]["driver"] == "gpu.nvidia.com"}
    return int(found)


def test_dropped_taints_are_reported_and_not_rewritten_at_every_resync(
    cluster: Cluster,
) -> None:
    workloads.ensure_namespace(cluster)
    published = cluster.eventually(lambda: gpu_devices(cluster) or None,
                                   what="the GPU plugin's ResourceSlice", timeout_s=180)
    cluster.eventually(lambda: "event=gpu_health_watch_ready" in plugin_logs(cluster),
                       what="the GPU plugin's health watch to be ready", timeout_s=60)
    raise_xid(cluster, str(published[GPU]["attributes"]["uuid"]["string"]), FATAL_XID)
    reported = cluster.eventually(
        lambda: f"event=resource_slice_taints_dropped node={cluster_driver.NODE} "
        f"driver=gpu.nvidia.com devices={GPU} " in plugin_logs(cluster),
        what="the plugin to report the taints the API server dropped", timeout_s=30)
    assert reported
    reported_at = time.monotonic()
    assert "DRADeviceTaints" in plugin_logs(cluster)
    assert taints(gpu_devices(cluster)[GPU]) == []
    generation = gpu_pool_generation(cluster)
    # What the gate-off cluster does with the broken GPU: allocates it like any other.
    start_pod(cluster, "on-broken", template("broken-gpu", uuid=str(
        published[GPU]["attributes"]["uuid"]["string"])))
    assert allocated(cluster, workloads.running(cluster, "on-broken")) == [GPU]
    workloads.delete_pod(cluster, "on-broken")
    time.sleep(max(0.0, reported_at + RESYNC_S - time.monotonic()))  # a resync since then
    cluster.check_alive()
    assert gpu_pool_generation(cluster) == generation
    assert plugin_logs(cluster).count("event=resource_slice_taints_dropped") == 1
