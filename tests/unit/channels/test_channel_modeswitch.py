"""Switching isolation (none <-> channel) is a mode switch: refused while anything would strand."""

from __future__ import annotations

import dataclasses

from core import errors, models, names
from core.computedomain import modeswitch
from tests.unit.plugin import plugin_factories as f

HOST = models.IMEXMode.HOST_MANAGED
CHANNEL = models.Isolation.CHANNEL


def _slices(*device_types: str) -> frozenset[modeswitch.PublishedSlice]:
    return frozenset(
        modeswitch.PublishedSlice(device_types=frozenset({t})) for t in device_types
    )


def _claim_in_use() -> models.ResourceClaim:
    return dataclasses.replace(
        f.claim(), reserved_for=(models.ClaimConsumer(resource="pods", name="p", uid="u"),)
    )


def test_a_domain_admitted_under_isolation_none_blocks_a_switch_to_channel() -> None:
    cd = f.domain(annotations={names.ADMITTED_MODE_ANNOTATION: "hostManaged",
                               names.ADMITTED_ISOLATION_ANNOTATION: "none"})
    (blocker,) = modeswitch.find_blockers([cd], mode=HOST, isolation=CHANNEL)
    assert (blocker.reason, blocker.admitted) == (
        modeswitch.Reason.OTHER_MODE, "hostManaged/none"
    )


def test_claims_in_use_on_channel_0_nodes_block_a_switch_to_channel_in_the_same_mode() -> None:
    installed = _slices(names.DEVICE_TYPE_CHANNEL)
    blockers = modeswitch.find_blockers(
        [], mode=HOST, isolation=CHANNEL, claims=[_claim_in_use()],
        installed=modeswitch.installed_modes(installed),
        installed_isolation=modeswitch.installed_isolations(installed),
    )
    assert [b.reason for b in blockers] == [modeswitch.Reason.CLAIM_IN_USE]


def test_claims_in_use_under_the_same_isolation_do_not_block_an_upgrade() -> None:
    installed = _slices(names.DEVICE_TYPE_SLOT)
    assert modeswitch.installed_isolations(installed) == frozenset({CHANNEL})
    assert modeswitch.find_blockers(
        [], mode=HOST, isolation=CHANNEL, claims=[_claim_in_use()],
        installed=modeswitch.installed_modes(installed),
        installed_isolation=modeswitch.installed_isolations(installed),
    ) == ()


def test_a_node_holding_channel_0_claims_refuses_channel_isolation_prepares_with_the_drain() -> (
    None
):
    old = f.prepare(f.claim(f.OTHER_CLAIM_UID), config=f.HOST)
    assert old.error is None
    domain = dataclasses.replace(f.domain(), status=models.ComputeDomainStatus(channel_id=3))
    params = {**f.channel_params(), "channelID": 3}
    outcome = f.prepare(f.claim(params=params, device="slot-0"), config=f.HOST_CHANNEL,
                        domains={f.CD_UID: domain}, checkpoint=old.checkpoint)
    assert isinstance(outcome.error, errors.PermanentError)
    assert "hostManaged/none" in outcome.error.message
    assert "drain" in outcome.error.message
