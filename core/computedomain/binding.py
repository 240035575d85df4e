"""Binding conditions (KEP-5007): workload pods wait for their IMEX daemon in the scheduler.

With gate ComputeDomainBindingConditions in driver-managed mode, the channel device carries
binding condition `IMEX_DAEMON_READY` and failure condition `IMEX_DAEMON_FAILED`. The scheduler
allocates a claim to the channel of a node, then waits (PreBind) before binding the pod until
the plugin of that node has set one of them in the claim's `status.devices` entry. Meanwhile
the plugin does what a prepare used to do first (label the node for the ComputeDomain, so its
IMEX daemon is scheduled there) and sets the ready condition once the ComputeDomain's status
lists the node Ready; a daemon that does not get ready in time, a missing ComputeDomain or a
config that cannot be served sets the failure condition, and the scheduler allocates again.

Everything here is pure: the plugin's `apps.kubeletplugin.binding_watch` reads claims, the
node and ComputeDomains, asks `plan_binding`, and writes what it returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from core import decoding, errors, gates, models, names

IMEX_DAEMON_READY: Final = "compute-domain.nvidia.com/imex-daemon-ready"
IMEX_DAEMON_FAILED: Final = "compute-domain.nvidia.com/imex-daemon-failed"
# How long a claim may wait for its node's IMEX daemon before the plugin gives up on the node
# (the scheduler's own binding timeout is 600 s by default: this must be shorter to matter).
DEFAULT_READY_TIMEOUT_S: Final = 300.0

# Reasons of the conditions (CamelCase words, as metav1.Condition requires).
REASON_READY: Final = "IMEXDaemonReady"
REASON_NOT_READY: Final = "IMEXDaemonNotReady"
REASON_OTHER_DOMAIN: Final = "NodeServesAnotherComputeDomain"
REASON_NO_DOMAIN: Final = "ComputeDomainNotFound"
REASON_INVALID: Final = "InvalidClaim"


def uses_binding_conditions(config: models.DriverConfig) -> bool:
    """Whether this install publishes its channel devices with binding conditions."""
    return not config.host_managed and config.gates.enabled(
        gates.COMPUTE_DOMAIN_BINDING_CONDITIONS
    )


def with_binding_conditions(device: models.JSONObject) -> models.JSONObject:
    """The slice device with our binding and failure conditions.

    NB: no `bindsToNode`: the slice is node-local, so the allocation is pinned to the node
    anyway.
    """
    return {
        **device,
        "bindingConditions": [IMEX_DAEMON_READY],
        "bindingFailureConditions": [IMEX_DAEMON_FAILED],
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelClaim:
    """A claim allocated a channel device of this node's pool."""

    ref: models.ClaimRef
    pool: str
    device: str
    # The ComputeDomain its config names ("" when the config cannot be read: `problem` says).
    domain_id: str
    problem: str = ""
    # `status.allocation.allocationTimestamp`: a new allocation starts a new wait.
    allocated_at: str = ""
    # The allocation carries our binding conditions and neither is set yet: the scheduler is
    # waiting for this plugin.
    waiting: bool = False


def channel_claim_from_k8s(obj: Mapping[str, Any], *, pool: str) -> ChannelClaim | None:
    """The claim's channel allocation in `pool`, or None when it has none (or no uid)."""
    try:
        claim = decoding.resource_claim_from_k8s(obj)
    except errors.DecodeError:
        return None
    status = obj.get("status") or {}
    allocation = status.get("allocation") or {}
    raw_results = (allocation.get("devices") or {}).get("results") or []
    for raw, result in zip(raw_results, claim.results, strict=False):
        if (
            result.driver != names.DRIVER_NAME
            or result.pool != pool
            or not result.device.startswith(f"{names.DEVICE_TYPE_CHANNEL}-")
        ):
            continue
        ref = models.ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name)
        domain_id, problem = _domain_of(claim, request=result.request)
        conditions = _our_conditions(status.get("devices") or [], pool=pool, device=result.device)
        waiting = IMEX_DAEMON_READY in (raw.get("bindingConditions") or ()) and not any(
            conditions.get(c) == "True" for c in (IMEX_DAEMON_READY, IMEX_DAEMON_FAILED)
        )
        return ChannelClaim(
            ref=ref, pool=pool, device=result.device, domain_id=domain_id, problem=problem,
            allocated_at=str(allocation.get("allocationTimestamp") or ""), waiting=waiting,
        )
    return None


def _domain_of(claim: models.ResourceClaim, *, request: str) -> tuple[str, str]:
    try:
        config = decoding.config_for_request(claim, request=request)
    except errors.DecodeError as exc:
        return "", exc.message
    if not isinstance(config, models.ChannelConfig):
        return "", (
            f"request {request!r} has no ComputeDomainChannelConfig: use the "
            "ResourceClaimTemplate the ComputeDomain's controller made"
        )
    return config.domain_id, ""


