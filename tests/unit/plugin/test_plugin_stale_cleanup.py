"""The stale-entry clean-up planner: exactly the entries found stale and unchanged since go."""

from __future__ import annotations

import dataclasses

import plugin_factories as f
from hypothesis import given
from hypothesis import strategies as st

from core import checkpoint as checkpoint_codec
from core import models, names
from core.computedomain import checkpoint_records as cd_records

STATES = (models.ClaimState.PREPARE_STARTED, models.ClaimState.PREPARE_COMPLETED,
          models.ClaimState.PREPARE_ABORTED)


def _entry(i: int, state: models.ClaimState) -> models.CheckpointEntry:
    return models.CheckpointEntry(
        record=cd_records.ComputeDomainClaimRecord(
            mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
            domain_id="cd", channel_ids=(0,),
        ),
        claim_uid=names.ClaimUID(f"uid-{i}"), namespace="ns", name=f"c-{i}", state=state,
        updated_at=float(i),
    )


@given(
    states=st.lists(st.sampled_from(STATES), min_size=0, max_size=8),
    found_stale=st.sets(st.integers(0, 7)),
    changed=st.sets(st.integers(0, 7)),
)
def test_only_unchanged_stale_entries_go_entry_first_then_file(
    states: list[models.ClaimState], found_stale: set[int], changed: set[int]
) -> None:
    seen = {i: _entry(i, s) for i, s in enumerate(states)}
    now = {
        e.claim_uid: dataclasses.replace(e, updated_at=e.updated_at + 100) if i in changed else e
        for i, e in seen.items()
    }
    cp = dataclasses.replace(f.empty_checkpoint(), entries=now)
    stale = [
        checkpoint_codec.StaleEntry(entry=seen[i], reason=checkpoint_codec.StaleReason.DELETED)
        for i in found_stale if i in seen
    ]
    plan = checkpoint_codec.plan_stale_cleanup(cp, stale=stale)
    expected = {seen[i].claim_uid for i in found_stale if i in seen and i not in changed}
    assert {r.entry.claim_uid for r in plan.removed} == expected
    if not expected:
        assert plan.steps == ()
        return
    first, *rest = plan.steps
    assert isinstance(first, models.WriteCheckpoint)
    assert set(first.checkpoint.entries) == set(now) - expected
    assert rest == [models.DeleteCDISpec(claim_uid=uid) for uid in sorted(expected)]


def test_only_started_and_completed_entries_are_checked_against_the_api() -> None:
    entries = {e.claim_uid: e for e in (_entry(i, s) for i, s in enumerate(STATES))}
    cp = dataclasses.replace(f.empty_checkpoint(), entries=entries)
    checked = checkpoint_codec.entries_to_check(cp)
    assert [e.state for e in checked] == list(STATES[:2])


def test_the_api_answer_decides_the_reason() -> None:
    entry = _entry(1, models.ClaimState.PREPARE_COMPLETED)
    same = dataclasses.replace(f.claim(), uid=entry.claim_uid)
    assert checkpoint_codec.stale_reason(entry, None) is checkpoint_codec.StaleReason.DELETED
    assert checkpoint_codec.stale_reason(entry, f.claim()) is (
        checkpoint_codec.StaleReason.RECREATED
    )
    assert checkpoint_codec.stale_reason(
        entry, dataclasses.replace(same, allocated=False)
    ) is checkpoint_codec.StaleReason.DEALLOCATED
    assert checkpoint_codec.stale_reason(entry, same) is None
