"""What the kubelet plugin concludes when its checkpoint cannot be used as found (pure).

The plugin rebuilds prepared state from the CDI specs it wrote whenever the checkpoint is
lost, corrupt, unreadable or missing its journal: a spec file is proof that a claim was
prepared, so that state is never forgotten. These functions decide what the evidence means;
`apps.pluginkit` reads the files, moves them aside and reports.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection
from typing import TypeVar

from core import models, names

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


class MissingCheckpoint(enum.Enum):
    """What it means that no checkpoint file exists."""

    # No spec of ours either: nothing was ever prepared here (a first start).
    FIRST_START = "first_start"
    # Specs of ours exist, so the file was deleted or lost: rebuild what they prove.
    LOST = "lost"


def missing_checkpoint(spec_claim_uids: Collection[names.ClaimUID]) -> MissingCheckpoint:
    """What a missing checkpoint file means, given the claims that have CDI specs on disk."""
    return MissingCheckpoint.LOST if spec_claim_uids else MissingCheckpoint.FIRST_START


def after_lost_journal(
    rebuilt: models.Checkpoint[RecordT], *, snapshot: models.Checkpoint[RecordT]
) -> models.Checkpoint[RecordT]:
    """The state to keep when the snapshot expects a journal that is gone or empty.

    `rebuilt` is what the CDI specs prove. A claim the snapshot holds as completed keeps its
    snapshot entry (it says more than its spec: request and device names); every other claim
    is as its spec proves, and a claim without a spec is not kept.
    """
    kept = {
        uid: snapshot.entries[uid] for uid in rebuilt.entries
        if uid in snapshot.entries
        and snapshot.entries[uid].state is models.ClaimState.PREPARE_COMPLETED
    }
    if not kept:
        return rebuilt
    return dataclasses.replace(rebuilt, entries={**rebuilt.entries, **kept}, index=None)


def unreadable_specs_note(unreadable: tuple[names.ClaimUID, ...]) -> str:
    """The sentence a recovery's Node event adds about spec files it could not read."""
    if not unreadable:
        return ""
    return (
        f"; {len(unreadable)} unreadable spec file(s) ({', '.join(unreadable)}) hold every "
        "IMEX channel until their claims are unprepared: inspect and delete those files if "
        "the claims are gone"
    )
