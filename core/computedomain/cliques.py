"""The node's NVLink clique ID, derived from what NVML reports for each GPU.

A clique is the set of GPUs that can reach each other over NVLink; every GPU of a node must
report the same one. The rules (DESIGN §3) separate "no fabric here" (a normal node: empty
clique), "fabric still forming" (retry later, never crash-loop) and "inconsistent" (an operator
must look at the node).
"""

from __future__ import annotations

from collections.abc import Sequence

from core import errors, models

_UUID_BYTES = 16


def clique_id_from_fabric(records: Sequence[models.FabricRecord]) -> str:
    """`<clusterUuid>.<cliqueId>` shared by every GPU, or "" when the node has no NVLink fabric.

    Raises RetryableError while the fabric is still being set up or reports an error for a GPU,
    and PermanentError when GPUs disagree about their clique.
    """
    not_ready = [r.gpu_uuid for r in records if _is_forming(r)]
    if not_ready:
        raise errors.RetryableError(
            f"NVLink fabric registration is not complete yet for GPU(s) {', '.join(not_ready)}; "
            "waiting for the fabric manager to finish (check nvidia-fabricmanager / NVLink "
            "switch health if this persists)"
        )
    failed = [r.gpu_uuid for r in records if _is_failed(r)]
    if failed:
        raise errors.RetryableError(
            f"NVLink fabric registration failed for GPU(s) {', '.join(failed)}; retrying "
            "(check the fabric manager logs and NVLink switch health on this node)"
        )
    by_clique: dict[str, list[str]] = {}
    for record in records:
        by_clique.setdefault(_clique_of(record), []).append(record.gpu_uuid)
    if len(by_clique) > 1:
        detail = "; ".join(
            f"{clique or '<no clique>'}: {', '.join(sorted(gpus))}"
            for clique, gpus in sorted(by_clique.items())
        )
        raise errors.PermanentError(
            f"GPUs on this node disagree about their NVLink clique ({detail}); every GPU of a "
            "node must be in one clique: check the node's NVLink cabling and fabric manager"
        )
    return next(iter(by_clique), "")


def _is_forming(record: models.FabricRecord) -> bool:
    return record.state in (models.FabricState.NOT_STARTED, models.FabricState.IN_PROGRESS)


def _is_failed(record: models.FabricRecord) -> bool:
    return record.state is models.FabricState.COMPLETED and not record.status_ok


def _clique_of(record: models.FabricRecord) -> str:
    if record.state is models.FabricState.NOT_SUPPORTED or not any(record.cluster_uuid):
        return ""
    if len(record.cluster_uuid) != _UUID_BYTES:
        raise errors.PermanentError(
            f"NVML reported a {len(record.cluster_uuid)}-byte cluster UUID for GPU "
            f"{record.gpu_uuid} (expected {_UUID_BYTES}); check the NVIDIA driver version"
        )
    return f"{format_uuid(record.cluster_uuid)}.{record.clique_id}"


def format_uuid(raw: bytes) -> str:
    """16 raw bytes as the canonical lower-case 8-4-4-4-12 UUID string."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
