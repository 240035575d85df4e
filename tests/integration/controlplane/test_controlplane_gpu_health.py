"""GPU health taints under the real scheduler and kubelet (gate NVMLDeviceHealthCheck).

One simulated HGX H100 node (`hgx-h100`: eight whole GPUs, MIG off), the chart with the GPU
half and gate NVMLDeviceHealthCheck. Health events are raised as the simulated NVML raises
them: a line appended to `<driverRoot>/var/lib/nvidia-simulated/health-events.jsonl`, where
the driver root is the node's host directory the stand-in runtime hands the plugin container
(`NVIDIA_DRIVER_ROOT`/`CONTAINER_DRIVER_ROOT` of its recipe); the plugin's real watch child
reads it.

KEP-5055 device taints are alpha in 1.34 (gate DRADeviceTaints, off by default: turned on in
every component here, else the API server drops `devices[].taints`), beta and on from 1.36, GA
in 1.37; effect `None` exists from 1.35. Run the module with KUBE_VERSION=v1.34.4 and v1.37.2.

Covers: a fatal XID (79) taints that GPU in the ResourceSlice within seconds (the latency is
printed, run with -rP to see it); a pod for that GPU stays Pending with the scheduler's reason
(kube-scheduler says "cannot allocate all claims", not which taint: the allocator skips a
tainted device silently, dynamic-resource-allocation/structured `taintPreventsAllocation`); a
pod for any GPU gets an untainted one; an informational XID (13) leaves its GPU allocatable
(taint effect `None` on 1.37, no taint on 1.34); a claim that tolerates the XID taint still
gets the tainted GPU.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import cluster_driver
import control_plane
import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

from adapters.nvml import health_events
from core.gpu import health

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_DRIVER = "gpu.nvidia.com"
PROFILE = "hgx-h100"
# Generous: the taint is expected within about 2 s (the measured figure is printed).
GUARD_S = 30.0
FATAL_XID = 79  # GPU has fallen off the bus
INFO_XID = 13  # graphics engine exception: an application error
FATAL_GPU = "gpu-0"  # the first device: the one an allocator ignoring taints would pick
INFO_GPU = "gpu-1"
XID_TAINT = {"key": health.TAINT_KEY_XID, "value": str(FATAL_XID), "effect": "NoSchedule"}


def kube_minor() -> int:
    found = re.match(r"v1\.(\d+)\.", control_plane.kube_version())
    return int(found.group(1)) if found else 0


def kube_gates() -> dict[str, bool]:
    """DRADeviceTaints where it is alpha (1.34, 1.35); beta and on from 1.36, GA in 1.37."""
    return {"DRADeviceTaints": True} if kube_minor() < 36 else {}


def kube_apis() -> dict[str, bool]:
    """Where DRADeviceTaints is alpha, its DeviceTaintRule API (resource.k8s.io/v1alpha3) too:
    with the gate on, the 1.34 scheduler and controller-manager watch DeviceTaintRules and
    schedule nothing until they can list them."""
    return {"resource.k8s.io/v1alpha3": True} if kube_minor() < 36 else {}


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"resources": {"gpus": {"enabled": True}},
              "featureGates": {"NVMLDeviceHealthCheck": True}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile=PROFILE,
                                      kube_gates=kube_gates(), kube_apis=kube_apis())


def plugin_logs(cluster: Cluster) -> str:
    assert cluster.runtime is not None
    return "\n".join(log.read_text(errors="replace")
                     for log in sorted(cluster.runtime.state_dir.glob("**/*.log")))


def gpu_devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The GPU plugin's published devices of the node, by name."""
    return {device["name"]: dict(device)
            for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice")
            if s["spec"]["driver"] == GPU_DRIVER and s["spec"].get("nodeName") == NODE
            for device in s["spec"].get("devices") or ()}


def taints(device: Mapping[str, Any]) -> list[dict[str, str]]:
    """The device's taints without `timeAdded` (the API server's)."""
    return [{k: v for k, v in t.items() if k != "timeAdded" and v is not None}
            for t in device.get("taints") or ()]


@pytest.fixture(scope="module")
def uuids(cluster: Cluster) -> dict[str, str]:
    """Each published GPU's UUID, once the plugin published them and its health watch is
    ready (an event raised before that may come before the watch reads the file)."""
    workloads.ensure_namespace(cluster)
    published = cluster.eventually(lambda: gpu_devices(cluster) or None,
                                   what="the GPU plugin's ResourceSlice", timeout_s=180)
    cluster.eventually(lambda: "event=gpu_health_watch_ready" in plugin_logs(cluster),
                       what="the GPU plugin's health watch to be ready", timeout_s=60)
    found = {name: str(device["attributes"]["uuid"]["string"])
             for name, device in published.items()}
    assert {FATAL_GPU, INFO_GPU} <= set(found), found
    return found


def raise_xid(cluster: Cluster, uuid: str, xid: int) -> None:
    health_events.raise_simulated_event(cluster.files.gpu.driver_root, health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid=uuid, xid=xid))


def template(name: str, *, uuid: str = "",
             tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A claim template for one GPU: the one with `uuid`, else any."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": 1}
    if uuid:
        exactly["selectors"] = [{"cel": {
            "expression": f'device.attributes["{GPU_DRIVER}"].uuid == "{uuid}"'}}]
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def start_pod(cluster: Cluster, name: str, claim_template: dict[str, Any]) -> None:
    workloads.create(cluster, claim_template)
    workloads.create(cluster, workloads.pod(
        name, claims=[("gpu", {"resourceClaimTemplateName": claim_template["metadata"]["name"]})]))


