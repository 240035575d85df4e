"""The demo's dynamic MIG chapter: the scheduler chooses a MIG layout, the plugin creates it.

Runs on a node whose plugin has gate DynamicMIG on (`gpu_demo.start_gpu_node(...,
feature_gates="DynamicMIG=true")`): the plugin publishes, per partitionable GPU, a counter
set and every MIG profile at every placement as a device consuming its memory slices and
engines (KEP-4815), and tears down at start the MIG devices no prepared claim holds. Claims
that select a profile are allocated by the embedded scheduler, which honours the counters, so
the placements it picks never overlap; one claim too many stays pending with the reason.
Prepare creates each MIG device in the simulated NVML, unprepare destroys it.

On `a100-mig` GPU 0 (Ampere, MIG mode on) is partitionable: 8 memory slices, 7 compute
slices; GPU 1 (Ampere, MIG off: switching needs a GPU reset) is not, and is offered whole.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from adapters.memory import allocator as memory_allocator
from apps.cli import embedded
from core import errors, kinds, names
from core.gpu import deviceclasses

if TYPE_CHECKING:
    from apps.cli.gpu_demo import GpuNode, Say

DRIVER = names.GPU_DRIVER_NAME
NAMESPACE = "gpu-demo"
# The simulated profile the chapter runs on.
PROFILE = "a100-mig"
# The claims, in order, by the profile they select: they fill GPU 0 of a100-mig (memory
# slices 0-1, 2-3 and 4-7; all seven compute slices), so the last one cannot fit.
PROFILES = ("2g.10gb", "2g.10gb", "3g.20gb", "1g.5gb")


@dataclasses.dataclass(kw_only=True)
class MigReport:
    """What the dynamic MIG chapter observed."""

    torn_down: int = 0
    allocated: dict[str, str] = dataclasses.field(default_factory=dict)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    created: tuple[str, ...] = ()
    left_after: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Every fitting claim got its own MIG device, the extra one was refused, and none
        is left after unprepare."""
        return (len(self.allocated) == len(PROFILES) - 1 and len(self.refused) == 1
                and len(self.created) == len(self.allocated) and not self.left_after)


def mig_claim(name: str, profile: str) -> dict[str, Any]:
    """A claim for one MIG device of `profile`, created when the claim is prepared."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": deviceclasses.MIG_CLASS,
            "selectors": [{"cel": {
                "expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}],
        }}]}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.0-base",
                                 "resources": {"claims": [{"name": "mig"}]}}],
                 "resourceClaims": [{"name": "mig", "resourceClaimName": claim}]},
    }


def mig_devices(node: GpuNode) -> tuple[str, ...]:
    """The MIG devices the node's simulated NVML holds now, as `<profile>@<gpu>:<start>`."""
    if node.gpus is None:
        return ()
    return tuple(sorted(f"{m.profile}@gpu{m.parent_minor}:{m.placement_start}"
                        for m in node.gpus.gpu_inventory().migs))


def run_mig_story(node: GpuNode, *, torn_down: int, say: Say) -> MigReport:
    """Allocate the `PROFILES` claims (the last refused), prepare, show, unprepare."""
    report = MigReport(torn_down=torn_down)
    cluster = node.cluster
    slices = [s for s in cluster.list(kinds.RESOURCE_SLICE.kind).items
              if s["spec"].get("driver") == DRIVER]
    partitions = [d for s in slices for d in s["spec"].get("devices") or ()
                  if "consumesCounters" in d]
    sets = [c["name"] for s in slices for c in s["spec"].get("sharedCounters") or ()]
    say(f"published {len(partitions)} partitionable devices over counter set(s) "
        f"{', '.join(sets)}; start-up teardown destroyed {torn_down} MIG device(s) no "
        f"prepared claim held; simulated NVML now holds {len(mig_devices(node))}")
    scheduled = []
    for index, profile in enumerate(PROFILES):
        name = f"mig-{index}-{profile.replace('.', '-')}"
        cluster.create(kinds.RESOURCE_CLAIM.kind, mig_claim(name, profile))
        try:
            pod = node.allocator.schedule_pod(_pod(f"{name}-pod", name))
        except memory_allocator.AllocationError as exc:
            report.refused[name] = exc.message
            say(f"claim {name} ({profile}) stays pending: {exc.message}")
            continue
        device = str(pod.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"])
        report.allocated[name] = device
        say(f"claim {name} ({profile}): the scheduler chose {device}")
        scheduled.append(pod)
    for pod in scheduled:
        refs = embedded.claim_refs(pod.claims)
        results = node.kubelet.prepare(DRIVER, refs)
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise errors.PermanentError(f"NodePrepareResources failed: {'; '.join(failed)}")
        ids = [i for r in results.values() for d in r.devices for i in d.cdi_device_ids]
        say(f"NodePrepareResources for {pod.claims[0]['metadata']['name']}: {', '.join(ids)}")
    report.created = mig_devices(node)
    say(f"MIG devices created in the simulated NVML: {', '.join(report.created)}")
    embedded.unprepare_and_delete_pods(
        node.kubelet, node.allocator, cluster, scheduled, driver=DRIVER, namespace=NAMESPACE)
    report.left_after = mig_devices(node)
    say(f"NodeUnprepareResources for {len(scheduled)} claim(s): MIG devices destroyed; left: "
        f"{len(report.left_after)}")
    return report