def _our_conditions(
    devices: Sequence[Mapping[str, Any]], *, pool: str, device: str
) -> dict[str, str]:
    for entry in devices:
        if (entry.get("driver"), entry.get("pool"), entry.get("device")) == (
            names.DRIVER_NAME, pool, device,
        ):
            return {str(c.get("type")): str(c.get("status"))
                    for c in entry.get("conditions") or () if isinstance(c, Mapping)}
    return {}


# ---------------------------------------------------------------- deciding


@dataclasses.dataclass(frozen=True, kw_only=True)
class Wait:
    """Nothing to write yet (`why`, for a debug log)."""

    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelNode:
    """Pin the node to the claim's ComputeDomain: its IMEX daemon comes to the node."""

    patch: models.PatchObject


@dataclasses.dataclass(frozen=True, kw_only=True)
class SetCondition:
    """Set `type` True in the claim's entry: the scheduler binds (ready) or allocates again."""

    type: str
    reason: str
    message: str


BindingStep = Wait | LabelNode | SetCondition


def plan_binding(
    claim: ChannelClaim,
    *,
    node_name: str,
    node_labels: Mapping[str, str],
    domain: models.ComputeDomain | None,
    waited_s: float,
    timeout_s: float,
) -> BindingStep:
    """What a waiting claim needs next on this node. Deterministic; the caller applies it and
    asks again with what it then observes."""
    if claim.problem:
        return _failed(REASON_INVALID, f"claim {claim.ref.namespace}/{claim.ref.name} cannot "
                       f"be prepared on any node: {claim.problem}")
    if domain is None:
        return _failed(REASON_NO_DOMAIN, (
            f"ComputeDomain {claim.domain_id} of claim {claim.ref.namespace}/{claim.ref.name} "
            "does not exist (deleted?); the claim's pod cannot start"
        ))
    where = f"ComputeDomain {domain.meta.namespace}/{domain.meta.name} on node {node_name}"
    label = node_labels.get(names.COMPUTE_DOMAIN_LABEL)
    if label is None:
        return LabelNode(patch=models.PatchObject(
            kind="Node", namespace="", name=node_name,
            patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: domain.uid}}},
        ))
    if label != domain.uid:
        if waited_s >= timeout_s:
            return _failed(REASON_OTHER_DOMAIN, (
                f"node {node_name} still serves ComputeDomain {label} after {timeout_s:.0f} s "
                "(a node serves one ComputeDomain at a time in driver-managed mode); the "
                "scheduler is asked to place the pod elsewhere"
            ))
        return Wait(why=f"node labelled for ComputeDomain {label}")
    nodes = domain.status.nodes if domain.status is not None else ()
    if any(n.name == node_name and n.status is models.DomainStatus.READY for n in nodes):
        return SetCondition(type=IMEX_DAEMON_READY, reason=REASON_READY,
                            message=f"the IMEX daemon of {where} is ready")
    if waited_s >= timeout_s:
        return _failed(REASON_NOT_READY, (
            f"the IMEX daemon of {where} did not become ready within {timeout_s:.0f} s "
            "(see its pod in the driver's namespace); the scheduler is asked to place the "
            "pod elsewhere"
        ))
    return Wait(why="IMEX daemon not ready")


def _failed(reason: str, message: str) -> SetCondition:
    return SetCondition(type=IMEX_DAEMON_FAILED, reason=reason, message=message)


def plan_label_release(
    domain_id: str,
    *,
    node_name: str,
    node_labels: Mapping[str, str],
    resource_version: str,
    claims: Sequence[ChannelClaim],
) -> models.PatchObject | None:
    """Unpin the node from `domain_id` when no channel claim of that ComputeDomain is
    allocated here any more (the pod went elsewhere or away before it was bound, so no
    unprepare will ever release it). `resource_version` makes the patch fail rather than
    remove a label changed meanwhile."""
    if node_labels.get(names.COMPUTE_DOMAIN_LABEL) != domain_id:
        return None
    if any(c.domain_id == domain_id for c in claims):
        return None
    return models.PatchObject(
        kind="Node", namespace="", name=node_name,
        patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}},
        resource_version=resource_version,
    )


def with_condition(
    devices: Sequence[Mapping[str, Any]],
    *,
    claim: ChannelClaim,
    step: SetCondition,
    now: str,
) -> list[dict[str, Any]] | None:
    """`status.devices` with `step`'s condition True in our entry of the claim's channel (the
    entry made if missing; other conditions and entries kept); None when already so."""
    key = (names.DRIVER_NAME, claim.pool, claim.device)
    out = [dict(e) for e in devices]
    entry = next((e for e in out if (e.get("driver"), e.get("pool"), e.get("device")) == key),
                 None)
    if entry is None:
        entry = {"driver": names.DRIVER_NAME, "pool": claim.pool, "device": claim.device}
        out.append(entry)
    conditions = [dict(c) for c in entry.get("conditions") or () if isinstance(c, Mapping)]
    if any(c.get("type") == step.type and c.get("status") == "True" for c in conditions):
        return None
    entry["conditions"] = [c for c in conditions if c.get("type") != step.type] + [{
        "type": step.type, "status": "True", "reason": step.reason,
        "message": step.message[:32768], "lastTransitionTime": now,
    }]
    return out
