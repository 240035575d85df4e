"""Binding conditions of driver-managed channels (gate ComputeDomainBindingConditions).

Covered: which devices carry them; reading a claim's channel allocation (waiting or not, its
ComputeDomain, a config that cannot be served); what a waiting claim needs next (label the
node, wait, ready, failed after the timeout, missing domain, another domain's label); when a
label set before binding is released; the status entry written; a prepare's status write
keeping the binding condition.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import plugin_factories as f
import pytest

from core import device_status, models, names
from core.computedomain import binding, slice_devices

GATED = dataclasses.replace(
    f.DRIVER, gates=models.FeatureGates(values={"ComputeDomainBindingConditions": True}))
HOST_GATED = dataclasses.replace(f.HOST, gates=GATED.gates)


def claim_obj(
    *,
    binding_conditions: bool = True,
    device: str = "channel-0",
    pool: str = f.NODE_NAME,
    params: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"request": names.CHANNEL_REQUEST_NAME,
                              "driver": names.DRIVER_NAME, "pool": pool, "device": device}
    if binding_conditions:
        result["bindingConditions"] = [binding.IMEX_DAEMON_READY]
        result["bindingFailureConditions"] = [binding.IMEX_DAEMON_FAILED]
    status: dict[str, Any] = {"allocation": {
        "allocationTimestamp": "2026-11-26T10:00:00Z",
        "devices": {"results": [result], "config": [{
            "source": "FromClaim", "requests": [names.CHANNEL_REQUEST_NAME],
            "opaque": {"driver": names.DRIVER_NAME,
                       "parameters": params if params is not None else f.channel_params()},
        }]},
    }}
    if conditions is not None:
        status["devices"] = [{"driver": names.DRIVER_NAME, "pool": pool, "device": device,
                              "conditions": conditions}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "job-0-channel", "namespace": f.NAMESPACE,
                         "uid": f.CLAIM_UID},
            "spec": {}, "status": status}


def waiting_claim(**kwargs: Any) -> binding.ChannelClaim:
    found = binding.channel_claim_from_k8s(claim_obj(**kwargs), pool=f.NODE_NAME)
    assert found is not None
    return found


def plan(
    claim: binding.ChannelClaim | None = None,
    *,
    labels: dict[str, str] | None = None,
    domain: models.ComputeDomain | None = None,
    waited_s: float = 0.0,
) -> binding.BindingStep:
    return binding.plan_binding(
        claim or waiting_claim(), node_name=f.NODE_NAME, node_labels=labels or {},
        domain=domain, waited_s=waited_s, timeout_s=300.0,
    )


LABELLED = {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}


# ---------------------------------------------------------------- the slice


def test_a_gated_driver_managed_channel_carries_the_binding_conditions() -> None:
    channel, daemon = slice_devices.plan_slice_devices(GATED)
    assert channel["bindingConditions"] == [binding.IMEX_DAEMON_READY]
    assert channel["bindingFailureConditions"] == [binding.IMEX_DAEMON_FAILED]
    assert "bindsToNode" not in channel  # the slice is node-local already
    assert "bindingConditions" not in daemon  # the daemon's own pod must bind at once


@pytest.mark.parametrize("config", [f.DRIVER, HOST_GATED], ids=["gate-off", "host-managed"])
def test_without_the_gate_or_in_host_managed_mode_no_device_carries_them(
    config: models.DriverConfig,
) -> None:
    assert not any("bindingConditions" in d
                   for d in slice_devices.plan_slice_devices(config, node=f.NODE))


def test_the_condition_names_are_valid_condition_types() -> None:
    # A qualified name (prefix/name, name at most 63 characters), as the API server checks.
    for condition in (binding.IMEX_DAEMON_READY, binding.IMEX_DAEMON_FAILED):
        prefix, name = condition.split("/")
        assert prefix == names.DRIVER_NAME and 0 < len(name) <= 63


# ---------------------------------------------------------------- reading claims


def test_a_claim_allocated_this_nodes_channel_with_binding_conditions_waits() -> None:
    found = waiting_claim()
    assert found.waiting and found.domain_id == f.CD_UID and found.device == "channel-0"
    assert found.ref == models.ClaimRef(uid=f.CLAIM_UID, namespace=f.NAMESPACE,
                                        name="job-0-channel")
    assert found.allocated_at == "2026-11-26T10:00:00Z" and not found.problem


@pytest.mark.parametrize("condition", [binding.IMEX_DAEMON_READY, binding.IMEX_DAEMON_FAILED])
def test_a_claim_whose_condition_is_set_no_longer_waits(condition: str) -> None:
    found = waiting_claim(conditions=[{"type": condition, "status": "True"}])
    assert not found.waiting


def test_a_claim_without_binding_conditions_is_held_but_does_not_wait() -> None:
    found = waiting_claim(binding_conditions=False)
    assert not found.waiting and found.domain_id == f.CD_UID


@pytest.mark.parametrize("kwargs", [{"pool": "other-node"}, {"device": "daemon-0"}])
def test_other_nodes_and_daemon_devices_are_not_this_nodes_channel_claims(
    kwargs: dict[str, Any],
) -> None:
    assert binding.channel_claim_from_k8s(claim_obj(**kwargs), pool=f.NODE_NAME) is None


def test_an_unallocated_claim_holds_nothing() -> None:
    obj = claim_obj()
    del obj["status"]
    assert binding.channel_claim_from_k8s(obj, pool=f.NODE_NAME) is None


def test_a_config_that_cannot_be_read_is_a_problem_named_in_the_failure() -> None:
    found = waiting_claim(params={**f.channel_params(), "bogus": 1})
    assert found.problem and "bogus" in found.problem
    step = plan(found)
    assert isinstance(step, binding.SetCondition)
    assert step.type == binding.IMEX_DAEMON_FAILED and step.reason == binding.REASON_INVALID
    assert "bogus" in step.message


# ---------------------------------------------------------------- deciding


def test_an_unlabelled_node_is_labelled_for_the_claims_domain_first() -> None:
    step = plan(domain=f.domain())
    assert step == binding.LabelNode(patch=models.PatchObject(
        kind="Node", namespace="", name=f.NODE_NAME,
        patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}}}))


def test_a_labelled_node_waits_until_the_domain_lists_it_ready() -> None:
    assert isinstance(plan(labels=LABELLED, domain=f.domain()), binding.Wait)
    ready = plan(labels=LABELLED, domain=f.domain(ready_nodes=(f.NODE_NAME,)))
    assert isinstance(ready, binding.SetCondition)
    assert ready.type == binding.IMEX_DAEMON_READY and ready.reason == "IMEXDaemonReady"


def test_another_nodes_readiness_does_not_count() -> None:
    assert isinstance(plan(labels=LABELLED, domain=f.domain(ready_nodes=("node-x",))),
                      binding.Wait)


def test_a_daemon_not_ready_in_time_fails_the_binding() -> None:
    step = plan(labels=LABELLED, domain=f.domain(), waited_s=300.0)
    assert isinstance(step, binding.SetCondition)
    assert step.type == binding.IMEX_DAEMON_FAILED and step.reason == "IMEXDaemonNotReady"
    assert "within 300 s" in step.message and f.NODE_NAME in step.message


def test_a_node_serving_another_domain_waits_then_fails() -> None:
    other = {names.COMPUTE_DOMAIN_LABEL: f.OTHER_CD_UID}
    assert isinstance(plan(labels=other, domain=f.domain(), waited_s=10), binding.Wait)
    step = plan(labels=other, domain=f.domain(), waited_s=301)
    assert isinstance(step, binding.SetCondition)
    assert step.reason == "NodeServesAnotherComputeDomain" and f.OTHER_CD_UID in step.message


def test_a_missing_domain_fails_at_once() -> None:
    step = plan(domain=None)
    assert isinstance(step, binding.SetCondition)
    assert step.type == binding.IMEX_DAEMON_FAILED and step.reason == "ComputeDomainNotFound"


# ---------------------------------------------------------------- releasing the label


def test_a_label_whose_domain_has_no_claim_here_any_more_is_released() -> None:
    patch = binding.plan_label_release(f.CD_UID, node_name=f.NODE_NAME, node_labels=LABELLED,
                                       resource_version="41", claims=())
    assert patch is not None and patch.resource_version == "41"
    assert patch.patch == {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}}


def test_a_label_still_needed_or_changed_is_kept() -> None:
    held = binding.plan_label_release(f.CD_UID, node_name=f.NODE_NAME, node_labels=LABELLED,
                                      resource_version="41", claims=(waiting_claim(),))
    changed = binding.plan_label_release(
        f.CD_UID, node_name=f.NODE_NAME, resource_version="41", claims=(),
        node_labels={names.COMPUTE_DOMAIN_LABEL: f.OTHER_CD_UID})
    assert held is None and changed is None


# ---------------------------------------------------------------- the status entry


READY_STEP = binding.SetCondition(type=binding.IMEX_DAEMON_READY, reason="IMEXDaemonReady",
                                  message="ready")


def test_the_condition_is_written_into_our_entry_beside_other_drivers() -> None:
    other = {"driver": "gpu.nvidia.com", "pool": f.NODE_NAME, "device": "gpu-0"}
    devices = binding.with_condition([other], claim=waiting_claim(), step=READY_STEP,
                                     now="2026-11-26T10:00:05Z")
    assert devices == [other, {
        "driver": names.DRIVER_NAME, "pool": f.NODE_NAME, "device": "channel-0",
        "conditions": [{"type": binding.IMEX_DAEMON_READY, "status": "True",
                        "reason": "IMEXDaemonReady", "message": "ready",
                        "lastTransitionTime": "2026-11-26T10:00:05Z"}],
    }]
    again = binding.with_condition(devices, claim=waiting_claim(), step=READY_STEP,
                                   now="2026-11-26T10:00:09Z")
    assert again is None


def test_a_prepares_status_write_keeps_the_binding_condition() -> None:
    entry = binding.with_condition([], claim=waiting_claim(), step=READY_STEP, now="t0")
    assert entry is not None
    merged = device_status.merged_devices(
        entry, driver=names.DRIVER_NAME, now="t1", message="prepared",
        ours=(device_status.DeviceStatus(pool=f.NODE_NAME, device="channel-0"),))
    assert merged is not None
    assert [c["type"] for c in merged[0]["conditions"]] == [binding.IMEX_DAEMON_READY, "Ready"]
