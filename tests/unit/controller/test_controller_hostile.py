"""ComputeDomains the driver must refuse, loudly and once: a Warning event and a status
condition naming the cause and the fix, nothing built, nothing of anyone else touched.

Covers: RCT names that are not DNS-1123 subdomains, an absurd numNodes (driver-managed; ignored
in host-managed as DESIGN says, but reported by a Validated=False condition), a CD name no
object can carry, two conditions planned together settling, two CDs naming one RCT (the
second refused until the first is gone), and API failures reported by
`plan_reconcile_failure` / cleared by `plan_reconcile_recovered`.
"""

from __future__ import annotations

import controller_harness as harness
import pytest

from core import models
from core.computedomain import controlling

CD = "ComputeDomain"
RCT = "ResourceClaimTemplate"


def _conditions(state: harness.Harness, name: str) -> dict[str, dict[str, str]]:
    raw = state.get(CD, "team", name)
    assert raw is not None
    return {c["type"]: c for c in (raw.get("status") or {}).get("conditions") or ()}


def _events(state: harness.Harness, reason: str) -> list[models.EmitEvent]:
    return [e for e in state.events if e.reason == reason]


@pytest.mark.parametrize("bad", ["Bad_Name", "-x", "a" * 254, "UPPER", "a..b"])
@pytest.mark.parametrize("config", [harness.host_config(), harness.driver_config()],
                         ids=["hostManaged", "driverManaged"])
def test_an_rct_name_that_is_no_object_name_is_refused_once(
    bad: str, config: models.DriverConfig
) -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team", rct_name=bad))

    state.converge([("team", "cd")], config=config)
    state.converge([("team", "cd")], config=config)

    assert state.of_kind(RCT) == [] and state.of_kind("DaemonSet") == []
    [event] = _events(state, "InvalidResourceClaimTemplateName")
    assert "Delete this ComputeDomain and create it again" in event.message
    condition = _conditions(state, "cd")[controlling.ADMITTED_CONDITION]
    assert condition["status"] == "False" and condition["message"] == event.message
    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.status is not None
    assert cd.status.status is models.DomainStatus.NOT_READY


def test_valid_rct_names_pass() -> None:
    for name in ("a", "a-b.c", "x" * 253, "0abc"):
        assert controlling.is_dns1123_subdomain(name), name


def test_an_absurd_num_nodes_is_refused_in_driver_managed_mode() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team", num_nodes=10**12))

    state.converge([("team", "cd")], config=harness.driver_config())

    assert state.of_kind(RCT) == [] and state.of_kind("DaemonSet") == []
    [event] = _events(state, "NumNodesTooLarge")
    assert "1000000000000" in event.message and "numNodes: 0" in event.message


def test_num_nodes_is_ignored_in_host_managed_mode() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team", num_nodes=10**12))

    state.converge([("team", "cd")], config=harness.host_config())

    assert [r["metadata"]["name"] for r in state.of_kind(RCT)] == ["cd-channel"]
    assert controlling.ADMITTED_CONDITION not in _conditions(state, "cd")


@pytest.mark.parametrize("config", [harness.host_config(), harness.driver_config()],
                         ids=["hostManaged", "driverManaged"])
