"""Mode-switch safety in the controller (DESIGN §6): a CD admitted under another IMEX mode or
isolation is left untouched, reported once, and can still be deleted."""

from __future__ import annotations

import controller_harness as harness

from core import models, names
from core.computedomain import controlling

CD = "ComputeDomain"
DS = "DaemonSet"
RCT = "ResourceClaimTemplate"


def _cd_admitted_by_driver_managed(state: harness.Harness) -> models.ComputeDomain:
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    state.converge([("team", "cd")], config=harness.driver_config())
    cd = state.compute_domain("team", "cd")
    assert cd is not None
    assert cd.meta.annotations[names.ADMITTED_MODE_ANNOTATION] == "driverManaged"
    assert cd.meta.annotations[names.ADMITTED_ISOLATION_ANNOTATION] == "domain"
    return cd


def test_mode_mismatch_cd_is_untouched_and_reported_once() -> None:
    state = harness.Harness()
    cd = _cd_admitted_by_driver_managed(state)
    before = {k: v for k, v in state.objects.items() if k[0] != CD}
    host = harness.host_config()

    actions = state.plan("team", "cd", config=host)

    assert len(actions) == 3
    event, mark, condition = actions
    assert isinstance(event, models.EmitEvent)
    assert event.reason == "IMEXModeMismatch"
    assert event.involved.uid == cd.uid and event.involved.kind == CD
    assert "driverManaged/domain" in event.message
    assert "hostManaged/none" in event.message
    assert "Delete and recreate" in event.message
    assert mark == models.PatchObject(
        kind=CD,
        namespace="team",
        name="cd",
        patch={"metadata": {"annotations": {
            controlling.MODE_MISMATCH_REPORTED_ANNOTATION: "hostManaged/none"
        }}},
        resource_version=cd.meta.resource_version,
    )
    assert isinstance(condition, models.PatchObject) and condition.subresource == "status"
    [reported] = condition.patch["status"]["conditions"]
    assert reported["type"] == controlling.MODE_MISMATCH_CONDITION
    assert reported["status"] == "True" and reported["message"] == event.message
    state.apply_all(actions)
    assert state.plan("team", "cd", config=host) == ()
    assert len(state.events) == 1
    assert {k: v for k, v in state.objects.items() if k[0] != CD} == before


def test_isolation_change_alone_is_a_mode_mismatch() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    state.converge([("team", "cd")], config=harness.host_config())
    channel = harness.host_config()
    channel = models.DriverConfig(
        mode=channel.mode, isolation=models.Isolation.CHANNEL, gates=channel.gates,
        namespace=channel.namespace,
    )
    actions = state.plan("team", "cd", config=channel)
    assert [type(a).__name__ for a in actions] == ["EmitEvent", "PatchObject", "PatchObject"]


def test_switching_back_to_the_admitting_mode_clears_the_report() -> None:
    state = harness.Harness()
    _cd_admitted_by_driver_managed(state)
    state.apply_all(state.plan("team", "cd", config=harness.host_config()))

    actions = state.plan("team", "cd", config=harness.driver_config())

    assert len(actions) == 2
    assert actions[0].patch == {  # type: ignore[union-attr]
        "metadata": {"annotations": {controlling.MODE_MISMATCH_REPORTED_ANNOTATION: None}}
    }
    assert actions[1].patch == {"status": {"conditions": None}}  # type: ignore[union-attr]
    state.apply_all(actions)
    assert state.plan("team", "cd", config=harness.driver_config()) == ()


def test_deleting_a_mismatched_cd_undoes_what_its_admitting_mode_created() -> None:
    state = harness.Harness()
    cd = _cd_admitted_by_driver_managed(state)
    state.add_node("n1", cd_uid=cd.uid)
    state.delete(CD, "team", "cd")

    state.converge([("team", "cd")], config=harness.host_config())

    assert state.get(CD, "team", "cd") is None
    assert [k[0] for k in state.objects] == ["Node"]
    assert state.events == []


def test_a_cd_never_admitted_is_admitted_under_the_current_mode() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    cd = state.compute_domain("team", "cd")
    assert cd is not None
    assert not controlling.is_mode_mismatch(cd, config=harness.host_config())
    assert not controlling.is_mode_mismatch(cd, config=harness.driver_config())
