"""Channel isolation on the wire: slot devices, the opaque config's channelID, status.channelID."""

from __future__ import annotations

import dataclasses

import pytest

from core import decoding, errors, models, names
from core.computedomain import slice_devices
from core.computedomain.channel_prepare import assigned_channel
from tests.unit.plugin import plugin_factories as f

CONFIG = dataclasses.replace(f.HOST_CHANNEL, channel_slots=3)


def test_a_node_publishes_its_slots_and_no_channel_under_channel_isolation() -> None:
    devices = slice_devices.plan_slice_devices(CONFIG, node=f.NODE)
    assert devices == tuple(
        {"name": f"slot-{i}", "attributes": {"type": {"string": "slot"}, "id": {"int": i}}}
        for i in range(3)
    )


def test_a_node_without_a_clique_publishes_no_slot() -> None:
    lonely = dataclasses.replace(f.NODE, clique_id="")
    assert slice_devices.plan_slice_devices(CONFIG, node=lonely) == ()


def test_isolation_none_still_publishes_channel_0() -> None:
    devices = slice_devices.plan_slice_devices(f.HOST, node=f.NODE)
    assert [d["name"] for d in devices] == ["channel-0"]


def test_the_channel_config_round_trips_its_channel_id_and_omits_it_when_unset() -> None:
    cfg = models.ChannelConfig(domain_id="cd", allocation_mode="Single", channel_id=9)
    wire = decoding.opaque_config_to_k8s(cfg)
    assert wire["channelID"] == 9
    assert decoding.decode_opaque_config(wire, strict=True) == cfg
    plain = decoding.opaque_config_to_k8s(models.ChannelConfig(domain_id="cd"))
    assert "channelID" not in plain


@pytest.mark.parametrize("bad", [-1, 2048, True, "3", 1.5])
def test_a_channel_id_that_is_no_channel_is_a_decode_error_naming_the_field(bad: object) -> None:
    params = {**f.channel_params(), "channelID": bad}
    with pytest.raises(errors.DecodeError, match=r"channelID must be an integer 0\.\.2047"):
        decoding.decode_opaque_config(params, strict=True)


def test_status_channel_id_round_trips_and_stays_absent_when_unassigned() -> None:
    status = models.ComputeDomainStatus(status=models.DomainStatus.READY, channel_id=5)
    wire = decoding.compute_domain_status_to_k8s(status)
    assert wire == {"status": "Ready", "nodes": [], "channelID": 5}
    assert "channelID" not in decoding.compute_domain_status_to_k8s(models.ComputeDomainStatus())
    raw = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
           "metadata": {"name": "cd", "namespace": "ns", "uid": "u"},
           "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}}, "status": wire}
    decoded = decoding.compute_domain_from_k8s(raw)
    assert decoded.status is not None and decoded.status.channel_id == 5


def test_a_status_naming_channel_0_is_refused_for_good_under_channel_isolation() -> None:
    domain = dataclasses.replace(f.domain(), status=models.ComputeDomainStatus(channel_id=0))
    with pytest.raises(errors.PermanentError, match="never assigns channel 0"):
        assigned_channel(domain, configs=(models.ChannelConfig(domain_id=f.CD_UID, channel_id=0),))
