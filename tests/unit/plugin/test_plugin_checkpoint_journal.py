"""The checkpoint journal codec (records after the snapshot) and the index the planner reads."""

from __future__ import annotations

import dataclasses

import plugin_factories as f
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plugin_checkpoint import _entry, _small, checkpoints

from core import checkpoint, errors, models, names


def _journal(*steps: tuple[models.Checkpoint, models.Checkpoint]) -> bytes:
    return b"".join(checkpoint.encode_records(before, after) for before, after in steps)


def _two_changes() -> tuple[models.Checkpoint, models.Checkpoint, models.Checkpoint, bytes]:
    base = _small()
    one = checkpoint.with_entry(base, _entry("v", updated_at=2.0))
    two = checkpoint.without_entry(one, names.ClaimUID("u"))
    return base, one, two, _journal((base, one), (one, two))


def test_replaying_the_journal_over_the_snapshot_gives_the_latest_state() -> None:
    base, _, two, journal = _two_changes()
    replayed = checkpoint.replay(base, journal)
    assert replayed.checkpoint == two
    assert (replayed.records, replayed.valid_length) == (2, len(journal))


def test_replaying_records_the_snapshot_already_holds_changes_nothing() -> None:
    # Why compaction may be interrupted between the new snapshot and the journal's truncation.
    _, _, two, journal = _two_changes()
    assert checkpoint.replay(two, journal).checkpoint == two


def test_only_the_named_claims_are_logged() -> None:
    base = _small()
    after = checkpoint.with_entry(base, _entry("v"))
    assert checkpoint.encode_records(base, after, changed=(names.ClaimUID("v"),)).count(
        b"\n") == 1
    assert checkpoint.encode_records(base, base) == b""


def test_a_header_change_is_logged_and_replayed() -> None:
    base = _small()
    rebooted = dataclasses.replace(checkpoint.after_boot(base, boot_id="b-2"), extra={"x": 1})
    replayed = checkpoint.replay(base, checkpoint.encode_records(base, rebooted))
    assert replayed.checkpoint == rebooted


def test_a_partial_last_line_is_a_torn_tail_that_is_ignored() -> None:
    base, one, _, journal = _two_changes()
    first = len(checkpoint.encode_records(base, one))
    replayed = checkpoint.replay(base, journal[: first + 10])
    assert replayed.checkpoint == one
    assert replayed.valid_length == first


def test_a_bad_last_record_is_a_torn_tail() -> None:
    base, one, _, journal = _two_changes()
    garbled = journal[:-5] + b"00000"[:4] + b"\n"
    replayed = checkpoint.replay(base, garbled)
    assert replayed.checkpoint == one
    assert replayed.valid_length == len(checkpoint.encode_records(base, one))


def test_a_bad_record_followed_by_good_ones_is_corrupt() -> None:
    base, _, _, journal = _two_changes()
    garbled = b"0" + journal[1:]
    with pytest.raises(errors.CheckpointCorruptError, match="journal record 1"):
        checkpoint.replay(base, garbled)


def test_a_record_of_the_wrong_shape_with_a_good_checksum_is_corrupt() -> None:
    line = checkpoint._record_line({"put": {"uid": 7}}).encode()
    with pytest.raises(errors.CheckpointCorruptError, match="journal record 1"):
        checkpoint.replay(_small(), line)


def test_every_single_byte_change_is_detected_or_cut_as_a_torn_tail() -> None:
    base, one, two, journal = _two_changes()
    for position in range(len(journal)):
        changed = bytearray(journal)
        changed[position] ^= 0x01
        try:
            replayed = checkpoint.replay(base, bytes(changed))
        except errors.CheckpointCorruptError:
            continue
        # Never a state the writer did not write: at most the last record is lost.
        assert replayed.checkpoint in (one, two), position
        assert replayed.checkpoint == two or replayed.valid_length < len(journal)


@settings(max_examples=60, deadline=None)
@given(checkpoints(), checkpoints())
def test_property_any_transition_replays_to_its_target(
    before: models.Checkpoint, after: models.Checkpoint
) -> None:
    journal = checkpoint.encode_records(before, after)
    assert checkpoint.replay(before, journal).checkpoint == after