def test_a_second_cd_naming_a_taken_rct_is_reported_and_served_once_it_is_free(
    config: models.DriverConfig,
) -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="first", namespace="team", rct_name="shared"))
    state.converge([("team", "first")], config=config)
    first_uid = state.get(CD, "team", "first")["metadata"]["uid"]  # type: ignore[index]
    state.create(
        CD, harness.compute_domain_json(name="second", namespace="team", rct_name="shared")
    )

    state.converge([("team", "second")], config=config)
    state.converge([("team", "second")], config=config)

    [event] = _events(state, "ResourceClaimTemplateNameTaken")
    assert first_uid in event.message and "team/shared" in event.message
    assert _conditions(state, "second")[controlling.ADMITTED_CONDITION]["status"] == "False"
    daemonsets = {d["metadata"]["labels"]["resource.nvidia.com/computeDomain"]
                  for d in state.of_kind("DaemonSet")}
    assert daemonsets <= {first_uid}, "the refused CD got IMEX daemons"

    state.delete(CD, "team", "first")
    state.converge([("team", "first"), ("team", "second")], config=config)

    second_uid = state.get(CD, "team", "second")["metadata"]["uid"]  # type: ignore[index]
    [rct] = state.of_kind(RCT) if config.host_managed else [
        r for r in state.of_kind(RCT) if r["metadata"]["namespace"] == "team"]
    assert rct["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == second_uid
    assert controlling.ADMITTED_CONDITION not in _conditions(state, "second")


def _observed(state: harness.Harness, name: str) -> tuple[models.ComputeDomain,
                                                         controlling.Observed]:
    cd = state.compute_domain("team", name)
    raw = state.get(CD, "team", name)
    assert cd is not None and raw is not None
    return cd, controlling.observe(cd, objects=state.lists(), config=harness.host_config(),
                                   conditions=controlling.conditions_from_k8s(raw))


@pytest.mark.parametrize(("status", "fix"), [
    (422, "delete and recreate"), (500, "admission webhook"), (403, "RBAC"), (0, "retries"),
])
def test_an_api_failure_is_reported_once_with_its_fix_and_cleared_after_a_success(
    status: int, fix: str
) -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    cause = "POST /apis/resource.k8s.io/v1/namespaces/team/resourceclaimtemplates: HTTP x"

    cd, observed = _observed(state, "cd")
    state.apply_all(controlling.plan_reconcile_failure(
        cd, observed=observed, cause=cause, http_status=status))
    cd, observed = _observed(state, "cd")
    again = controlling.plan_reconcile_failure(cd, observed=observed, cause=cause,
                                               http_status=status)

    assert again == ()
    [event] = _events(state, controlling.RECONCILE_FAILED_REASON)
    assert cause in event.message and fix in event.message
    assert _conditions(state, "cd")[controlling.RECONCILED_CONDITION]["message"] == event.message
    state.apply_all(controlling.plan_reconcile_recovered(cd, observed=observed))
    assert _conditions(state, "cd") == {}
    cd, observed = _observed(state, "cd")
    assert controlling.plan_reconcile_recovered(cd, observed=observed) == ()


def test_conditions_of_other_writers_are_kept_when_one_is_set() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    state.patch(CD, "team", "cd", {"status": {"conditions": [
        {"type": "Custom", "status": "True", "reason": "Mine"}]}}, subresource="status")
    cd, observed = _observed(state, "cd")

    state.apply_all(controlling.plan_reconcile_failure(cd, observed=observed, cause="boom"))

    assert set(_conditions(state, "cd")) == {"Custom", controlling.RECONCILED_CONDITION}


@pytest.mark.parametrize("num_nodes", [10**12, 2**70], ids=["1e12", "2^70"])
def test_an_absurd_num_nodes_in_host_managed_mode_is_served_but_reported_once(
    num_nodes: int,
) -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team", num_nodes=num_nodes))

    state.converge([("team", "cd")], config=harness.host_config())
    state.converge([("team", "cd")], config=harness.host_config())

    assert [r["metadata"]["name"] for r in state.of_kind(RCT)] == ["cd-channel"]
    [event] = _events(state, controlling.IGNORED_FIELDS_REASON)
    assert str(num_nodes) in event.message and "ignored in hostManaged" in event.message
    assert _conditions(state, "cd")[controlling.VALIDATED_CONDITION]["message"] == event.message


@pytest.mark.parametrize("config", [harness.host_config(), harness.driver_config()],
                         ids=["hostManaged", "driverManaged"])
def test_a_refused_cd_that_also_carries_ignored_fields_settles_with_both_reports(
    config: models.DriverConfig,
) -> None:
    # Two conditions planned together must not overwrite each other (each patch carries the
    # whole list): the plan settles, each event is sent once.
    state = harness.Harness()
    cd = harness.compute_domain_json(name="cd", namespace="team", rct_name="Bad_Name",
                                     num_nodes=10**12)
    cd["spec"]["bogus"] = True
    state.create(CD, cd)

    state.converge([("team", "cd")], config=config)
    state.converge([("team", "cd")], config=config)

    conditions = _conditions(state, "cd")
    assert conditions[controlling.ADMITTED_CONDITION]["status"] == "False"
    assert len(_events(state, "InvalidResourceClaimTemplateName")) == 1
    if config.host_managed:  # numNodes is ignored there, and said so
        assert conditions[controlling.VALIDATED_CONDITION]["status"] == "False"
        assert len(_events(state, controlling.IGNORED_FIELDS_REASON)) == 1


def test_a_ten_thousand_character_name_is_refused_without_echoing_it() -> None:
    state = harness.Harness()
    state.create(CD, harness.compute_domain_json(name="a" * 10_000, namespace="team",
                                                 rct_name="ok"))

    state.converge([("team", "a" * 10_000)], config=harness.host_config())

    assert state.of_kind(RCT) == []
    [event] = _events(state, "InvalidName")
    assert "10000 characters" in event.message and len(event.message) < 1_000
