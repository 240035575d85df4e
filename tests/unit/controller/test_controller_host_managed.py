"""Host-managed controller flows (DESIGN §4): finalizer, workload RCT, Ready; exact delete order."""

from __future__ import annotations

from typing import Any

import controller_harness as harness

from core import models, names
from core.computedomain import controlling, objects

RCT = "ResourceClaimTemplate"
CD = "ComputeDomain"


def _new_cd(state: harness.Harness, **kwargs: Any) -> models.ComputeDomain:
    obj = state.create(CD, harness.compute_domain_json(name="cd", namespace="team", **kwargs))
    cd = state.compute_domain("team", obj["metadata"]["name"])
    assert cd is not None
    return cd


def test_host_managed_add_creates_only_finalizer_workload_rct_and_ready() -> None:
    state = harness.Harness()
    config = harness.host_config()
    cd = _new_cd(state)

    actions = state.plan("team", "cd", config=config)

    assert actions == (
        models.PatchObject(
            kind=CD,
            namespace="team",
            name="cd",
            patch={
                "metadata": {
                    "finalizers": [names.COMPUTE_DOMAIN_FINALIZER],
                    "annotations": {
                        names.ADMITTED_MODE_ANNOTATION: "hostManaged",
                        names.ADMITTED_ISOLATION_ANNOTATION: "none",
                    },
                }
            },
            resource_version=cd.meta.resource_version,
        ),
        models.CreateObject(kind=RCT, obj=objects.workload_rct(cd, config=config)),
        models.PatchObject(
            kind=CD,
            namespace="team",
            name="cd",
            patch={"status": {"status": "Ready", "nodes": []}},
            subresource="status",
        ),
    )
    state.apply_all(actions)
    assert state.plan("team", "cd", config=config) == ()
    assert sorted(k for k, _, _ in state.objects) == [CD, RCT]


def test_workload_rct_is_named_labelled_and_finalized_for_its_compute_domain() -> None:
    state = harness.Harness()
    cd = _new_cd(state, rct_name="my-channel")
    state.converge([("team", "cd")], config=harness.host_config())

    rct = state.get(RCT, "team", "my-channel")
    assert rct is not None
    assert rct["metadata"]["labels"] == {
        names.COMPUTE_DOMAIN_LABEL: cd.uid,
        names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_WORKLOAD,
    }
    assert rct["metadata"]["finalizers"] == [names.COMPUTE_DOMAIN_FINALIZER]
    devices = rct["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {"name": "channel", "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}
    ]
    assert devices["config"] == [
        {
            "requests": ["channel"],
            "opaque": {
                "driver": names.DRIVER_NAME,
                "parameters": {
                    "apiVersion": names.GROUP_VERSION,
                    "kind": names.KIND_CHANNEL_CONFIG,
                    "domainID": cd.uid,
                    "allocationMode": "Single",
                },
            },
        }
    ]


def test_host_managed_forces_allocation_mode_single_but_driver_managed_keeps_all() -> None:
    state = harness.Harness()
    cd = _new_cd(state, allocation_mode="All")

    def mode_of(config: models.DriverConfig) -> str:
        params = objects.workload_rct(cd, config=config)["spec"]["spec"]["devices"]["config"][0]
        return str(params["opaque"]["parameters"]["allocationMode"])

    assert mode_of(harness.host_config()) == "Single"
    assert mode_of(harness.driver_config()) == "All"


def test_host_managed_delete_order_is_exact() -> None:
    state = harness.Harness()
    config = harness.host_config()
    _new_cd(state)
    state.converge([("team", "cd")], config=config)
    state.delete(CD, "team", "cd")
    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.meta.deleting

    # 1. delete the RCT
    assert state.plan("team", "cd", config=config) == (
        models.DeleteObject(kind=RCT, namespace="team", name="cd-channel"),
    )
    state.apply_all(state.plan("team", "cd", config=config))
    rct = state.get(RCT, "team", "cd-channel")
    assert rct is not None and rct["metadata"]["deletionTimestamp"]

    # 2. remove the RCT's finalizer (the CD keeps its own)
    assert state.plan("team", "cd", config=config) == (
        models.PatchObject(
            kind=RCT,
            namespace="team",
            name="cd-channel",
            patch={"metadata": {"finalizers": []}},
            resource_version=rct["metadata"]["resourceVersion"],
        ),
    )
    state.apply_all(state.plan("team", "cd", config=config))
    assert state.get(RCT, "team", "cd-channel") is None
    assert state.get(CD, "team", "cd") is not None

    # 3. the RCT is gone: remove the CD's finalizer
    cd = state.compute_domain("team", "cd")
    assert cd is not None
    assert state.plan("team", "cd", config=config) == (
        models.PatchObject(
            kind=CD,
            namespace="team",
            name="cd",
            patch={"metadata": {"finalizers": []}},
            resource_version=cd.meta.resource_version,
        ),
    )
    state.apply_all(state.plan("team", "cd", config=config))
    assert state.objects == {}