def allocated(cluster: Cluster, pod_obj: Mapping[str, Any]) -> list[str]:
    (claim,) = workloads.claims_of(cluster, pod_obj)
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
            if r["driver"] == GPU_DRIVER]


def test_a_fatal_xid_taints_that_gpu_in_the_slice_within_seconds(
    cluster: Cluster, uuids: dict[str, str]
) -> None:
    def tainted() -> dict[str, dict[str, Any]] | None:
        devices = gpu_devices(cluster)
        return devices if taints(devices.get(FATAL_GPU, {})) else None

    assert tainted() is None
    started = time.monotonic()
    raise_xid(cluster, uuids[FATAL_GPU], FATAL_XID)
    found = cluster.eventually(tainted, what=f"the XID {FATAL_XID} taint on {FATAL_GPU}",
                               timeout_s=GUARD_S)
    latency_s = time.monotonic() - started
    print(f"\nKubernetes {control_plane.kube_version()}: XID {FATAL_XID} raised -> taint in the "
          f"ResourceSlice after {latency_s:.3f} s; taints={found[FATAL_GPU]['taints']}")
    assert taints(found[FATAL_GPU]) == [XID_TAINT]
    # The API server stamps the time it saw the taint.
    assert found[FATAL_GPU]["taints"][0].get("timeAdded")
    assert [name for name, device in found.items() if taints(device)] == [FATAL_GPU]
    assert latency_s < GUARD_S
    assert "event=gpu_device_tainted kind=xid" in plugin_logs(cluster)


def test_a_pod_for_the_tainted_gpu_stays_pending_with_the_schedulers_reason(
    cluster: Cluster, uuids: dict[str, str]
) -> None:
    start_pod(cluster, "on-tainted", template("tainted-gpu", uuid=uuids[FATAL_GPU]))
    reason = str(cluster.eventually(
        lambda: workloads.unschedulable_reason(cluster, "on-tainted"),
        what="the scheduler to leave the pod for the tainted GPU Pending"))
    print(f"\nKubernetes {control_plane.kube_version()}: scheduler's reason: {reason!r}")
    pod = workloads.read_pod(cluster, "on-tainted")
    assert pod is not None and pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    (claim,) = workloads.claims_of(cluster, pod)
    assert not claim.get("status", {}).get("allocation")
    # kube-scheduler's DRA plugin gives its generic refusal: its allocator skips a device
    # whose taints are not tolerated without saying so (the embedded scheduler names them).
    assert "cannot allocate all claims" in reason
    workloads.delete_pod(cluster, "on-tainted")


def test_a_pod_for_any_gpu_gets_an_untainted_one(
    cluster: Cluster, uuids: dict[str, str]
) -> None:
    start_pod(cluster, "any-gpu", template("any-gpu"))
    devices = allocated(cluster, workloads.running(cluster, "any-gpu"))
    assert len(devices) == 1 and devices[0] != FATAL_GPU, devices
    workloads.delete_pod(cluster, "any-gpu")


def test_an_informational_xid_leaves_its_gpu_allocatable(
    cluster: Cluster, uuids: dict[str, str]
) -> None:
    raise_xid(cluster, uuids[INFO_GPU], INFO_XID)
    informs = {"key": health.TAINT_KEY_XID, "value": str(INFO_XID), "effect": "None"}
    cluster.eventually(
        lambda: f"taint={health.TAINT_KEY_XID}={INFO_XID}:None devices={INFO_GPU}"
        in plugin_logs(cluster), what=f"the plugin to see XID {INFO_XID}", timeout_s=GUARD_S)
    if kube_minor() >= 35:
        cluster.eventually(lambda: taints(gpu_devices(cluster)[INFO_GPU]) == [informs],
                           what=f"the effect None taint on {INFO_GPU}", timeout_s=GUARD_S)
    else:
        # The 1.34 API server has no effect None: the plugin leaves such a taint out rather
        # than have the slice refused, and keeps publishing the fatal one.
        assert "event=device_taint_effects server_version=v1.34" in plugin_logs(cluster)
        assert "effect_none=False" in plugin_logs(cluster)
        time.sleep(2)
        found = gpu_devices(cluster)
        assert taints(found[INFO_GPU]) == []
        assert taints(found[FATAL_GPU]) == [XID_TAINT]
    start_pod(cluster, "on-informed", template("informed-gpu", uuid=uuids[INFO_GPU]))
    assert allocated(cluster, workloads.running(cluster, "on-informed")) == [INFO_GPU]
    workloads.delete_pod(cluster, "on-informed")


def test_a_claim_that_tolerates_the_xid_taint_gets_the_tainted_gpu(
    cluster: Cluster, uuids: dict[str, str]
) -> None:
    tolerations = [{"key": health.TAINT_KEY_XID, "operator": "Exists", "effect": "NoSchedule"}]
    start_pod(cluster, "tolerating", template(
        "tolerating-gpu", uuid=uuids[FATAL_GPU], tolerations=tolerations))
    assert allocated(cluster, workloads.running(cluster, "tolerating")) == [FATAL_GPU]
    assert taints(gpu_devices(cluster)[FATAL_GPU]) == [XID_TAINT]
    workloads.delete_pod(cluster, "tolerating")
