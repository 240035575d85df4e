"""The demo's consumable-shares chapter: two pods on one GPU, each claim holding one share of it.

Runs on a node whose plugin publishes GPUs with `allowMultipleAllocations` (see
`core.gpu.shares`): two claims ask for one `shares` unit each (upstream's
gpu-consumable-shares-integer spec), the embedded scheduler gives both the same GPU with a
`shareID` each, and the plugin prepares both beside each other, then unprepares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from core import errors, kinds, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records

if TYPE_CHECKING:
    from apps.cli.gpu_demo import GpuNode, Say

DRIVER = names.GPU_DRIVER_NAME
NAMESPACE = "gpu-demo"
CLAIMS = ("share-a", "share-b")


@dataclasses.dataclass(kw_only=True)
class SharesReport:
    """What the shares chapter observed: device and shareID per claim, and what was left."""

    allocated: dict[str, str] = dataclasses.field(default_factory=dict)
    share_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    cdi_ids: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    leftover_cdi_files: int = 0
    leftover_checkpoint_entries: int = 0

    @property
    def clean(self) -> bool:
        return self.leftover_cdi_files == 0 and self.leftover_checkpoint_entries == 0


def share_claim(name: str, *, shares: int = 1) -> dict[str, Any]:
    """A claim for `shares` units of one GPU (upstream's integer-shares request)."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "capacity": {"requests": {"shares": str(shares)}},
        }}]}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def _capacity(device: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return dict((device.get("capacity") or {}).get(name) or {})


def run_shares_story(node: GpuNode, *, say: Say) -> SharesReport:
    """Allocate and prepare two one-share claims on one GPU, then unprepare both."""
    report = SharesReport()
    cluster = node.cluster
    devices = [d for s in cluster.list(kinds.RESOURCE_SLICE.kind).items
               if s["spec"].get("driver") == DRIVER for d in s["spec"].get("devices") or ()]
    first = next((d for d in devices if d.get("allowMultipleAllocations")
                  and (d.get("attributes") or {}).get("type") == {"string": "gpu"}), None)
    if first is None:
        raise errors.PermanentError("no full GPU was published with allowMultipleAllocations")
    shares = _capacity(first, "shares")
    say(f"{first['name']} published with allowMultipleAllocations: shares={shares.get('value')} "
        f"(each claim takes {shares.get('requestPolicy', {}).get('default')} by default), "
        f"memory={_capacity(first, 'memory').get('value')}")
    scheduled = []
    for claim_name in CLAIMS:
        cluster.create(kinds.RESOURCE_CLAIM.kind, share_claim(claim_name))
        pod = node.allocator.schedule_pod(_pod(f"{claim_name}-pod", claim_name))
        scheduled.append(pod)
        [result] = pod.claims[0]["status"]["allocation"]["devices"]["results"]
        report.allocated[claim_name] = str(result["device"])
        report.share_ids[claim_name] = str(result.get("shareID", ""))
        say(f"claim {NAMESPACE}/{claim_name} (capacity.requests shares=1) allocated "
            f"{result['device']} shareID={result.get('shareID')} consumed="
            f"{result.get('consumedCapacity')}")
    for pod in scheduled:
        claim = pod.claims[0]
        refs = embedded.claim_refs((claim,))
        results = node.kubelet.prepare(DRIVER, refs)
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise errors.PermanentError(f"NodePrepareResources failed: {'; '.join(failed)}")
        prepared = [d for r in results.values() for d in r.devices]
        report.cdi_ids[claim["metadata"]["name"]] = tuple(
            i for d in prepared for i in d.cdi_device_ids)
        say(f"NodePrepareResources for {claim['metadata']['name']}: "
            + ", ".join(f"{d.device_name} share_id={d.share_id} cdi={','.join(d.cdi_device_ids)}"
                        for d in prepared))
    shared = sorted(set(report.allocated.values()))
    say(f"{len(scheduled)} pods share {', '.join(shared)}: both claims prepared beside each "
        "other (consumable shares with equal configs)")
    embedded.unprepare_and_delete_pods(
        node.kubelet, node.allocator, cluster, scheduled, driver=DRIVER, namespace=NAMESPACE)
    cdi_dir = fs_cdi.CDIDirectory(node.settings.cdi_root, file_name=gpu_cdi.spec_file_name)
    report.leftover_cdi_files = len(cdi_dir.claim_uids())
    current = fs_checkpoints.read_checkpoint(node.settings.checkpoint_path, gpu_records.CODEC)
    report.leftover_checkpoint_entries = 0 if current is None else sum(
        1 for e in current.entries.values() if e.state is not models.ClaimState.PREPARE_ABORTED
    )
    say(f"NodeUnprepareResources for the {len(scheduled)} shares; left: "
        f"{report.leftover_cdi_files} CDI spec files, "
        f"{report.leftover_checkpoint_entries} checkpoint entries")
    return report
