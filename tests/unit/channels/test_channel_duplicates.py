"""Two controllers at once must not leave one IMEX channel with two ComputeDomains.

Covers: the channel write carries the resourceVersion the choice was made from; the table's
verdict on a channel named by two live ComputeDomains (the earliest keeps it; a later one no
claim uses is re-assigned, with an Event on both and a new RCT; a later one whose claims carry
it is marked `ChannelUnique=False` for the plugin); the executor carrying a plan's own
resourceVersion from one preconditioned patch to the next.
"""

from __future__ import annotations

import pytest

from adapters.memory import cluster as memory_cluster
from core import errors, executing, kinds, models, names
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
EARLY, LATE = "2026-11-25T10:00:00Z", "2026-11-25T10:00:01Z"
OTHER = channels.ChannelHolder(domain_uid="other-uid", namespace="team-b", name="eval",
                               created=EARLY)


def _cd(channel: int | None = None) -> models.ComputeDomain:
    status = None if channel is None else models.ComputeDomainStatus(
        status=models.DomainStatus.READY, channel_id=channel)
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
        name="train-channel", namespace="team", uid="rct", resource_version="7",
        finalizers=(names.COMPUTE_DOMAIN_FINALIZER,),
        labels={names.COMPUTE_DOMAIN_LABEL: "cd-uid"},
    )


def _channel_patches(actions: tuple[models.ClusterAction, ...]) -> list[models.PatchObject]:
    return [a for a in actions if isinstance(a, models.PatchObject)
            and "channelID" in (a.patch.get("status") or {})]


def test_a_channel_is_written_only_if_the_domain_did_not_change_since_the_choice() -> None:
    actions = controlling.plan_compute_domain(
        _cd(), observed=controlling.Observed(channel_id=3), config=CONFIG)
    first = _channel_patches(actions)[0]
    assert first.patch["status"]["channelID"] == 3
    assert first.resource_version == "5"


def test_the_earliest_of_two_domains_naming_a_channel_keeps_it_quietly() -> None:
    later = channels.ChannelHolder(domain_uid="z", namespace="t", name="n", created=LATE)
    observed = controlling.Observed(
        workload_rct=_rct_meta(), workload_rct_channel=3, channel_id=3,
        channel_rivals=channels.Rivals(created=EARLY, others=(later,)))
    assert controlling.plan_compute_domain(_cd(3), observed=observed, config=CONFIG) == ()


def test_the_standing_is_the_same_whichever_process_judges_it() -> None:
    a = channels.ChannelHolder(domain_uid="a", namespace="t", name="a", created=EARLY)
    b = channels.ChannelHolder(domain_uid="b", namespace="t", name="b", created=EARLY)
    # Same second: the lower UID keeps the channel, from either side.
    assert channels.duplicate_standing(
        domain_uid="a", channel_id=3, rivals=channels.Rivals(created=EARLY, others=(b,)),
    ) == (channels.Standing.UNIQUE, None)
    assert channels.duplicate_standing(
        domain_uid="b", channel_id=3, rivals=channels.Rivals(created=EARLY, others=(a,)),
    ) == (channels.Standing.REASSIGN, a)


