"""How the kubelet plugin reads the claims it checks its checkpoint entries against (pure).

The stale-claim sweep drops an entry only on evidence that its claim is gone. A claim the
API server returns but that does not decode is no such evidence: it counts as present and
allocated, so its entry is never swept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core import decoding, errors, models, names


def claim_or_placeholder(raw: Mapping[str, Any]) -> models.ResourceClaim:
    """The claim; one that does not decode counts as present and allocated (never stale)."""
    try:
        return decoding.resource_claim_from_k8s(raw)
    except errors.DecodeError:
        meta = raw.get("metadata") or {}
        return models.ResourceClaim(
            uid=names.ClaimUID(str(meta.get("uid") or "")),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            allocated=True,
        )


def claims_by_uid(
    raws: Iterable[Mapping[str, Any]],
) -> dict[names.ClaimUID, models.ResourceClaim]:
    """Listed claims by UID (for entries rebuilt from a CDI spec, which know only the UID)."""
    claims = (claim_or_placeholder(raw) for raw in raws)
    return {claim.uid: claim for claim in claims}
