"""What both halves' kubelet plugins check about a claim before planning it (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from core import checkpoint as checkpoints
from core import errors, models, names

P = TypeVar("P")


def reusable_devices(
    checkpoint: models.Checkpoint[P], claim_uid: names.ClaimUID
) -> tuple[models.PreparedDevice, ...] | None:
    """The answer of a claim already completed with a full kubelet answer, else None."""
    entry = checkpoint.entries.get(claim_uid)
    return entry.devices if entry is not None and checkpoints.is_reusable(entry) else None


# Kubernetes UIDs are UUIDs (36 characters); this leaves room for other generators while
# refusing anything that could name a path or flood a log.
_MAX_UID_LENGTH = 128
_UID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def claim_uid_error(uid: str) -> errors.PermanentError | None:
    """Refuse a claim UID that cannot come from the API server (it names files on the node)."""
    if (
        0 < len(uid) <= _MAX_UID_LENGTH
        and set(uid) <= _UID_CHARS
        and uid[0].isalnum()
    ):
        return None
    return errors.PermanentError(
        f"claim UID {shown(uid)} ({len(uid)} characters) is not a valid Kubernetes UID (1 to "
        f"{_MAX_UID_LENGTH} letters, digits, '-', '_' or '.', starting with a letter or digit); "
        "the kubelet's request is malformed: check what sends NodePrepareResources to this plugin"
    )


def shown(text: str, limit: int = 64) -> str:
    """`text` quoted for a message or log line, cut to `limit` characters."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + "..."


def reservation_error(
    claim: models.ResourceClaim,
    *,
    placements: Sequence[models.PodPlacement],
    node: models.NodeFacts,
) -> errors.PermanentError | None:
    """Refuse a claim that no pod on this node may use any more (a late or stale prepare).

    The kubelet prepares a claim only for a pod on this node that the claim is reserved for
    (`status.reservedFor`). When none of the reserved pods runs here any more (the pod was
    deleted while its prepare was in flight, and the kubelet already unprepared it), preparing
    would hold devices for nobody. `placements` are the reserved pods as observed now.
    """
    if not claim.allocated:
        return None  # plan_prepare says what is missing
    pods = [c for c in claim.reserved_for if c.is_pod]
    here = {p.uid for p in placements if p.node_name == node.node_name}
    if any(p.uid in here for p in pods):
        return None
    whom = (
        "no pod (its status.reservedFor is empty)" if not pods
        else ", ".join(sorted(f"pod {claim.namespace}/{p.name}" for p in pods))
        + f", none of which runs on node {node.node_name} now"
    )
    return errors.PermanentError(
        f"claim {claim.namespace}/{claim.name} is reserved for {whom}: its pod left or was "
        "deleted while the prepare was in flight, so the claim is not prepared on this node; "
        "nothing to do (a new pod on this node that uses the claim gets it prepared)"
    )
