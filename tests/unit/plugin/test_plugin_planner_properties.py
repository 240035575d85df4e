"""Property tests: prepare/unprepare sequences on a fake node, and slice sync convergence.

The fake node applies the planned steps to a checkpoint and a dict of CDI files, optionally
stopping after the first step (a crash mid-prepare), and checks the invariants that must hold
after every operation whatever the order of claims, domains and modes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import plugin_factories as f
from hypothesis import given, settings
from hypothesis import strategies as st

from core import checkpoint, errors, models, names, slices
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import preparing

_DOMAINS = {
    names.ComputeDomainUID(f"cd-{i}"): f.domain(
        f"cd-{i}", name=f"cd-{i}", ready_nodes=(f.NODE_NAME,)
    )
    for i in range(2)
}
_CONFIGS = (f.HOST, f.DRIVER)


@dataclasses.dataclass
class _FakeNode:
    cp: models.Checkpoint
    cdi_files: dict[names.ClaimUID, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def apply(self, outcome: models.ClaimOutcome, *, crash_after: int | None = None) -> None:
        steps = outcome.steps if crash_after is None else outcome.steps[:crash_after]
        for step in steps:
            match step:
                case models.WriteCheckpoint(checkpoint=cp):
                    self.cp = cd_records.decode(checkpoint.encode(cp))
                case models.WriteCDISpec(claim_uid=uid, spec=spec):
                    self.cdi_files[uid] = spec
                case models.DeleteCDISpec(claim_uid=uid):
                    self.cdi_files.pop(uid, None)
                case _:
                    pass


_ops = st.lists(
    st.tuples(
        st.sampled_from(["prepare", "unprepare", "crash"]),
        st.integers(0, 3),  # claim
        st.integers(0, 1),  # domain
        st.sampled_from([None, "Single", "All", "foo"]),
        st.integers(0, 1),  # config
    ),
    max_size=12,
)


def _claim(index: int, domain: int, mode: str | None) -> models.ResourceClaim:
    return f.claim(f"claim-{index}", name=f"job-{index}",
                   params=f.channel_params(f"cd-{domain}", allocation_mode=mode))


@given(_ops)
@settings(max_examples=150, deadline=None)
def test_property_prepare_unprepare_keep_the_node_consistent(
    ops: list[tuple[str, int, int, str | None, int]],
) -> None:
    node = _FakeNode(cp=f.empty_checkpoint())
    now = f.NOW
    for kind, index, domain, mode, config_index in ops:
        now += 1.0
        config = _CONFIGS[config_index]
        the_claim = _claim(index, domain, mode)
        if kind == "unprepare":
            outcome = preparing.plan_unprepare(f.ref(the_claim), checkpoint=node.cp, now=now)
            assert outcome.error is None
            node.apply(outcome)
            assert the_claim.uid not in node.cdi_files
            continue
        outcome = preparing.plan_prepare(
            the_claim, checkpoint=node.cp, node=f.NODE, config=config, domains=_DOMAINS,
            node_labels={names.COMPUTE_DOMAIN_LABEL: f"cd-{domain}"}, now=now,
        )
        if outcome.error is not None:
            assert isinstance(outcome.error, errors.PermanentError | errors.RetryableError)
            assert f.writes(outcome) == []
            assert outcome.checkpoint == node.cp
        elif kind == "crash":
            node.apply(outcome, crash_after=1)
            continue
        node.apply(outcome)
        if outcome.error is None:
            assert node.cp == outcome.checkpoint
            again = preparing.plan_prepare(
                the_claim, checkpoint=node.cp, node=f.NODE, config=config, domains=_DOMAINS,
                node_labels={}, now=now,
            )
            assert (again.steps, again.devices) == ((), outcome.devices)
        _check_invariants(node)


def _check_invariants(node: _FakeNode) -> None:
    entries = node.cp.entries
    completed = {u for u, e in entries.items() if e.state is models.ClaimState.PREPARE_COMPLETED}
    holding = {u for u, e in entries.items() if e.state is not models.ClaimState.PREPARE_ABORTED}
    assert completed <= set(node.cdi_files) <= holding
    modes = {(e.record.mode, e.record.isolation) for u, e in entries.items() if u in holding}
    assert len(modes) <= 1, "claims of two modes on one node"
    owners: dict[int, str] = {}
    for uid in sorted(completed):
        record = entries[uid].record
        for channel in record.channel_ids:
            assert owners.setdefault(channel, record.domain_id) == record.domain_id


_device = st.builds(
    lambda name, i: {"name": name, "attributes": {"id": {"int": i}}},
    st.sampled_from(["channel-0", "daemon-0", "x"]),
    st.integers(0, 3),
)


def _slices(devices: list[dict[str, Any]], generation: int) -> tuple[dict[str, Any], ...]:
    return slices.build_resource_slices(
        node_name="n", driver=names.DRIVER_NAME, devices=devices, generation=generation
    )


@given(
    st.lists(_device, max_size=300), st.integers(0, 5),
    st.lists(_device, max_size=300), st.integers(0, 5),
)
@settings(max_examples=60, deadline=None)
def test_property_slice_sync_converges_in_one_round(
    old: list[dict[str, Any]], old_gen: int, new: list[dict[str, Any]], new_gen: int
) -> None:
    store = {s["metadata"]["name"]: s for s in _slices(old, old_gen)}
    desired = _slices(new, new_gen)
    for action in slices.plan_slice_sync(desired=desired, existing=tuple(store.values())):
        match action:
            case models.CreateObject(obj=obj):
                store[obj["metadata"]["name"]] = dict(obj)
            case models.PatchObject(name=name, patch=patch):
                store[name] = {**store[name], **patch}
            case models.DeleteObject(name=name):
                del store[name]
            case _:
                raise AssertionError(action)
    assert slices.plan_slice_sync(desired=desired, existing=tuple(store.values())) == ()
    assert sorted(store) == sorted(s["metadata"]["name"] for s in desired)
