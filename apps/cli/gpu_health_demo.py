"""The demo's device health chapter: a sick GPU stops being handed out.

Runs on a node whose plugin has gate NVMLDeviceHealthCheck on (`gpu_demo.start_gpu_node(...,
feature_gates="NVMLDeviceHealthCheck=true")`): the plugin watches the simulated NVML's event
loop, which raises what the demo appends to the driver root's events file. A fatal XID taints
the GPU `NoSchedule` in the ResourceSlice, and a claim for that GPU stays pending with the
taint named; a claim tolerating the taint still gets it; an informational XID (13) is
published with effect `None` and refuses nothing.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from adapters.memory import allocator as memory_allocator
from adapters.nvml import health_events
from apps.cli import embedded
from core import errors, kinds, names
from core.gpu import deviceclasses, health

if TYPE_CHECKING:
    from apps.cli.gpu_demo import GpuNode, Say

DRIVER = names.GPU_DRIVER_NAME
NAMESPACE = "gpu-demo"
FATAL_XID = 79  # the GPU has fallen off the bus
INFORMATIONAL_XID = 13  # graphics engine exception: an application error
READY_TIMEOUT_S = 10.0
TAINT_TIMEOUT_S = 10.0


@dataclasses.dataclass(kw_only=True)
class HealthReport:
    """What the health chapter observed."""

    taint_latency_ms: float = 0.0
    refused: str = ""
    tolerated_device: str = ""
    informational_device: str = ""
    informational_taints: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """The tainted GPU was refused with its taint named, a tolerating claim still got it,
        and the GPU with an informational XID was allocated."""
        return (f"xid={FATAL_XID}:NoSchedule" in self.refused and bool(self.tolerated_device)
                and bool(self.informational_device))


def _claim(name: str, uuid: str, *, tolerate: bool = False) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": deviceclasses.GPU_CLASS,
        "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].uuid == '{uuid}'"}}],
    }
    if tolerate:
        exactly["tolerations"] = [{"key": health.TAINT_KEY_XID, "operator": "Exists",
                                   "effect": "NoSchedule"}]
    return {"apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.0-base",
                                 "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]},
    }


def _taints(node: GpuNode, device: str) -> tuple[str, ...]:
    for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items:
        if s["spec"].get("driver") != DRIVER:
            continue
        for d in s["spec"].get("devices") or ():
            if d["name"] == device:
                return tuple(f"{t['key']}={t.get('value', '')}:{t['effect']}"
                             for t in d.get("taints") or ())
    return ()


def run_health_story(node: GpuNode, *, say: Say) -> HealthReport:
    """Raise a fatal and an informational XID; show what the scheduler does with each GPU."""
    report = HealthReport()
    if node.health_events is None or not node.health_events.wait_ready(READY_TIMEOUT_S):
        raise errors.RetryableError(
            f"the simulated NVML event loop did not start within {READY_TIMEOUT_S:.0f}s")
    inventory = node.gpus.gpu_inventory() if node.gpus is not None else None
    gpus = [g for g in inventory.gpus if not g.mig_enabled] if inventory is not None else []
    if len(gpus) < 2:
        raise errors.ConfigError(f"the health chapter needs two GPUs not in MIG mode on "
                                 f"profile {node.profile}")
    sick, noisy = gpus[0], gpus[1]
    say(f"NVML event loop watching {len(node.health_events.monitored)} GPU(s); raising XID "
        f"{FATAL_XID} on {sick.name} ({sick.uuid}) in the simulated NVML")
    started = time.monotonic()
    health_events.raise_simulated_event(node.files.driver_root, health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid=sick.uuid, xid=FATAL_XID))
    embedded.wait_until(lambda: _taints(node, sick.name), timeout_s=TAINT_TIMEOUT_S,
                        what=f"{sick.name} tainted in the ResourceSlice")
    report.taint_latency_ms = (time.monotonic() - started) * 1000
    say(f"{sick.name} tainted {', '.join(_taints(node, sick.name))} in the ResourceSlice "
        f"{report.taint_latency_ms:.0f} ms after the event")
    scheduled = []
    node.cluster.create(kinds.RESOURCE_CLAIM.kind, _claim("wants-sick-gpu", sick.uuid))
    try:
        scheduled.append(node.allocator.schedule_pod(_pod("wants-sick-gpu-pod", "wants-sick-gpu")))
    except memory_allocator.AllocationError as exc:
        report.refused = exc.message
        say(f"claim wants-sick-gpu (selects {sick.name}) stays pending: {exc.message}")
    node.cluster.create(kinds.RESOURCE_CLAIM.kind,
                        _claim("tolerates-xid", sick.uuid, tolerate=True))
    pod = node.allocator.schedule_pod(_pod("tolerates-xid-pod", "tolerates-xid"))
    scheduled.append(pod)
    report.tolerated_device = str(
        pod.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"])
    say(f"claim tolerates-xid (toleration {health.TAINT_KEY_XID} Exists NoSchedule) gets "
        f"{report.tolerated_device} all the same")
    health_events.raise_simulated_event(node.files.driver_root, health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid=noisy.uuid, xid=INFORMATIONAL_XID))
    embedded.wait_until(lambda: _taints(node, noisy.name), timeout_s=TAINT_TIMEOUT_S,
                        what=f"{noisy.name} tainted in the ResourceSlice")
    report.informational_taints = _taints(node, noisy.name)
    node.cluster.create(kinds.RESOURCE_CLAIM.kind, _claim("wants-noisy-gpu", noisy.uuid))
    pod = node.allocator.schedule_pod(_pod("wants-noisy-gpu-pod", "wants-noisy-gpu"))
    scheduled.append(pod)
    report.informational_device = str(
        pod.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"])
    say(f"XID {INFORMATIONAL_XID} (an application error) on {noisy.name}: "
        f"{', '.join(report.informational_taints)} only informs; claim wants-noisy-gpu gets "
        f"{report.informational_device}")
    for each in scheduled:
        node.allocator.release_pod(each.pod)
        node.cluster.delete(kinds.POD.kind, namespace=NAMESPACE,
                            name=each.pod["metadata"]["name"])
    return report
