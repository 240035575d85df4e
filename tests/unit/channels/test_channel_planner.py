"""The controller planner under channel isolation: channel first, then the RCT, then Ready."""

from __future__ import annotations

import dataclasses

from core import decoding, kinds, models, names
from core.computedomain import channels, controlling

CD_KIND = kinds.COMPUTE_DOMAIN.kind
RCT_KIND = kinds.RESOURCE_CLAIM_TEMPLATE.kind
CONFIG = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.CHANNEL,
    gates=models.FeatureGates(values={"HostManagedIMEXDaemon": True}), namespace="driver",
)
ADMITTED = {
    names.ADMITTED_MODE_ANNOTATION: "hostManaged",
    names.ADMITTED_ISOLATION_ANNOTATION: "channel",
}


def _cd(status: models.ComputeDomainStatus | None = None) -> models.ComputeDomain:
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name="train", namespace="team", uid="cd-uid", resource_version="5",
            finalizers=(names.COMPUTE_DOMAIN_FINALIZER,), annotations=ADMITTED,
        ),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="train-channel")
        ),
        status=status,
    )


def _rct_meta() -> models.ObjectMeta:
    return models.ObjectMeta(
        name="train-channel", namespace="team", uid="rct",
        finalizers=(names.COMPUTE_DOMAIN_FINALIZER,),
        labels={names.COMPUTE_DOMAIN_LABEL: "cd-uid"},
    )


def test_a_new_domain_records_its_channel_before_the_rct_that_carries_it_then_is_ready() -> None:
    cd = _cd()
    actions = controlling.plan_compute_domain(
        cd, observed=controlling.Observed(channel_id=3), config=CONFIG
    )
    status_patches = [a for a in actions if isinstance(a, models.PatchObject)]
    creates = [a for a in actions if isinstance(a, models.CreateObject)]
    assert [p.patch for p in status_patches] == [
        {"status": {"status": "NotReady", "nodes": [], "channelID": 3}},
        {"status": {"status": "Ready", "nodes": [], "channelID": 3}},
    ]
    assert actions.index(status_patches[0]) < actions.index(creates[0]) < actions.index(
        status_patches[1]
    )
    rct = creates[0].obj
    request = rct["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == names.SLOT_DEVICE_CLASS
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["channelID"] == 3
    assert decoding.decode_opaque_config(params, strict=True) == models.ChannelConfig(
        domain_id="cd-uid", allocation_mode="Single", channel_id=3
    )


def test_a_ready_domain_with_its_channel_and_rct_needs_nothing() -> None:
    cd = _cd(models.ComputeDomainStatus(status=models.DomainStatus.READY, channel_id=3))
    observed = controlling.Observed(workload_rct=_rct_meta(), channel_id=3)
    assert controlling.plan_compute_domain(cd, observed=observed, config=CONFIG) == ()


def test_exhaustion_leaves_the_domain_not_ready_with_a_condition_and_event_and_no_rct() -> None:
    cd = _cd()
    refusal = "all 2 channels (1..2) are held"
    observed = controlling.Observed(channel_id=None, channel_refusal=refusal)
    actions = controlling.plan_compute_domain(cd, observed=observed, config=CONFIG)
    assert not any(isinstance(a, models.CreateObject) for a in actions)
    events = [a for a in actions if isinstance(a, models.EmitEvent)]
    assert [(e.reason, e.message) for e in events] == [(channels.EXHAUSTED_REASON, refusal)]
    patches = [a.patch for a in actions if isinstance(a, models.PatchObject)]
    assert {"status": {"conditions": [{
        "type": controlling.CHANNEL_ASSIGNED_CONDITION, "status": "False",
        "reason": channels.EXHAUSTED_REASON, "message": refusal,
    }]}} in patches
    assert {"status": {"status": "NotReady", "nodes": []}} in patches


def test_exhaustion_is_reported_once() -> None:
    cd = _cd(models.ComputeDomainStatus(status=models.DomainStatus.NOT_READY))
    condition = controlling.Condition(
        type=controlling.CHANNEL_ASSIGNED_CONDITION, status="False",
        reason=channels.EXHAUSTED_REASON, message="full",
    )
    observed = controlling.Observed(channel_refusal="full", conditions=(condition,))
    assert controlling.plan_compute_domain(cd, observed=observed, config=CONFIG) == ()


def test_a_channel_freed_later_clears_the_condition_and_builds_the_domain() -> None:
    cd = _cd(models.ComputeDomainStatus(status=models.DomainStatus.NOT_READY))
    condition = controlling.Condition(
        type=controlling.CHANNEL_ASSIGNED_CONDITION, status="False",
        reason=channels.EXHAUSTED_REASON, message="full",
    )
    observed = controlling.Observed(channel_id=1, conditions=(condition,))
    actions = controlling.plan_compute_domain(cd, observed=observed, config=CONFIG)
    patches = [a.patch for a in actions if isinstance(a, models.PatchObject)]
    assert {"status": {"conditions": None}} in patches
    assert any(isinstance(a, models.CreateObject) for a in actions)
    assert patches[-1] == {"status": {"status": "Ready", "nodes": [], "channelID": 1}}


def test_isolation_none_keeps_channel_0_and_the_default_channel_class() -> None:
    config = dataclasses.replace(CONFIG, isolation=models.Isolation.NONE)
    cd = dataclasses.replace(_cd(), meta=dataclasses.replace(_cd().meta, annotations={
        names.ADMITTED_MODE_ANNOTATION: "hostManaged",
        names.ADMITTED_ISOLATION_ANNOTATION: "none",
    }))
    actions = controlling.plan_compute_domain(cd, observed=controlling.Observed(), config=config)
    rct = next(a.obj for a in actions if isinstance(a, models.CreateObject))
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == (
        names.CHANNEL_DEVICE_CLASS
    )
    assert "channelID" not in rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]


def test_a_domain_admitted_under_isolation_none_is_a_mode_mismatch_under_channel() -> None:
    cd = dataclasses.replace(_cd(), meta=dataclasses.replace(_cd().meta, annotations={
        names.ADMITTED_MODE_ANNOTATION: "hostManaged",
        names.ADMITTED_ISOLATION_ANNOTATION: "none",
    }))
    assert controlling.is_mode_mismatch(cd, config=CONFIG)


def test_the_allocation_mode_warning_names_the_domains_own_channel_not_channel_0() -> None:
    """Under isolation channel a workload gets its ComputeDomain's channel, never channel 0."""
    greedy = dataclasses.replace(_cd(), spec=models.ComputeDomainSpec(channel=models.ChannelSpec(
        resource_claim_template_name="train-channel", allocation_mode=models.AllocationMode.ALL,
    )))
    actions = controlling.plan_compute_domain(
        greedy, observed=controlling.Observed(channel_id=3), config=CONFIG
    )
    (warning,) = [a for a in actions if isinstance(a, models.EmitEvent)]
    assert warning.reason == controlling.ALLOCATION_MODE_OVERRIDDEN_REASON
    assert "channel 0" not in warning.message
    assert "its ComputeDomain's own IMEX channel only" in warning.message
    assert "status.channelID" in warning.message
