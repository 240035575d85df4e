"""ComputeDomains the upstream driver admitted are adopted in place, never deleted or rebuilt.

Covers: in the mode upstream ran them in, the CD is stamped with one `AdoptedFromUpstream`
event; its workload and daemon RCTs, its workload claims and its running daemon pods stay as
they are; upstream's DaemonSet (same name and namespace as ours, no target label) is patched
into ours in place with updateStrategy OnDelete and upstream's immutable selector; deleting an
adopted CD then cleans up as for one of ours. A host-managed controller leaves an upstream
driver-managed CD (one with an IMEX DaemonSet) alone as a mode mismatch and can still delete it.
"""

from __future__ import annotations

from typing import Any

import controller_harness as harness
import upstream_shapes as upstream

from core import models, names
from core.computedomain import controlling, objects

CD = "ComputeDomain"
DS = "DaemonSet"
RCT = "ResourceClaimTemplate"
CLAIM = "ResourceClaim"
POD = "Pod"
NS = harness.DRIVER_NAMESPACE


def _upstream_cd(state: harness.Harness, *, driver_managed: bool) -> str:
    """Everything upstream's driver left for CD team/cd; returns the CD's UID."""
    uid = str(state.create(CD, upstream.compute_domain(name="cd", namespace="team"))
              ["metadata"]["uid"])
    state.patch(CD, "team", "cd", {"status": {"status": "Ready", "nodes": []}},
                subresource="status")
    state.create(RCT, upstream.workload_rct(cd_name="cd", namespace="team", cd_uid=uid))
    state.create(CLAIM, upstream.workload_claim(name="worker-0-channel", namespace="team",
                                                cd_uid=uid, node="node-a"))
    state.patch(CLAIM, "team", "worker-0-channel",
                upstream.allocation(node="node-a", pod_uid="pod-1"), subresource="status")
    if driver_managed:
        state.create(RCT, upstream.daemon_rct(driver_namespace=NS, cd_uid=uid))
        state.create(DS, upstream.daemonset(driver_namespace=NS, cd_uid=uid))
        state.add_node("node-a", cd_uid=uid)
        state.create(POD, upstream.daemon_pod(driver_namespace=NS, cd_uid=uid, node="node-a"))
    return uid


def _versions(state: harness.Harness, *keys: tuple[str, str, str]) -> list[tuple[str, str]]:
    found = []
    for kind, namespace, name in keys:
        obj = state.get(kind, namespace, name)
        assert obj is not None, (kind, namespace, name)
        found.append((obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]))
    return found


def _adopted_events(state: harness.Harness) -> list[models.EmitEvent]:
    return [e for e in state.events if e.reason == controlling.ADOPTED_REASON]


def test_an_upstream_driver_managed_cd_is_adopted_in_place() -> None:
    state = harness.Harness(observe_pods=True)
    config = harness.driver_config(cliques=False)
    uid = _upstream_cd(state, driver_managed=True)
    daemon = names.daemonset_name(uid)
    kept = [(RCT, "team", "cd-channel"), (RCT, NS, daemon), (CLAIM, "team", "worker-0-channel"),
            (POD, NS, f"{daemon}-node-a")]
    before = _versions(state, *kept)
    ds_uid = state.get(DS, NS, daemon)["metadata"]["uid"]  # type: ignore[index]
    claim_status = state.get(CLAIM, "team", "worker-0-channel")["status"]  # type: ignore[index]

    state.converge([("team", "cd")], config=config)

    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.uid == uid and not cd.meta.deleting
    assert cd.meta.annotations[names.ADMITTED_MODE_ANNOTATION] == "driverManaged"
    assert cd.meta.annotations[names.ADMITTED_ISOLATION_ANNOTATION] == "domain"
    assert cd.meta.finalizers == (names.COMPUTE_DOMAIN_FINALIZER,)
    [event] = _adopted_events(state)
    assert not event.warning and event.involved.uid == uid
    assert "adopted under driverManaged/domain without deletion" in event.message
    assert "updateStrategy OnDelete" in event.message
    # Nothing was recreated or rewritten: the RCTs, the claim and the daemon pod.
    assert _versions(state, *kept) == before
    assert state.get(CLAIM, "team", "worker-0-channel")["status"] == claim_status  # type: ignore[index]
    assert not [a for a in state.applied if isinstance(a, models.DeleteObject)]
    assert not [a for a in state.applied if isinstance(a, models.CreateObject)]
    # Upstream's DaemonSet is ours now, in place, without a rollout.
    ds: dict[str, Any] = state.get(DS, NS, daemon)  # type: ignore[assignment]
    assert ds["metadata"]["uid"] == ds_uid
    assert ds["metadata"]["labels"] == objects.owned_labels(uid, target=names.TARGET_DAEMON)
    assert ds["spec"]["selector"] == {"matchLabels": {names.COMPUTE_DOMAIN_LABEL: uid}}
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    ours = objects.daemonset(cd, config=config)["spec"]["template"]
    assert ds["spec"]["template"] == ours
    assert state.plan("team", "cd", config=config) == ()


