"""The kubelet's device-health stream, with the real kubelet: both plugins serve it, the kubelet
opens it in the newest version it speaks, and it copies the health of a Running pod's devices
into the pod's `status.containerStatuses[].allocatedResourcesStatus`.

Which claims the kubelet reports depends on its version. The 1.34 kubelet looks a container's
claims up by the *ResourceClaim object's* name in `container.resources.claims[].name`
(pkg/kubelet/cm/dra/manager.go:811, `cClaim.Name == claimInfo.ClaimName`; claiminfo.go:60 sets
ClaimName from the object's metadata.name), which holds the pod-local name: a claim made from
a template (`<pod>-<name>-<random>`), or one referenced under another local name, is never
matched, and it skips it silently (a V(4) log). Only a claim referenced under its own name is
reported. Upstream fixed this in kubernetes#134875 (issue #134482): the 1.37 kubelet maps the
local name through `pod.status.resourceClaimStatuses` (manager.go:900-927) and reports both.
Nothing in the stream can change that: the device list is right for both claims.

The chart with the GPU half on one simulated A100 node; gate ResourceHealthStatus on in every
component (alpha in 1.34; the pod field `allocatedResourcesStatus` needs it in the API server
too). Run with KUBE_VERSION=v1.34.4 (default: the kubelet asks for v1alpha1 unprompted) and
v1.37.2 (it picks v1 from the versions the registration lists).
"""

from __future__ import annotations

import re
from typing import Any

import cluster_driver
import control_plane
import pytest
import workloads
from cluster_driver import NODE, Cluster
from workloads import WORKLOAD_NAMESPACE

from adapters.nvml import health_events
from core.gpu import health

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

GPU_DRIVER = "gpu.nvidia.com"


def kube_minor() -> int:
    found = re.match(r"v1\.(\d+)\.", control_plane.kube_version())
    return int(found.group(1)) if found else 0


def expected_version() -> str:
    minor = kube_minor()
    return "v1alpha1" if minor < 36 else ("v1beta1" if minor == 36 else "v1")


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"resources": {"gpus": {"enabled": True}},
              "featureGates": {"NVMLDeviceHealthCheck": True}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile="a100-mig",
                                      kube_gates={"ResourceHealthStatus": True})


def plugin_logs(cluster: Cluster) -> str:
    assert cluster.runtime is not None
    return "\n".join(log.read_text(errors="replace")
                     for log in sorted(cluster.runtime.state_dir.glob("**/*.log")))


def test_the_kubelet_opens_the_health_stream_of_both_plugins(cluster: Cluster) -> None:
    version = expected_version()

    def opened() -> list[str] | None:
        lines = [line for line in plugin_logs(cluster).splitlines()
                 if f"event=health_stream_opened version={version} " in line]
        # One per plugin process: the CD and the GPU kubelet plugins log the same event.
        return lines if len(lines) >= 2 else None

    cluster.eventually(opened, what=f"the kubelet's {version} health stream to both plugins",
                       timeout_s=180)


def claim_spec(device_class: str) -> dict[str, Any]:
    return {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}]}}


def resource_health(claim: dict[str, Any], *, health: str = "Healthy",
                    message: str = "no fatal NVML event") -> list[dict[str, Any]]:
    """The entries the kubelet writes for a claim's GPU devices: it names each by the first CDI
    id the plugin returned for it at prepare (ours: `k8s.gpu.nvidia.com/claim=<uid>-<device>`)
    and, from 1.36 (gate ResourceHealthStatusMessage, on by default), adds our message (the
    plugin watches NVML health events here: gate NVMLDeviceHealthCheck)."""
    uid = claim["metadata"]["uid"]
    entries = []
    for result in claim["status"]["allocation"]["devices"]["results"]:
        assert result["driver"] == GPU_DRIVER and result["pool"] == NODE, result
        entry = {"resourceID": f"k8s.{GPU_DRIVER}/claim={uid}-{result['device']}",
                 "health": health}
        if kube_minor() >= 36:
            entry["message"] = message
        entries.append(entry)
    return entries


def gpu_uuid(cluster: Cluster, device: str) -> str:
    """The `uuid` attribute the node's GPU slice publishes for `device`."""
    for each in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice"):
        if each["spec"].get("driver") != GPU_DRIVER:
            continue
        for published in each["spec"].get("devices") or ():
            if published["name"] == device:
                return str(published["attributes"]["uuid"]["string"])
    raise AssertionError(f"{device} is not in the node's {GPU_DRIVER} ResourceSlice")


def test_the_kubelet_shows_the_health_of_a_running_pods_gpus(cluster: Cluster) -> None:
    workloads.ensure_namespace(cluster)
    # A whole GPU by a claim the pod refers to under the claim's own name (the one form the 1.34
    # kubelet reports), and a MIG device by a template (reported by 1.37; 1.35 and 1.36,
    # which this tier does not run, are left out of the expectation).
    workloads.create(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "health-gpu", "namespace": WORKLOAD_NAMESPACE},
        "spec": claim_spec("gpu.nvidia.com"),
    })
    workloads.create(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "health-mig", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"spec": claim_spec("mig.nvidia.com")},
    })
    workloads.create(cluster, workloads.pod("health-pod", claims=[
        ("health-gpu", {"resourceClaimName": "health-gpu"}),
        ("mig", {"resourceClaimTemplateName": "health-mig"}),
    ]))
    running = workloads.running(cluster, "health-pod", timeout_s=180)
    claims = {c["metadata"]["name"]: c for c in workloads.claims_of(cluster, running)}
    (made,) = [c for name, c in claims.items() if name != "health-gpu"]
    expected = {"claim:health-gpu": resource_health(claims["health-gpu"])}
    if kube_minor() >= 37:
        expected["claim:mig"] = resource_health(made)

    seen: list[dict[str, list[dict[str, Any]]]] = [{}]

    def reported() -> bool:
        pod = workloads.read_pod(cluster, "health-pod")
        (status,) = (pod or {}).get("status", {}).get("containerStatuses", [{}])
        seen[0] = {s["name"]: s.get("resources", [])
                   for s in status.get("allocatedResourcesStatus") or []}
        # NB: both claims in one comparison: one status computation of the kubelet writes
        # both, so the 1.34 kubelet's silence on the template claim is observed in the very
        # update that shows the other one, not guessed from a wait.
        return seen[0] == expected

    def wait_reported(what: str) -> None:
        try:
            cluster.eventually(reported, what=what, timeout_s=120)
        except AssertionError as exc:
            raise AssertionError(f"expected {expected}\nlast seen {seen[0]}\n{exc}") from None

    wait_reported("the pod's allocatedResourcesStatus")
    # A fatal XID on the whole GPU the pod runs on: the kubelet hears it on the stream and the
    # pod's status shows the device Unhealthy, with the taint named (1.36+).
    (result,) = claims["health-gpu"]["status"]["allocation"]["devices"]["results"]
    health_events.raise_simulated_event(cluster.files.gpu.driver_root, health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid=gpu_uuid(cluster, result["device"]), xid=79))
    expected["claim:health-gpu"] = resource_health(
        claims["health-gpu"], health="Unhealthy",
        message="tainted gpu.nvidia.com/xid=79:NoSchedule")
    wait_reported("the XID'd GPU Unhealthy in the pod's allocatedResourcesStatus")
    workloads.delete_pod(cluster, "health-pod")