def test_cd_finalizer_is_never_removed_in_the_plan_that_deletes_the_rct() -> None:
    state = harness.Harness()
    config = harness.host_config()
    _new_cd(state)
    state.converge([("team", "cd")], config=config)
    state.delete(CD, "team", "cd")
    for _ in range(3):
        actions = state.plan("team", "cd", config=config)
        removes_cd_finalizer = any(
            isinstance(a, models.PatchObject) and a.kind == CD for a in actions
        )
        assert not (removes_cd_finalizer and state.of_kind(RCT))
        state.apply_all(actions)


def test_rct_deleted_behind_the_controllers_back_is_released_then_recreated() -> None:
    state = harness.Harness()
    config = harness.host_config()
    _new_cd(state)
    state.converge([("team", "cd")], config=config)
    state.delete(RCT, "team", "cd-channel")

    actions = state.plan("team", "cd", config=config)
    assert [type(a).__name__ for a in actions] == ["PatchObject", "PatchObject"]
    assert actions[0].kind == RCT  # type: ignore[union-attr]
    assert actions[1].patch == {  # type: ignore[union-attr]
        "status": {"status": "NotReady", "nodes": []}
    }
    state.converge([("team", "cd")], config=config)
    rct = state.get(RCT, "team", "cd-channel")
    assert rct is not None and "deletionTimestamp" not in rct["metadata"]
    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.status is not None
    assert cd.status.status is models.DomainStatus.READY


def test_rct_name_held_by_another_compute_domain_is_never_touched() -> None:
    state = harness.Harness()
    config = harness.host_config()
    state.create(CD, harness.compute_domain_json(name="first", namespace="team", rct_name="shared"))
    state.converge([("team", "first")], config=config)
    owner_rct = state.get(RCT, "team", "shared")
    state.create(
        CD, harness.compute_domain_json(name="second", namespace="team", rct_name="shared")
    )

    actions = state.plan("team", "second", config=config)

    assert not any(getattr(a, "kind", "") == RCT for a in actions)
    state.converge([("team", "second")], config=config)
    second = state.compute_domain("team", "second")
    assert second is not None and second.status is not None
    assert second.status.status is models.DomainStatus.NOT_READY
    assert state.get(RCT, "team", "shared") == owner_rct

    # deleting the CD that does not own the RCT leaves the owner's RCT alone
    state.delete(CD, "team", "second")
    state.converge([("team", "second")], config=config)
    assert state.get(CD, "team", "second") is None
    assert state.get(RCT, "team", "shared") == owner_rct


def test_planning_the_same_observation_twice_gives_the_same_actions() -> None:
    state = harness.Harness()
    config = harness.host_config()
    cd = _new_cd(state)
    observed = state.observe(cd, config=config)
    first = controlling.plan_compute_domain(cd, observed=observed, config=config)
    second = controlling.plan_compute_domain(cd, observed=observed, config=config)
    assert first == second and first


def test_host_managed_stale_label_cleanup_plans_nothing() -> None:
    nodes = [{"metadata": {"name": "n1", "labels": {names.COMPUTE_DOMAIN_LABEL: "gone"}}}]
    assert (
        controlling.plan_stale_node_labels(
            nodes=nodes, live_cd_uids=frozenset(), config=harness.host_config()
        )
        == ()
    )


def test_host_managed_admits_allocation_mode_all_as_single_and_warns_once() -> None:
    state = harness.Harness()
    greedy = harness.compute_domain_json(name="cd", namespace="team", allocation_mode="All")
    state.create("ComputeDomain", greedy)

    actions = state.plan("team", "cd", config=harness.host_config())

    warnings = [a for a in actions if isinstance(a, models.EmitEvent)]
    assert [w.reason for w in warnings] == [controlling.ALLOCATION_MODE_OVERRIDDEN_REASON]
    assert "host-managed IMEX gives every workload channel 0 only" in warnings[0].message
    state.converge([("team", "cd")], config=harness.host_config())
    rct = state.get("ResourceClaimTemplate", "team", "cd-channel")
    assert rct is not None
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "Single"
    assert len(state.events) == 1
    assert state.plan("team", "cd", config=harness.host_config()) == ()


def test_driver_managed_keeps_allocation_mode_all_without_warning() -> None:
    state = harness.Harness()
    greedy = harness.compute_domain_json(name="cd", namespace="team", allocation_mode="All")
    state.create("ComputeDomain", greedy)
    state.converge([("team", "cd")], config=harness.driver_config())
    assert state.events == []
