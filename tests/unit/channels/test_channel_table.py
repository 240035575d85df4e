"""The channel table (computedomain.channels): who holds which IMEX channel, the lowest free one."""

from __future__ import annotations

import pytest

from core import errors, names
from core.computedomain import channels

D = channels.DomainChannel
C = channels.ClaimChannel


def test_an_empty_cluster_gives_channel_1_never_0() -> None:
    table = channels.build_table(domains=(), claims=())
    assert table.lowest_free() == 1


def test_the_lowest_id_no_live_domain_holds_is_free() -> None:
    table = channels.build_table(
        domains=(D(domain_uid="a", channel_id=1), D(domain_uid="b", channel_id=3),
                 D(domain_uid="new", channel_id=None)),
        claims=(),
    )
    assert table.lowest_free() == 2
    assert table.channel_of("b") == 3
    assert table.channel_of("new") is None


def test_a_deleted_domains_channel_stays_taken_while_a_claim_names_it() -> None:
    # "gone" has no live CD any more; its pod's claim still carries channel 1.
    table = channels.build_table(domains=(), claims=(C(domain_uid="gone", channel_id=1),))
    assert table.lowest_free() == 2
    assert table.channel_of("gone") == 1


def test_a_channel_is_free_again_once_the_domain_and_its_claims_are_gone() -> None:
    assert channels.build_table(domains=(), claims=()).lowest_free() == 1


def test_claims_on_channel_0_hold_nothing_in_channel_isolation() -> None:
    table = channels.build_table(domains=(), claims=(C(domain_uid="shared", channel_id=0),))
    assert table.lowest_free() == 1
    assert table.in_use == 0


def test_exhaustion_is_none_and_the_message_says_what_frees_a_channel() -> None:
    table = channels.build_table(
        domains=(D(domain_uid="a", channel_id=1), D(domain_uid="b", channel_id=2)),
        claims=(), max_channels=3,
    )
    assert table.lowest_free() is None
    message = channels.exhausted_message(namespace="ns", name="c", table=table)
    assert "all 2 channels (1..2)" in message
    assert "imex.channels.max" in message


def test_a_pending_assignment_counts_as_taken() -> None:
    table = channels.with_assignment(
        channels.build_table(domains=(), claims=()), domain_uid="a", channel_id=1
    )
    assert table.lowest_free() == 2
    assert table.channel_of("a") == 1


@pytest.mark.parametrize("bad", [0, 1, 2049])
def test_a_maximum_outside_2_to_2048_is_refused(bad: int) -> None:
    with pytest.raises(errors.ConfigError, match=r"imex\.channels\.max is"):
        channels.check_max_channels(bad)


def test_claim_channels_are_read_only_from_this_drivers_channel_configs() -> None:
    claim = {"spec": {"devices": {"config": [
        {"opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "kind": names.KIND_CHANNEL_CONFIG, "domainID": "x", "channelID": 5}}},
        {"opaque": {"driver": names.DRIVER_NAME, "parameters": {
            "kind": names.KIND_CHANNEL_CONFIG, "domainID": "cd-1", "channelID": 7}}},
        {"opaque": {"driver": names.DRIVER_NAME, "parameters": {
            "kind": names.KIND_CHANNEL_CONFIG, "domainID": "cd-2", "channelID": "7"}}},
        {"opaque": {"driver": names.DRIVER_NAME, "parameters": {
            "kind": names.KIND_DAEMON_CONFIG, "domainID": "cd-3"}}},
        "garbage",
    ]}}}
    assert channels.claim_channels_from_k8s(claim) == (C(domain_uid="cd-1", channel_id=7),)
    assert channels.claim_channels_from_k8s({"spec": None}) == ()


def test_domain_channel_is_read_tolerantly_from_status() -> None:
    assert channels.domain_channel_from_k8s(
        {"metadata": {"uid": "u"}, "status": {"channelID": 4}}
    ) == D(domain_uid="u", channel_id=4)
    assert channels.domain_channel_from_k8s(
        {"metadata": {"uid": "u"}, "status": {"channelID": True}}
    ) == D(domain_uid="u", channel_id=None)
    assert channels.domain_channel_from_k8s({}) == D(domain_uid="", channel_id=None)
