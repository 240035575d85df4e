"""Prepare under channel isolation: the claim's ComputeDomain and channel, checked, injected."""

from __future__ import annotations

import dataclasses

from core import cdi, decoding, errors, models, names
from tests.unit.plugin import plugin_factories as f

CONFIG = f.HOST_CHANNEL


def _domain(
    channel: int | None, uid: str = f.CD_UID, name: str = "cd-train"
) -> models.ComputeDomain:
    cd = f.domain(uid, name=name)
    return dataclasses.replace(cd, status=models.ComputeDomainStatus(channel_id=channel))


def _claim(channel: int | None, *, uid: str = f.CLAIM_UID, domain_id: str = f.CD_UID,
           slot: str = "slot-0") -> models.ResourceClaim:
    params = f.channel_params(domain_id, allocation_mode="Single")
    if channel is not None:
        params["channelID"] = channel
    return f.claim(uid, params=params, device=slot)


def _spec(outcome: models.ClaimOutcome) -> models.WriteCDISpec:
    return next(s for s in outcome.steps if isinstance(s, models.WriteCDISpec))


def test_a_slot_claim_gets_its_domains_channel_as_a_device_node_with_the_nodes_major() -> None:
    outcome = f.prepare(_claim(17), config=CONFIG, domains={f.CD_UID: _domain(17)})
    assert outcome.error is None
    assert outcome.devices[0].device_name == "slot-0"
    assert outcome.devices[0].cdi_device_ids == (cdi.qualified_device_id(f.CLAIM_UID, 17),)
    nodes = [n for d in _spec(outcome).spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
    assert nodes == [{"path": f"{names.IMEX_CHANNEL_DIR}/channel17", "type": "c",
                      "major": f.NODE.channel_major, "minor": 17, "fileMode": 0o666}]


def test_prepare_waits_while_the_controller_has_not_assigned_a_channel() -> None:
    outcome = f.prepare(_claim(3), config=CONFIG, domains={f.CD_UID: _domain(None)})
    assert isinstance(outcome.error, errors.RetryableError)
    assert "status.channelID" in outcome.error.message
    assert f.writes(outcome) == []


def test_a_claim_naming_another_channel_than_its_domain_is_refused_for_good() -> None:
    outcome = f.prepare(_claim(4), config=CONFIG, domains={f.CD_UID: _domain(3)})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "names channel 4" in outcome.error.message
    assert "has channel 3" in outcome.error.message
    assert f.writes(outcome) == []


def test_a_claim_without_a_channel_id_is_refused_under_channel_isolation() -> None:
    outcome = f.prepare(_claim(None), config=CONFIG, domains={f.CD_UID: _domain(3)})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "names channel none" in outcome.error.message


def test_a_channel_device_is_not_what_channel_isolation_publishes() -> None:
    outcome = f.prepare(_claim(3, slot="channel-0"), config=CONFIG,
                        domains={f.CD_UID: _domain(3)})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "does not publish" in outcome.error.message


def test_a_channel_another_domains_prepared_claim_holds_on_this_node_is_refused() -> None:
    other = f.OTHER_CD_UID
    domains = {f.CD_UID: _domain(5), other: _domain(5, uid=other, name="cd-other")}
    first = f.prepare(_claim(5, uid=f.OTHER_CLAIM_UID, domain_id=other), config=CONFIG,
                      domains=domains)
    assert first.error is None
    # The other ComputeDomain's claim is prepared here (its checkpoint entry holds channel 5).
    outcome = f.prepare(_claim(5), config=CONFIG, domains=domains, checkpoint=first.checkpoint)
    assert isinstance(outcome.error, errors.RetryableError)
    assert "IMEX channel 5 on this node is held by" in outcome.error.message


def test_two_domains_on_one_node_get_different_device_nodes() -> None:
    other = f.OTHER_CD_UID
    domains = {f.CD_UID: _domain(1), other: _domain(2, uid=other, name="cd-other")}
    first = f.prepare(_claim(1), config=CONFIG, domains=domains)
    second = f.prepare(_claim(2, uid=f.OTHER_CLAIM_UID, domain_id=other, slot="slot-1"),
                       config=CONFIG, domains=domains, checkpoint=first.checkpoint)
    assert first.error is None and second.error is None
    paths = [n["path"] for o in (first, second) for d in _spec(o).spec["devices"]
             for n in d["containerEdits"]["deviceNodes"]]
    assert paths == [f"{names.IMEX_CHANNEL_DIR}/channel1", f"{names.IMEX_CHANNEL_DIR}/channel2"]


def test_a_node_without_a_clique_refuses_a_channel_claim() -> None:
    node = dataclasses.replace(f.NODE, clique_id="")
    outcome = f.prepare(_claim(3), config=CONFIG, domains={f.CD_UID: _domain(3)}, node=node)
    assert isinstance(outcome.error, errors.PermanentError)
    assert "no NVLink clique" in outcome.error.message


def test_the_allocation_mode_all_refusal_names_the_domains_own_channel_not_channel_0() -> None:
    params = f.channel_params(f.CD_UID, allocation_mode="All")
    params["channelID"] = 3
    outcome = f.prepare(f.claim(params=params, device="slot-0"), config=CONFIG,
                        domains={f.CD_UID: _domain(3)})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "channel 0" not in outcome.error.message
    assert "its ComputeDomain's own IMEX channel only" in outcome.error.message
    assert f.writes(outcome) == []


def test_a_new_prepare_of_a_domain_marked_as_a_later_duplicate_is_refused_for_good() -> None:
    # The controller found another ComputeDomain on channel 17 and claims of this one already
    # carrying it (`ChannelUnique=False`): a new prepare would share the channel across them.
    raw = {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd-train", "namespace": f.NAMESPACE, "uid": f.CD_UID},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
        "status": {"status": "Ready", "nodes": [], "channelID": 17, "conditions": [{
            "type": "ChannelUnique", "status": "False", "reason": "IMEXChannelDuplicate",
            "message": "IMEX channel 17 of ComputeDomain x is also held by ComputeDomain y",
            "lastTransitionTime": "2026-11-25T10:00:00Z"}]},
    }
    marked = decoding.compute_domain_from_k8s(raw)
    outcome = f.prepare(_claim(17), config=CONFIG, domains={f.CD_UID: marked})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "also held by ComputeDomain y" in outcome.error.message
    assert "recreate" in outcome.error.message
    assert f.writes(outcome) == []