def test_an_upstream_host_managed_cd_is_adopted_with_its_template_kept() -> None:
    state = harness.Harness()
    config = harness.host_config()
    uid = _upstream_cd(state, driver_managed=False)
    kept = [(RCT, "team", "cd-channel"), (CLAIM, "team", "worker-0-channel")]
    before = _versions(state, *kept)

    state.converge([("team", "cd")], config=config)

    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.uid == uid
    assert cd.meta.annotations[names.ADMITTED_MODE_ANNOTATION] == "hostManaged"
    assert cd.meta.annotations[names.ADMITTED_ISOLATION_ANNOTATION] == "none"
    assert cd.status is not None and cd.status.status is models.DomainStatus.READY
    [event] = _adopted_events(state)
    assert "adopted under hostManaged/none" in event.message
    assert _versions(state, *kept) == before
    assert state.of_kind(DS) == []


def test_an_adopted_cd_is_deleted_like_one_of_ours() -> None:
    state = harness.Harness(observe_pods=True)
    config = harness.driver_config(cliques=False)
    uid = _upstream_cd(state, driver_managed=True)
    state.converge([("team", "cd")], config=config)
    state.delete(CLAIM, "team", "worker-0-channel")
    state.delete(POD, NS, f"{names.daemonset_name(uid)}-node-a")

    state.delete(CD, "team", "cd")
    state.converge([("team", "cd")], config=config)

    assert state.get(CD, "team", "cd") is None
    assert state.of_kind(RCT) == [] and state.of_kind(DS) == []
    assert names.COMPUTE_DOMAIN_LABEL not in state.of_kind("Node")[0]["metadata"]["labels"]


def test_a_cd_of_ours_is_never_reported_as_adopted() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))

    state.converge([("team", "cd")], config=harness.driver_config())

    assert _adopted_events(state) == []
    assert not [a for a in state.applied
                if isinstance(a, models.PatchObject) and a.kind == DS]


def test_a_host_managed_controller_leaves_an_upstream_driver_managed_cd_alone() -> None:
    state = harness.Harness()
    host = harness.host_config()
    uid = _upstream_cd(state, driver_managed=True)
    untouched = {k: v for k, v in state.objects.items() if k[0] != CD}

    state.converge([("team", "cd")], config=host)

    cd = state.compute_domain("team", "cd")
    assert cd is not None and names.ADMITTED_MODE_ANNOTATION not in cd.meta.annotations
    assert [e.reason for e in state.events] == [controlling.MODE_MISMATCH_REASON]
    assert "driverManaged/domain" in state.events[0].message
    assert {k: v for k, v in state.objects.items() if k[0] != CD} == untouched

    # Its deletion still completes, undoing what driver-managed mode built.
    state.delete(CLAIM, "team", "worker-0-channel")
    state.delete(CD, "team", "cd")
    state.converge([("team", "cd")], config=host)
    assert state.get(CD, "team", "cd") is None
    assert state.of_kind(DS) == [] and state.of_kind(RCT) == []
    assert state.get(DS, NS, names.daemonset_name(uid)) is None


def test_a_channel_isolation_controller_leaves_an_upstream_host_managed_cd_alone() -> None:
    state = harness.Harness()
    host = harness.host_config()
    channel = models.DriverConfig(mode=host.mode, isolation=models.Isolation.CHANNEL,
                                  gates=host.gates, namespace=host.namespace)
    _upstream_cd(state, driver_managed=False)
    untouched = {k: v for k, v in state.objects.items() if k[0] != CD}

    state.converge([("team", "cd")], config=channel)

    cd = state.compute_domain("team", "cd")
    assert cd is not None and names.ADMITTED_MODE_ANNOTATION not in cd.meta.annotations
    assert [e.reason for e in state.events] == [controlling.MODE_MISMATCH_REASON]
    assert "hostManaged/none" in state.events[0].message
    assert {k: v for k, v in state.objects.items() if k[0] != CD} == untouched