# ---------------------------------------------------------------- index


@settings(max_examples=80, deadline=None)
@given(checkpoints(), st.data())
def test_property_the_kept_index_equals_one_built_from_scratch(
    cp: models.Checkpoint, data: st.DataObject
) -> None:
    current = checkpoint.indexed(cp)
    for _ in range(4):
        uids = sorted(current.entries)
        if uids and data.draw(st.booleans()):
            current = checkpoint.without_entry(current, data.draw(st.sampled_from(uids)))
        else:
            uid = data.draw(st.sampled_from([*uids, "new-a", "new-b"]))
            entry = data.draw(st.sampled_from([
                _entry(uid),
                _entry(uid, state=models.ClaimState.PREPARE_STARTED),
                _entry(uid, state=models.ClaimState.PREPARE_ABORTED),
            ]))
            current = checkpoint.with_entry(current, entry)
        kept = checkpoint.index_of(current)
        fresh = checkpoint.index_of(dataclasses.replace(current, entries=dict(current.entries)))
        assert kept is current.index
        assert dataclasses.replace(kept, entries={}) == dataclasses.replace(fresh, entries={})


def test_an_index_left_stale_by_a_replace_is_not_used() -> None:
    cp = checkpoint.indexed(_small())
    emptied = dataclasses.replace(cp, entries={})
    assert checkpoint.index_of(emptied).prepared_devices == 0
    assert checkpoint.index_of(cp).prepared_devices == 1


def test_expired_tombstones_are_found_through_the_index() -> None:
    cp = checkpoint.indexed(dataclasses.replace(_small(), entries={
        f.CLAIM_UID: _entry(state=models.ClaimState.PREPARE_ABORTED, updated_at=f.NOW - 400),
        f.OTHER_CLAIM_UID: _entry(f.OTHER_CLAIM_UID),
    }))
    after = checkpoint.expire_tombstones(cp, now=f.NOW)
    assert list(after.entries) == [f.OTHER_CLAIM_UID]
    assert checkpoint.index_of(after).tombstones == frozenset()


def test_a_journal_that_follows_another_snapshot_is_stale_and_not_applied() -> None:
    base, _, _, records = _two_changes()
    old = checkpoint.snapshot_id(checkpoint.encode(base))
    journal = checkpoint.base_record(old) + records
    newer = checkpoint.indexed(dataclasses.replace(base, entries={}))
    replayed = checkpoint.replay(newer, journal, snapshot=checkpoint.snapshot_id(
        checkpoint.encode(newer)))
    assert replayed.stale and replayed.valid_length == 0
    assert replayed.checkpoint == newer


def test_a_journal_that_follows_this_snapshot_is_applied() -> None:
    base, _, two, records = _two_changes()
    this = checkpoint.snapshot_id(checkpoint.encode(base))
    replayed = checkpoint.replay(base, checkpoint.base_record(this) + records, snapshot=this)
    assert not replayed.stale
    assert replayed.checkpoint == two
    assert replayed.records == 3


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 150), st.booleans()), max_size=400))
def test_property_derived_entries_behave_as_a_plain_dict(
    steps: list[tuple[int, bool]],
) -> None:
    # Many small changes: the shared-base mapping folds its changes more than once.
    current = checkpoint.indexed(dataclasses.replace(_small(), entries={}))
    model: dict[str, models.CheckpointEntry] = {}
    for number, put in steps:
        uid = names.ClaimUID(f"claim-{number}")
        if put:
            entry = _entry(uid, updated_at=float(len(model)))
            current, model[uid] = checkpoint.with_entry(current, entry), entry
        else:
            current = checkpoint.without_entry(current, uid)
            model.pop(uid, None)
        assert len(current.entries) == len(model)
    assert dict(current.entries) == model
    assert current.entries == model and sorted(current.entries) == sorted(model)
    assert all((uid in current.entries) == (uid in model) for uid in map(
        lambda n: names.ClaimUID(f"claim-{n}"), range(151)))
