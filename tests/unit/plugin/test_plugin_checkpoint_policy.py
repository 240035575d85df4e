"""The kubelet plugin's checkpoint policies as pure functions (`core.compaction`,
`core.checkpoint_recovery`).

Covers: when the journal is folded into a snapshot; what a missing checkpoint means with and
without CDI specs on disk; which entries survive a lost journal; the note about unreadable
spec files in a recovery's Node event.
"""

from __future__ import annotations

import pytest

from core import checkpoint_recovery, compaction, models, names
from core.computedomain import checkpoint_records as cd_records

A = names.ClaimUID("aaaaaaaa-0000-4000-8000-000000000001")
B = names.ClaimUID("bbbbbbbb-0000-4000-8000-000000000002")
C = names.ClaimUID("cccccccc-0000-4000-8000-000000000003")


def _entry(
    uid: names.ClaimUID, state: models.ClaimState, *, name: str = ""
) -> models.CheckpointEntry:
    return models.CheckpointEntry(
        claim_uid=uid, namespace="ns" if name else "", name=name, state=state,
        record=cd_records.ComputeDomainClaimRecord(
            mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE
        ),
    )


def _checkpoint(*entries: models.CheckpointEntry) -> models.Checkpoint:
    return models.Checkpoint(
        boot_id="b", codec=cd_records.CODEC, entries={e.claim_uid: e for e in entries},
    )


@pytest.mark.parametrize(
    ("claims", "threshold"),
    [(0, 1024), (4096, 1024), (4100, 1025), (40_000, 10_000)],
)
def test_the_compaction_threshold_is_a_floor_or_a_quarter_of_the_claims(
    claims: int, threshold: int
) -> None:
    assert compaction.compaction_threshold(claims) == threshold


@pytest.mark.parametrize(
    ("journal_records", "appended", "compacts"),
    [(0, 1024, False), (1023, 1, False), (1024, 1, True), (1000, 100, True), (0, 0, False)],
)
def test_a_journal_is_compacted_only_once_it_would_outgrow_the_threshold(
    journal_records: int, appended: int, compacts: bool
) -> None:
    assert compaction.needs_compaction(
        journal_records=journal_records, appended=appended, claims=10
    ) is compacts


def test_a_missing_checkpoint_without_cdi_specs_is_a_first_start() -> None:
    meaning = checkpoint_recovery.missing_checkpoint(frozenset())

    assert meaning is checkpoint_recovery.MissingCheckpoint.FIRST_START


def test_a_missing_checkpoint_beside_cdi_specs_of_ours_was_lost() -> None:
    meaning = checkpoint_recovery.missing_checkpoint(frozenset({A}))

    assert meaning is checkpoint_recovery.MissingCheckpoint.LOST


def test_a_lost_journal_keeps_the_snapshots_completed_entries_of_claims_with_specs() -> None:
    started = models.ClaimState.PREPARE_STARTED
    completed = models.ClaimState.PREPARE_COMPLETED
    snapshot = _checkpoint(
        _entry(A, completed, name="a"), _entry(B, started, name="b"), _entry(C, completed, name="c")
    )
    # The specs prove A and B; C's spec is gone (unprepared after the snapshot).
    rebuilt = _checkpoint(_entry(A, completed), _entry(B, completed))

    kept = checkpoint_recovery.after_lost_journal(rebuilt, snapshot=snapshot)

    assert kept.entries[A].name == "a"  # the snapshot says more than the spec
    assert kept.entries[B].name == ""  # started in the snapshot: the spec is what is known
    assert C not in kept.entries


def test_a_lost_journal_with_nothing_to_keep_is_the_rebuilt_state_as_is() -> None:
    rebuilt = _checkpoint(_entry(A, models.ClaimState.PREPARE_COMPLETED))

    kept = checkpoint_recovery.after_lost_journal(rebuilt, snapshot=_checkpoint())

    assert kept is rebuilt


def test_the_recovery_note_names_unreadable_spec_files_only_when_there_are_some() -> None:
    assert checkpoint_recovery.unreadable_specs_note(()) == ""
    note = checkpoint_recovery.unreadable_specs_note((A, B))
    assert note.startswith(f"; 2 unreadable spec file(s) ({A}, {B})")