def test_a_later_duplicate_no_claim_uses_gets_another_channel_and_both_get_an_event() -> None:
    observed = controlling.Observed(
        workload_rct=_rct_meta(), workload_rct_channel=3, channel_id=4,
        channel_rivals=channels.Rivals(created=LATE, others=(OTHER,)))
    actions = controlling.plan_compute_domain(_cd(3), observed=observed, config=CONFIG)
    [moved, *_] = _channel_patches(actions)
    assert (moved.patch["status"]["channelID"], moved.resource_version) == (4, "5")
    events = [a for a in actions if isinstance(a, models.EmitEvent)]
    assert {(e.involved.uid, e.reason) for e in events} == {
        ("cd-uid", channels.DUPLICATE_REASON), ("other-uid", channels.DUPLICATE_REASON)}
    assert all("team-b/eval" in e.message and "channel 4" in e.message for e in events)
    # The template still carries channel 3: it goes, and comes back with 4 on the next pass.
    assert models.DeleteObject(kind=RCT_KIND, namespace="team", name="train-channel") in actions
    assert actions.index(moved) < actions.index(
        models.DeleteObject(kind=RCT_KIND, namespace="team", name="train-channel"))
    again = controlling.plan_compute_domain(
        _cd(4), observed=controlling.Observed(channel_id=4), config=CONFIG)
    [create] = [a for a in again if isinstance(a, models.CreateObject)]
    params = create.obj["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["channelID"] == 4


def test_a_later_duplicate_whose_claims_carry_it_keeps_it_and_is_marked_for_the_plugin() -> None:
    observed = controlling.Observed(
        workload_rct=_rct_meta(), workload_rct_channel=3, channel_id=3,
        channel_rivals=channels.Rivals(created=LATE, others=(OTHER,), claimed=frozenset({3})))
    actions = controlling.plan_compute_domain(_cd(3), observed=observed, config=CONFIG)
    assert _channel_patches(actions) == []
    assert not any(isinstance(a, models.DeleteObject) for a in actions)
    events = [a for a in actions if isinstance(a, models.EmitEvent)]
    assert {(e.involved.uid, e.reason) for e in events} == {
        ("cd-uid", channels.DUPLICATE_REASON), ("other-uid", channels.DUPLICATE_REASON)}
    [conditions] = [a for a in actions if isinstance(a, models.PatchObject)]
    [condition] = conditions.patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        channels.UNIQUE_CONDITION, "False", channels.DUPLICATE_REASON)
    assert "new prepares" in condition["message"]
    # Reported once: planning again from the marked domain changes nothing.
    marked = controlling.Observed(
        workload_rct=_rct_meta(), workload_rct_channel=3, channel_id=3,
        channel_rivals=observed.channel_rivals,
        conditions=controlling.conditions_from_k8s(
            {"status": {"conditions": [condition]}}))
    assert controlling.plan_compute_domain(_cd(3), observed=marked, config=CONFIG) == ()


def test_the_mark_goes_once_the_earlier_holder_is_gone() -> None:
    condition = {"type": channels.UNIQUE_CONDITION, "status": "False",
                 "reason": channels.DUPLICATE_REASON, "message": "x"}
    observed = controlling.Observed(
        workload_rct=_rct_meta(), workload_rct_channel=3, channel_id=3,
        channel_rivals=channels.Rivals(created=LATE, claimed=frozenset({3})),
        conditions=controlling.conditions_from_k8s({"status": {"conditions": [condition]}}))
    [cleared] = controlling.plan_compute_domain(_cd(3), observed=observed, config=CONFIG)
    assert isinstance(cleared, models.PatchObject)
    assert cleared.patch == {"status": {"conditions": None}}


def _stored_cd(cluster: memory_cluster.InMemoryCluster) -> str:
    created = cluster.create(CD_KIND, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "train", "namespace": "team"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
    })
    return str(created["metadata"]["resourceVersion"])


def _plan_from(rv: str) -> tuple[models.PatchObject, models.PatchObject]:
    meta = models.ObjectMeta(name="train", namespace="team", resource_version=rv)
    return (
        models.PatchObject(kind=CD_KIND, namespace="team", name="train", resource_version=rv,
                           patch={"metadata": {"finalizers": [names.COMPUTE_DOMAIN_FINALIZER]}}),
        models.PatchObject(kind=CD_KIND, namespace=meta.namespace, name=meta.name,
                           subresource="status", resource_version=rv,
                           patch={"status": {"channelID": 3}}),
    )


def test_a_plan_s_own_preconditioned_writes_do_not_conflict_with_each_other() -> None:
    cluster = memory_cluster.InMemoryCluster()
    executing.execute_cluster_actions(cluster, _plan_from(_stored_cd(cluster)))
    stored = cluster.get(CD_KIND, namespace="team", name="train")
    assert stored["status"]["channelID"] == 3
    cluster.close()


def test_a_write_by_someone_else_since_the_choice_fails_the_channel_write() -> None:
    cluster = memory_cluster.InMemoryCluster()
    plan = _plan_from(_stored_cd(cluster))
    cluster.patch(CD_KIND, namespace="team", name="train", subresource="status",
                  patch={"status": {"channelID": 9}})  # the other controller
    with pytest.raises(errors.ConflictError):
        executing.execute_cluster_actions(cluster, plan)
    assert cluster.get(CD_KIND, namespace="team", name="train")["status"]["channelID"] == 9
    cluster.close()
