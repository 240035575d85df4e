"""The node's NVLink clique ID, derived from what NVML reports for each GPU.

A clique is the set of GPUs that can reach each other over NVLink. The rules follow the
upstream driver's kubelet plugin:

- a GPU whose fabric is not supported, or whose cluster UUID is all zero (NVLink-capable but
  not multi-node capable), takes no part: it is skipped, and the other GPUs decide;
- a GPU whose fabric is supported but not usable (registration NOT_STARTED / IN_PROGRESS, or
  COMPLETED with an error status) is a fabric error when `strict` (gate
  CrashOnNVLinkFabricErrors, on by default: the plugin refuses to start and says why) and is
  skipped like an unsupported one otherwise (the node may end up with no clique); with
  `forming_ok` (gate FabricManagerPartitioning on a single-node NVSwitch system, where Fabric
  Manager registers a GPU only once a partition holding it is activated) a registration that
  is not complete yet is skipped even when `strict`, as upstream's plugin does;
- the GPUs that remain must name one clique; two different ones are a fabric error.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

from core import errors, models, names

_UUID_BYTES = 16


class _Part(enum.Enum):
    SKIPPED = "skipped"
    FORMING = "forming"
    FAILED = "failed"
    MEMBER = "member"


def clique_id_from_fabric(
    records: Sequence[models.FabricRecord], *, strict: bool = True, forming_ok: bool = False
) -> str:
    """`<clusterUuid>.<cliqueId>` shared by every GPU that has one, or "" when none has.

    Deterministic. Raises PermanentError when GPUs disagree about their clique and, when
    `strict`, when a GPU's fabric registration failed or (unless `forming_ok`) is incomplete.
    """
    parts = {record.gpu_uuid: _part_of(record) for record in records}
    if forming_ok:
        parts = {
            gpu: _Part.SKIPPED if part is _Part.FORMING else part for gpu, part in parts.items()
        }
    if strict:
        _refuse_unusable_fabric(parts)
    by_clique: dict[str, list[str]] = {}
    for record in records:
        if parts[record.gpu_uuid] is _Part.MEMBER:
            by_clique.setdefault(_clique_of(record), []).append(record.gpu_uuid)
    if len(by_clique) > 1:
        detail = "; ".join(
            f"{clique}: {', '.join(sorted(gpus))}" for clique, gpus in sorted(by_clique.items())
        )
        raise errors.PermanentError(
            f"GPUs on this node disagree about their NVLink clique ({detail}); every GPU of a "
            "node must be in one clique: check the node's NVLink cabling and fabric manager"
        )
    return next(iter(by_clique), "")


def unusable_fabric(records: Sequence[models.FabricRecord]) -> tuple[models.FabricRecord, ...]:
    """The GPUs whose fabric is supported but not usable, sorted by UUID: registration
    NOT_STARTED / IN_PROGRESS, or COMPLETED with an error status. These are what `strict`
    refuses (and what is skipped otherwise); a GPU without fabric support, or NVLink-capable
    but not multi-node capable (all-zero cluster UUID), is not among them."""
    unusable = (r for r in records if _part_of(r) in (_Part.FORMING, _Part.FAILED))
    return tuple(sorted(unusable, key=lambda record: record.gpu_uuid))


def _refuse_unusable_fabric(parts: dict[str, _Part]) -> None:
    forming = sorted(gpu for gpu, part in parts.items() if part is _Part.FORMING)
    failed = sorted(gpu for gpu, part in parts.items() if part is _Part.FAILED)
    if not forming and not failed:
        return
    problems = []
    if forming:
        problems.append(
            f"NVLink fabric registration is not complete (state NOT_STARTED or IN_PROGRESS) "
            f"for GPU(s) {', '.join(forming)}"
        )
    if failed:
        problems.append(
            f"NVLink fabric registration failed (state COMPLETED with an error status) for "
            f"GPU(s) {', '.join(failed)}"
        )
    raise errors.PermanentError(
        "; ".join(problems) + ": refusing to start (gate CrashOnNVLinkFabricErrors is on); "
        "check nvidia-fabricmanager and NVLink switch health on this node, or set "
        "CrashOnNVLinkFabricErrors=false to run such a node without an NVLink clique"
    )


def _part_of(record: models.FabricRecord) -> _Part:
    if record.state is models.FabricState.NOT_SUPPORTED:
        return _Part.SKIPPED
    if record.state is not models.FabricState.COMPLETED:
        return _Part.FORMING
    if not record.status_ok:
        return _Part.FAILED
    if not any(record.cluster_uuid):
        return _Part.SKIPPED
    return _Part.MEMBER


def _clique_of(record: models.FabricRecord) -> str:
    if len(record.cluster_uuid) != _UUID_BYTES:
        raise errors.PermanentError(
            f"NVML reported a {len(record.cluster_uuid)}-byte cluster UUID for GPU "
            f"{record.gpu_uuid} (expected {_UUID_BYTES}); check the NVIDIA driver version"
        )
    return f"{format_uuid(record.cluster_uuid)}.{record.clique_id}"


# How often the plugin reads the clique again (upstream's kubelet plugin: every 10 minutes).
CLIQUE_REFRESH_INTERVAL_S: Final = 600.0


def refreshed_clique_id(current: str, observed: str) -> str:
    """The clique to plan with after a re-read: a newly observed clique replaces the known
    one, but a re-read that finds none keeps it (as upstream: a clique is never dropped)."""
    return observed or current


def gpu_clique_label_patch(clique_id: str) -> dict[str, Any] | None:
    """The Node merge patch that sets `nvidia.com/gpu.clique`; None without a clique (the
    label is then left as it is, as upstream)."""
    if not clique_id:
        return None
    return {"metadata": {"labels": {names.GPU_CLIQUE_LABEL: clique_id}}}


def gpu_clique_label_removal() -> dict[str, Any]:
    """The Node merge patch that removes `nvidia.com/gpu.clique` (at a graceful stop)."""
    return {"metadata": {"labels": {names.GPU_CLIQUE_LABEL: None}}}


def format_uuid(raw: bytes) -> str:
    """16 raw bytes as the canonical lower-case 8-4-4-4-12 UUID string."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
