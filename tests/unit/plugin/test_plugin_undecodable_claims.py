"""`core.stale_claims`: what the stale-claim sweep makes of the claims the API server returns.

Covers: a claim that decodes is itself; one that does not counts as present and allocated
under its UID, so the entry it backs is never swept; listing by UID.
"""

from __future__ import annotations

from typing import Any

from core import checkpoint as checkpoint_codec
from core import models, names, stale_claims
from core.computedomain import checkpoint_records as cd_records

UID = names.ClaimUID("aaaaaaaa-0000-4000-8000-000000000001")


def _raw(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": UID},
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def test_a_decodable_claim_is_read_as_it_is() -> None:
    claim = stale_claims.claim_or_placeholder(_raw())

    assert claim.uid == UID and not claim.allocated


def test_an_undecodable_claim_counts_as_present_and_allocated() -> None:
    raw = _raw(allocation={"devices": {"results": "not a list"}})

    claim = stale_claims.claim_or_placeholder(raw)

    assert (claim.uid, claim.namespace, claim.name, claim.allocated) == (UID, "ns", "c", True)
    entry = models.CheckpointEntry(
        claim_uid=UID, namespace="ns", name="c", state=models.ClaimState.PREPARE_COMPLETED,
        record=cd_records.ComputeDomainClaimRecord(
            mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE
        ),
    )
    assert checkpoint_codec.stale_reason(entry, claim) is None


def test_listed_claims_are_found_by_uid() -> None:
    undecodable = _raw(allocation={"devices": {"results": "not a list"}})

    by_uid = stale_claims.claims_by_uid([undecodable])

    assert set(by_uid) == {UID} and by_uid[UID].allocated
