"""Prepare and unprepare of one claim as pure transitions (DESIGN §4).

Each planner takes the checkpoint before and returns a `models.ClaimOutcome`: the steps to run
in order (checkpoint writes, CDI files, the driver-managed node label), the checkpoint after
them, and the kubelet's answer — devices, or a Permanent/Retryable error as a value. Every
check runs before the first step that writes, so a rejected claim leaves no trace on the node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from core import cdi, decoding, errors, models, names
from core import checkpoint as checkpoints
from core.checkpoint import HOLDING_STATES
from core.computedomain import (
    allocation_mode,
    channel_prepare,
    daemon_claim,
    modeswitch,
    node_facts,
)
from core.computedomain import checkpoint_records as records


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Request:
    """One allocation result of ours with the opaque config that applies to its request."""

    result: models.DeviceResult
    config: models.OpaqueConfig

    @property
    def is_channel(self) -> bool:
        return isinstance(self.config, models.ChannelConfig)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Validated:
    requests: tuple[_Request, ...]
    domain: models.ComputeDomain
    channel_ids: tuple[int, ...]


# ---------------------------------------------------------------- prepare


def plan_prepare(
    claim: models.ResourceClaim,
    *,
    checkpoint: records.Checkpoint,
    node: node_facts.ImexNodeFacts,
    config: models.DriverConfig,
    domains: Mapping[names.ComputeDomainUID, models.ComputeDomain],
    node_labels: Mapping[str, str],
    now: float,
) -> records.ClaimOutcome:
    """Decide how to prepare `claim` on this node; never raises for a bad claim.

    Idempotent: a claim already completed gets the same devices and no steps. On error no
    checkpoint or CDI step is planned; only the driver-managed node label may be set, since
    the IMEX daemon the claim waits for is scheduled by that label.
    """
    entry = checkpoint.entries.get(claim.uid)
    if entry is not None and checkpoints.is_reusable(entry):
        return models.ClaimOutcome(steps=(), checkpoint=checkpoint, devices=entry.devices)
    label_steps: tuple[records.PluginAction, ...] = ()
    try:
        checkpoints.check_not_aborted(entry, now=now)
        requests = _requests(claim, config=config)
        domain = _domain(claim, requests=requests, domains=domains, config=config)
        _check_admitted_mode(domain, config=config, node=node)
        _check_mode_switch(claim, checkpoint=checkpoint, config=config, node=node)
        channel_ids = _channel_ids(requests, domain=domain, config=config)
        _check_channel_conflict(
            claim, checkpoint=checkpoint, domain=domain, channel_ids=channel_ids
        )
        if not all(r.is_channel for r in requests):
            daemon_claim.check_node_can_run_daemon(node)
        if any(r.is_channel for r in requests):
            _check_clique(node, config=config)
            label_steps = _node_label_steps(node, config=config, domain=domain, labels=node_labels)
            _check_daemon_ready(node, config=config, domain=domain)
    except (errors.PermanentError, errors.RetryableError) as err:
        return models.ClaimOutcome(steps=label_steps, checkpoint=checkpoint, error=err)
    validated = _Validated(requests=requests, domain=domain, channel_ids=channel_ids)
    return _prepare_steps(
        claim, validated=validated, checkpoint=checkpoint, node=node, config=config,
        label_steps=label_steps, now=now,
    )


def _requests(claim: models.ResourceClaim, *, config: models.DriverConfig) -> tuple[_Request, ...]:
    ours = sorted(
        (r for r in claim.results if r.driver == names.DRIVER_NAME),
        key=lambda r: (r.request, r.pool, r.device),
    )
    if not claim.allocated or not ours:
        raise errors.PermanentError(
            f"claim {claim.namespace}/{claim.name} has no allocation for {names.DRIVER_NAME}; "
            "the scheduler must allocate it first (is the claim from a ComputeDomain's "
            "ResourceClaimTemplate?)"
        )
    counts: dict[str, int] = {}
    for result in ours:
        counts[result.request] = counts.get(result.request, 0) + 1
    crowded = sorted(request for request, count in counts.items() if count > 1)
    if crowded:
        raise errors.PermanentError(
            f"request(s) {', '.join(crowded)} of claim {claim.namespace}/{claim.name} were "
            f"allocated more than one {names.DRIVER_NAME} device; a ComputeDomain request takes "
            "exactly one device (use the ComputeDomain's ResourceClaimTemplate unchanged)"
        )
    if len(ours) > 1:
        # DESIGN §4: exactly one allocation result for this driver. A second one (a daemon
        # device beside a channel, or two channels) would let a workload claim grab the
        # node's daemon device or mix ComputeDomains.
        found = ", ".join(f"{r.request}={r.device}" for r in ours)
        raise errors.PermanentError(
            f"claim {claim.namespace}/{claim.name} was allocated {len(ours)} "
            f"{names.DRIVER_NAME} devices ({found}); a claim takes exactly one ComputeDomain "
            "device (a channel or a daemon, never both): use the ResourceClaimTemplate the "
            "ComputeDomain generates unchanged"
        )
    return tuple(_request(claim, result, config=config) for result in ours)


def _request(
    claim: models.ResourceClaim, result: models.DeviceResult, *, config: models.DriverConfig
) -> _Request:
    cfg = decoding.config_for_request(claim, request=result.request)
    # Channel isolation publishes slots, not channels; a slot device carries a channel config.
    channel_type = names.DEVICE_TYPE_SLOT if config.channel_isolation else names.DEVICE_TYPE_CHANNEL
    wants_channel = result.device.startswith(f"{channel_type}-")
    wants_daemon = result.device.startswith(f"{names.DEVICE_TYPE_DAEMON}-")
    if not (wants_channel or wants_daemon):
        raise errors.PermanentError(
            f"request {result.request} was allocated device {result.device!r}, which "
            f"{names.DRIVER_NAME} does not publish; delete the claim and let it be allocated again"
        )
    expected = names.KIND_CHANNEL_CONFIG if wants_channel else names.KIND_DAEMON_CONFIG
    expected_type = models.ChannelConfig if wants_channel else models.DaemonConfig
    if not isinstance(cfg, expected_type):
        found = "none" if cfg is None else f"a {type(cfg).__name__}"
        raise errors.PermanentError(
            f"request {result.request} of claim {claim.namespace}/{claim.name} needs a "
            f"{expected} opaque config for {names.DRIVER_NAME}, found {found}; use the "
            "ResourceClaimTemplate that the ComputeDomain generates"
        )
    if isinstance(cfg, models.DaemonConfig) and config.host_managed:
        raise errors.PermanentError(
            f"claim {claim.namespace}/{claim.name} requests an IMEX daemon device, but the "
            "driver runs in host-managed IMEX mode: the host runs nvidia-imex and the driver "
            "runs no daemons; remove the daemon request (ComputeDomainDaemonConfig)"
        )
    if isinstance(cfg, models.ChannelConfig):
        refusal = allocation_mode.refusal(cfg.allocation_mode, config=config)
        if refusal:
            raise errors.PermanentError(f"allocationMode {refusal}")
    return _Request(result=result, config=cfg)


def _domain(
    claim: models.ResourceClaim,
    *,
    requests: Sequence[_Request],
    domains: Mapping[names.ComputeDomainUID, models.ComputeDomain],
    config: models.DriverConfig,
) -> models.ComputeDomain:
    domain_id = names.ComputeDomainUID(requests[0].config.domain_id)
    domain = domains.get(domain_id)
    workload = any(r.is_channel for r in requests)
    # Daemon claims live in the driver namespace; workload claims beside their ComputeDomain.
    namespace = claim.namespace if workload else config.namespace
    if domain is None or (workload and domain.meta.namespace != namespace):
        where = "" if domain is None else f" (it is in namespace {domain.meta.namespace})"
        raise errors.PermanentError(
            f"ComputeDomain {domain_id} does not exist in namespace {claim.namespace}{where}; "
            "a claim can only use a ComputeDomain of its own namespace: create the pod in the "
            "ComputeDomain's namespace from its ResourceClaimTemplate"
        )
    if not workload and claim.namespace != config.namespace:
        raise errors.PermanentError(
            f"IMEX daemon claim {claim.namespace}/{claim.name} is not in the driver namespace "
            f"{config.namespace}; only the driver's own daemon pods may request daemon devices"
        )
    if workload and domain.meta.deleting:
        raise errors.PermanentError(
            f"ComputeDomain {domain.meta.namespace}/{domain.meta.name} ({domain_id}) is being "
            "deleted; create a new ComputeDomain for new workloads"
        )
    return domain


def _check_admitted_mode(
    domain: models.ComputeDomain, *, config: models.DriverConfig, node: node_facts.ImexNodeFacts
) -> None:
    """A ComputeDomain admitted under another IMEX mode/isolation can never run on this node."""
    admitted = modeswitch.admitted_as(domain)
    current = f"{config.mode.value}/{config.isolation.value}"
    if admitted in ("", current):
        return
    docs, section = modeswitch.DOCS_SECTION
    raise errors.PermanentError(
        f"ComputeDomain {domain.meta.namespace}/{domain.meta.name} was admitted under IMEX mode "
        f"{admitted} (mode/isolation), but the plugin on node {node.node_name} runs {current}: "
        "its workloads cannot start under this mode. Delete the pods using it and the "
        "ComputeDomain, then create it again so the current mode admits it; to go back to "
        f"{admitted} instead, drain the nodes (kubectl drain <node> --ignore-daemonsets) and "
        f"reinstall the driver in that mode; see {docs}, '{section}'"
    )


def _check_mode_switch(
    claim: models.ResourceClaim,
    *,
    checkpoint: records.Checkpoint,
    config: models.DriverConfig,
    node: node_facts.ImexNodeFacts,
) -> None:
    stale = [
        e for e in claims_under_other_mode(checkpoint, config=config) if e.claim_uid != claim.uid
    ]
    if stale:
        raise errors.PermanentError(mode_switch_message(stale, config=config, node=node))


def claims_under_other_mode(
    checkpoint: records.Checkpoint, *, config: models.DriverConfig
) -> tuple[records.Entry, ...]:
    """Claims the node still holds that were prepared under another IMEX mode/isolation."""
    others = sum(
        records.holders_under(checkpoint, mode=mode, isolation=isolation)
        for mode in models.IMEXMode for isolation in models.Isolation
        if (mode, isolation) != (config.mode, config.isolation)
    )
    if not others:
        return ()  # the common case, without a scan of every entry
    return tuple(
        e for _, e in sorted(checkpoint.entries.items())
        if e.state in HOLDING_STATES
        and (e.record.mode, e.record.isolation) != (config.mode, config.isolation)
    )


def mode_switch_message(
    stale: Sequence[records.Entry],
    *,
    config: models.DriverConfig,
    node: node_facts.ImexNodeFacts,
) -> str:
    """What blocks new prepares after a mode switch, and the drain procedure that clears it."""
    listed = ", ".join(sorted(
        f"{e.namespace}/{e.name} ({e.record.mode.value}/{e.record.isolation.value})" if e.name
        else f"claim {e.claim_uid} ({e.record.mode.value}/{e.record.isolation.value})"
        for e in stale
    ))
    return (
        f"node {node.node_name} still holds claims prepared under another IMEX mode "
        f"({listed}) while the driver now runs {config.mode.value}/"
        f"{config.isolation.value}; to switch modes: cordon the node (kubectl cordon "
        f"{node.node_name}), drain it (kubectl drain {node.node_name} --ignore-daemonsets), "
        "wait until the old claims are unprepared, then uncordon it and recreate this pod"
    )


def _channel_ids(
    requests: Sequence[_Request], *, domain: models.ComputeDomain, config: models.DriverConfig
) -> tuple[int, ...]:
    channel_configs = [r.config for r in requests if isinstance(r.config, models.ChannelConfig)]
    if not channel_configs:
        return ()
    if config.channel_isolation:
        return (channel_prepare.assigned_channel(domain, configs=channel_configs),)
    if any(c.allocation_mode == models.AllocationMode.ALL.value for c in channel_configs):
        return tuple(range(names.MAX_CHANNEL_ID + 1))
    return (0,)


def _check_channel_conflict(
    claim: models.ResourceClaim,
    *,
    checkpoint: records.Checkpoint,
    domain: models.ComputeDomain,
    channel_ids: tuple[int, ...],
) -> None:
    own = checkpoint.entries.get(claim.uid)
    # The claim's own entry (a retried prepare) is counted in the index; it is no conflict.
    own_held: frozenset[int] = frozenset()
    if own is not None and own.state in HOLDING_STATES and own.record.domain_id != domain.uid:
        own_held = frozenset(own.record.channel_ids)

    if not any(
        records.channel_holders_besides(checkpoint, channel=channel, domain_id=domain.uid)
        > (channel in own_held)
        for channel in channel_ids
    ):
        return  # no other domain holds a wanted channel: no scan of every entry
    wanted = set(channel_ids)
    for uid, entry in sorted(checkpoint.entries.items()):
        held = entry.record
        if uid == claim.uid or entry.state not in HOLDING_STATES or held.domain_id == domain.uid:
            continue
        shared = sorted(wanted.intersection(held.channel_ids))
        if shared:
            holder = f"{entry.namespace}/{entry.name}" if entry.name else f"claim {uid}"
            other = held.domain_id or "unknown (recovered from its CDI spec)"
            raise errors.RetryableError(
                f"IMEX channel {shared[0]} on this node is held by {holder} of another "
                f"ComputeDomain ({other}); waiting until that claim is unprepared"
            )


def _check_clique(node: node_facts.ImexNodeFacts, *, config: models.DriverConfig) -> None:
    if config.host_managed and not node.clique_id:
        raise errors.PermanentError(
            f"node {node.node_name} has no NVLink clique: it is not part of an NVLink fabric "
            "(NVML reports no fabric for its GPUs), so host-managed IMEX cannot connect it to "
            "other nodes; schedule the pod onto an MNNVL node (e.g. GB200 NVL72), or check that "
            "the fabric manager and the host's nvidia-imex service are running"
        )


def _node_label_steps(
    node: node_facts.ImexNodeFacts,
    *,
    config: models.DriverConfig,
    domain: models.ComputeDomain,
    labels: Mapping[str, str],
) -> tuple[records.PluginAction, ...]:
    if config.host_managed:
        return ()
    label = labels.get(names.COMPUTE_DOMAIN_LABEL)
    if label is None:
        return (
            models.PatchObject(
                kind="Node",
                namespace="",
                name=node.node_name,
                patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: domain.uid}}},
            ),
        )
    if label != domain.uid:
        raise errors.RetryableError(
            f"node {node.node_name} is labelled for ComputeDomain {label} "
            f"({names.COMPUTE_DOMAIN_LABEL}); a node serves one ComputeDomain at a time in "
            "driver-managed mode: waiting until that ComputeDomain's last workload claim on "
            "this node is unprepared (the plugin then removes the label, and its IMEX daemon "
            "leaves the node)"
        )
    return ()


def _check_daemon_ready(
    node: node_facts.ImexNodeFacts, *, config: models.DriverConfig, domain: models.ComputeDomain
) -> None:
    if config.host_managed:
        return
    nodes = domain.status.nodes if domain.status is not None else ()
    if not any(n.name == node.node_name and n.status is models.DomainStatus.READY for n in nodes):
        raise errors.RetryableError(
            f"waiting for the IMEX daemon of ComputeDomain {domain.meta.namespace}/"
            f"{domain.meta.name} on node {node.node_name} to become ready"
        )


def _prepare_steps(
    claim: models.ResourceClaim,
    *,
    validated: _Validated,
    checkpoint: records.Checkpoint,
    node: node_facts.ImexNodeFacts,
    config: models.DriverConfig,
    label_steps: tuple[records.PluginAction, ...],
    now: float,
) -> records.ClaimOutcome:
    devices = tuple(_prepared_device(claim, r, validated=validated) for r in validated.requests)
    started = records.Entry(
        claim_uid=claim.uid,
        namespace=claim.namespace,
        name=claim.name,
        state=models.ClaimState.PREPARE_STARTED,
        record=records.ComputeDomainClaimRecord(
            mode=config.mode,
            isolation=config.isolation,
            domain_id=validated.domain.uid,
            channel_ids=validated.channel_ids,
        ),
        updated_at=now,
    )
    completed = dataclasses.replace(
        started, state=models.ClaimState.PREPARE_COMPLETED, devices=devices
    )
    writes = checkpoints.prepare_writes(
        checkpoint, started=started, completed=completed, now=now
    )
    spec = _cdi_spec(claim, validated=validated, node=node)
    steps = (
        *label_steps,
        # NB: PrepareStarted needs no sync of its own. A killed process leaves it in the page
        # cache; a power loss reboots the node, and the boot-ID rule drops prepared state.
        # The PrepareCompleted sync (the answer rests on it) flushes it too.
        models.WriteCheckpoint(checkpoint=writes.started, changed=writes.changed, durable=False),
        models.WriteCDISpec(claim_uid=claim.uid, spec=spec),
        models.WriteCheckpoint(checkpoint=writes.completed, changed=writes.changed),
    )
    return models.ClaimOutcome(steps=steps, checkpoint=writes.completed, devices=devices)


def _prepared_device(
    claim: models.ResourceClaim, request: _Request, *, validated: _Validated
) -> models.PreparedDevice:
    if request.is_channel:
        ids = tuple(cdi.qualified_device_id(claim.uid, c) for c in validated.channel_ids)
    else:
        ids = (cdi.qualified_daemon_id(claim.uid),)
    return models.PreparedDevice(
        request_names=(request.result.request,),
        pool_name=request.result.pool,
        device_name=request.result.device,
        cdi_device_ids=ids,
    )


def _cdi_spec(
    claim: models.ResourceClaim, *, validated: _Validated, node: node_facts.ImexNodeFacts
) -> models.JSONObject:
    devices = cdi.channel_devices(
        claim_uid=claim.uid,
        channel_ids=validated.channel_ids,
        major=node.channel_major,
        domain_id=validated.domain.uid,
    )
    if any(not r.is_channel for r in validated.requests):
        devices += daemon_claim.daemon_devices(
            claim_uid=claim.uid, domain=validated.domain, node=node
        )
    return cdi.spec_with_devices(devices)


# ---------------------------------------------------------------- unprepare


def plan_unprepare(
    ref: models.ClaimRef, *, checkpoint: records.Checkpoint, now: float
) -> records.ClaimOutcome:
    """Undo what the claim's checkpoint entry says was done, whatever the current mode.

    An unknown claim succeeds with only the (idempotent) deletion of its CDI spec, so a file
    left behind without an entry cannot outlive its claim; a tombstone is a no-op. A completed
    entry is dropped; a started one becomes a PrepareAborted tombstone so a late retry of its
    prepare fails instead of resurrecting it.
    """
    entry = checkpoint.entries.get(ref.uid)
    if entry is None:
        return models.ClaimOutcome(
            steps=(models.DeleteCDISpec(claim_uid=ref.uid),), checkpoint=checkpoint
        )
    if entry.state is models.ClaimState.PREPARE_ABORTED:
        return models.ClaimOutcome(steps=(), checkpoint=checkpoint)
    if entry.state is models.ClaimState.PREPARE_STARTED:
        after = checkpoints.with_entry(checkpoint, dataclasses.replace(
            entry, state=models.ClaimState.PREPARE_ABORTED, devices=(), updated_at=now
        ))
    else:
        after = checkpoints.without_entry(checkpoint, ref.uid)
    # NB: the entry goes before the file. A kill in between leaves a spec file no entry holds
    # (deleted at start-up as an orphan), never a completed entry whose answer has no file.
    steps = (
        models.WriteCheckpoint(checkpoint=after, changed=(ref.uid,)),
        models.DeleteCDISpec(claim_uid=ref.uid),
    )
    return models.ClaimOutcome(steps=steps, checkpoint=after)


def plan_label_release(
    entry: records.Entry,
    *,
    after: records.Checkpoint,
    node: node_facts.ImexNodeFacts,
    node_labels: Mapping[str, str],
    resource_version: str,
) -> models.PatchObject | None:
    """The patch that unpins the node from a ComputeDomain once its last workload claim here
    is gone.

    Only for a driver-managed channel claim (what set the label), only while the label still
    names that domain, and only when no other workload (channel) claim of it is still prepared
    on this node. NB: the domain's IMEX daemon claim is not counted: the daemon runs because
    of the label (its DaemonSet selects it), so its claim holding the label would pin the
    node forever. Removing the label is what ends the daemon pod and then its claim.
    `resource_version` makes the patch fail rather than remove a label changed meanwhile.
    """
    record = entry.record
    if (
        record.mode is not models.IMEXMode.DRIVER_MANAGED
        or not record.channel_ids
        or not record.domain_id
        or node_labels.get(names.COMPUTE_DOMAIN_LABEL) != record.domain_id
    ):
        return None
    others = records.channel_claims_of(after, domain_id=record.domain_id)
    held = after.entries.get(entry.claim_uid)
    if (
        held is not None
        and held.state in HOLDING_STATES
        and held.record.channel_ids
        and held.record.domain_id == record.domain_id
    ):
        others -= 1
    if others > 0:
        return None
    return models.PatchObject(
        kind="Node",
        namespace="",
        name=node.node_name,
        patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}},
        resource_version=resource_version,
    )


def plan_restore_spec(
    entry: records.Entry, *, node: node_facts.ImexNodeFacts
) -> models.WriteCDISpec | None:
    """The CDI spec a completed channel claim's entry proves, to write back if it was lost.

    Deterministic: the same bytes prepare wrote (channels, major, ComputeDomain id come from
    the entry and the node). None where the entry alone cannot rebuild the spec (a daemon
    claim, whose spec also carries per-domain edits): that claim must be unprepared.
    """
    channel_prefix = f"{names.DEVICE_TYPE_CHANNEL}-"
    if (
        entry.state is not models.ClaimState.PREPARE_COMPLETED
        or not entry.record.channel_ids
        or not entry.devices
        or not all(d.device_name.startswith(channel_prefix) for d in entry.devices)
    ):
        return None
    devices = cdi.channel_devices(
        claim_uid=entry.claim_uid,
        channel_ids=entry.record.channel_ids,
        major=node.channel_major,
        domain_id=entry.record.domain_id,
    )
    return models.WriteCDISpec(claim_uid=entry.claim_uid, spec=cdi.spec_with_devices(devices))
