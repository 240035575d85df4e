"""The ComputeDomain controller's brain: what exists for one CD in, the next cluster actions out.

Level-triggered and pure: `observe` turns listed Kubernetes JSON into an `Observed` value,
`plan_compute_domain` compares it with what the CD needs under the driver's IMEX mode and returns
only the actions still missing. Planning the same observation twice gives the same tuple;
applying every action and planning again gives nothing more to do (a deletion advances one
dependent step per reconcile, and each step is planned only when the observation says it is due).

Host-managed plans never touch DaemonSets, daemon RCTs, node labels or cliques (DESIGN §4).
A CD admitted under another mode/isolation is left alone and reported once (DESIGN §6).
A CD the upstream driver admitted (our finalizer, no stamp) is adopted in place: stamped, its
RCTs kept, its upstream-shaped DaemonSet patched into ours without restarting a daemon
(`objects.daemonset_takeover`), one `AdoptedFromUpstream` event. One that has an IMEX
DaemonSet counts as admitted under driverManaged/domain, and under channel isolation one
without counts as hostManaged/domain (`judged_admission`), so such CDs are left alone as any
other mode mismatch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from core import decoding, errors, gates, kinds, models, names
from core.computedomain import channels, modes, modeswitch, objects

MODE_MISMATCH_REPORTED_ANNOTATION: Final = "resource.nvidia.com/modeMismatchReported"
MODE_MISMATCH_REASON: Final = "IMEXModeMismatch"
# Our additive status condition (the chart's CRD allows status.conditions).
MODE_MISMATCH_CONDITION: Final = "AdmittedUnderOtherMode"
# Host-managed IMEX gives one channel per workload (channel 0, or under isolation `channel` the
# CD's own): a CD asking for All is admitted with Single, once reported by a warning event; the
# annotation makes that report happen exactly once.
ALLOCATION_MODE_OVERRIDDEN_ANNOTATION: Final = "resource.nvidia.com/allocationModeOverridden"
ALLOCATION_MODE_OVERRIDDEN_REASON: Final = "AllocationModeOverridden"
# A CD another driver (upstream's) admitted, taken over in place (Normal event, once: the stamp
# written in the same plan ends it).
ADOPTED_REASON: Final = "AdoptedFromUpstream"

# Planner-owned condition: False while the CD asks for something the driver refuses to build
# (an invalid or taken ResourceClaimTemplate name, an absurd numNodes); absent otherwise.
ADMITTED_CONDITION: Final = "Admitted"
# Reconciler-owned condition: False while the API server refuses or fails what the plan needs;
# removed after the next reconcile that succeeds.
RECONCILED_CONDITION: Final = "Reconciled"
RECONCILE_FAILED_REASON: Final = "ReconcileFailed"
# Channel isolation: False while no IMEX channel could be assigned (all taken); absent otherwise.
CHANNEL_ASSIGNED_CONDITION: Final = "ChannelAssigned"
# Planner-owned condition: False while the CD carries something the driver ignores (unknown
# fields, an unreadable status, numNodes in host-managed mode beyond any NVLink domain) but
# still serves it; absent otherwise.
VALIDATED_CONDITION: Final = "Validated"
IGNORED_FIELDS_REASON: Final = "SpecPartlyIgnored"
# No NVLink domain comes near this many nodes; a larger numNodes can never become Ready.
MAX_NUM_NODES: Final = 4096
# Object names of resource.k8s.io kinds are DNS-1123 subdomains.
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_DNS1123_SUBDOMAIN_MAX: Final = 253

JSONList = Sequence[Mapping[str, Any]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    """One `status.conditions[]` entry of a ComputeDomain."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


def conditions_from_k8s(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    """`status.conditions` of a ComputeDomain, tolerantly (malformed entries are skipped)."""
    status = obj.get("status")
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(raw, list):
        return ()
    return tuple(
        Condition(
            type=_str(item.get("type")),
            status=_str(item.get("status")),
            reason=_str(item.get("reason")),
            message=_str(item.get("message")),
            last_transition_time=_str(item.get("lastTransitionTime")),
        )
        for item in raw
        if isinstance(item, Mapping) and _str(item.get("type"))
    )


def condition_to_k8s(condition: Condition) -> dict[str, str]:
    out = {"type": condition.type, "status": condition.status}
    if condition.reason:
        out["reason"] = condition.reason
    if condition.message:
        out["message"] = condition.message
    if condition.last_transition_time:
        out["lastTransitionTime"] = condition.last_transition_time
    return out


def is_dns1123_subdomain(name: str) -> bool:
    """True for a valid name of a ResourceClaimTemplate (and most Kubernetes objects)."""
    return len(name) <= _DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.fullmatch(name))


# ---------------------------------------------------------------- observation


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observed:
    """What exists in the cluster for one ComputeDomain (metadata only, except cliques).

    `workload_rct` is whatever object holds the CD's RCT name in its namespace, ours or not:
    the planner tells them apart by the CD UID label and never touches a foreign one.
    """

    workload_rct: models.ObjectMeta | None = None
    daemon_rct: models.ObjectMeta | None = None
    daemonset: models.ObjectMeta | None = None
    # Nodes whose computeDomain label holds this CD's UID, sorted by name.
    labelled_nodes: tuple[models.ObjectMeta, ...] = ()
    # Cliques `<cdUID>.<cliqueID>` in the driver namespace, sorted by name.
    cliques: tuple[models.ComputeDomainClique, ...] = ()
    # The CD's own `status.conditions` (see `conditions_from_k8s`).
    conditions: tuple[Condition, ...] = ()
    # Channel isolation: the channel the controller's table gives this CD (its status value,
    # or a fresh assignment); None with `channel_refusal` saying why when none is free.
    channel_id: int | None = None
    channel_refusal: str = ""
    # Channel isolation: who else names this CD's status channel (None: not observed), and
    # the channel its workload RCT's config carries (None: no RCT, or it names none).
    channel_rivals: channels.Rivals | None = None
    workload_rct_channel: int | None = None
    # Nodes with a daemon pod of this CD (in the driver namespace, terminating ones included);
    # None when daemon pods were not observed, and then no daemon entry is ever pruned.
    daemon_pod_nodes: frozenset[str] | None = None
    # What the CD's JSON carries that decoding ignored (`decoding.compute_domain_tolerantly`).
    ignored: tuple[str, ...] = ()

    def is_gone_daemon(self, node_name: str) -> bool:
        """True when a daemon entry of `node_name` outlived its daemon: the node no longer
        carries this CD's label and no daemon pod of this CD is left on it.

        NB: both, not either. A released node's daemon pod may still be terminating (it
        removes its own entry on the way out), and a labelled node without a daemon pod gets a
        new one from the DaemonSet that takes the entry over (same node, same index).
        """
        return (
            self.daemon_pod_nodes is not None
            and node_name not in self.daemon_pod_nodes
            and all(meta.name != node_name for meta in self.labelled_nodes)
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterIndex:
    """Listed objects indexed once, so observing N CDs costs O(N), not O(N²)."""

    by_key: Mapping[tuple[str, str, str], Mapping[str, Any]]
    nodes_by_cd: Mapping[str, tuple[Mapping[str, Any], ...]]
    cliques_by_cd: Mapping[tuple[str, str], tuple[Mapping[str, Any], ...]]
    # (namespace, CD UID) -> nodes of its daemon pods; None when pods were not listed.
    daemon_pod_nodes_by_cd: Mapping[tuple[str, str], frozenset[str]] | None = None


def index_cluster(objects_by_kind: Mapping[str, JSONList]) -> ClusterIndex:
    """Index raw lists keyed by kind string ("ResourceClaimTemplate", "DaemonSet", "Node",
    "ComputeDomainClique", "Pod"); other kinds are ignored. Daemon pods count only when a
    "Pod" list is given (even an empty one): without it they are unobserved, not absent."""
    by_key: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for kind in (kinds.RESOURCE_CLAIM_TEMPLATE.kind, kinds.DAEMON_SET.kind):
        for obj in objects_by_kind.get(kind, ()):
            meta = _raw_meta(obj)
            by_key[(kind, _str(meta.get("namespace")), _str(meta.get("name")))] = obj
    nodes: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objects_by_kind.get(kinds.NODE.kind, ()):
        labels = _raw_meta(obj).get("labels")
        value = labels.get(names.COMPUTE_DOMAIN_LABEL) if isinstance(labels, Mapping) else None
        if isinstance(value, str) and value:
            nodes.setdefault(value, []).append(obj)
    cliques: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in objects_by_kind.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, ()):
        meta = _raw_meta(obj)
        cd_uid, dot, _ = _str(meta.get("name")).partition(".")
        if dot and cd_uid:
            cliques.setdefault((_str(meta.get("namespace")), cd_uid), []).append(obj)
    return ClusterIndex(
        by_key=by_key,
        nodes_by_cd={k: tuple(v) for k, v in nodes.items()},
        cliques_by_cd={k: tuple(v) for k, v in cliques.items()},
        daemon_pod_nodes_by_cd=(
            daemon_pod_nodes(objects_by_kind[kinds.POD.kind])
            if kinds.POD.kind in objects_by_kind
            else None
        ),
    )


def daemon_pod_nodes(pods: JSONList) -> dict[tuple[str, str], frozenset[str]]:
    """(namespace, CD UID) -> the nodes its daemon pods are bound to.

    A daemon pod is a pod with the computeDomain label (its DaemonSet's template carries it;
    workload pods never do) and a node; the caller lists the driver namespace only.
    """
    found: dict[tuple[str, str], set[str]] = {}
    for pod in pods:
        meta = _raw_meta(pod)
        labels = meta.get("labels")
        cd_uid = labels.get(names.COMPUTE_DOMAIN_LABEL) if isinstance(labels, Mapping) else None
        spec = pod.get("spec")
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        if isinstance(cd_uid, str) and cd_uid and isinstance(node, str) and node:
            found.setdefault((_str(meta.get("namespace")), cd_uid), set()).add(node)
    return {key: frozenset(value) for key, value in found.items()}


def observe(
    cd: models.ComputeDomain,
    *,
    objects: Mapping[str, JSONList] | ClusterIndex,
    config: models.DriverConfig,
    conditions: tuple[Condition, ...],
) -> Observed:
    """Pick out, from listed JSON (or an index of it), what exists for `cd`.

    Daemon-side objects are looked up in `config.namespace`; they are observed in every mode
    so that a CD admitted under driver-managed mode can still be cleaned up on deletion.
    `conditions` are the CD's own (`conditions_from_k8s` of its object): required, because a
    plan made from none never clears a stale one and so never converges with one made from
    the real ones.
    """
    index = objects if isinstance(objects, ClusterIndex) else index_cluster(objects)
    rct_kind = kinds.RESOURCE_CLAIM_TEMPLATE.kind
    daemon_name = names.daemonset_name(cd.uid)
    workload = index.by_key.get(
        (rct_kind, cd.meta.namespace, cd.spec.channel.resource_claim_template_name)
    )
    daemon_rct = index.by_key.get((rct_kind, config.namespace, daemon_name))
    ds = index.by_key.get((kinds.DAEMON_SET.kind, config.namespace, daemon_name))
    nodes = sorted(
        (_observed_meta(n) for n in index.nodes_by_cd.get(cd.uid, ())), key=lambda m: m.name
    )
    cliques = sorted(
        _decodable_cliques(index.cliques_by_cd.get((config.namespace, cd.uid), ())),
        key=lambda c: c.meta.name,
    )
    pods = index.daemon_pod_nodes_by_cd
    return Observed(
        workload_rct=_observed_meta(workload) if workload is not None else None,
        daemon_rct=_observed_meta(daemon_rct) if daemon_rct is not None else None,
        daemonset=_observed_meta(ds) if ds is not None else None,
        labelled_nodes=tuple(nodes),
        cliques=tuple(cliques),
        conditions=conditions,
        workload_rct_channel=(
            channels.rct_channel_from_k8s(workload) if workload is not None else None
        ),
        daemon_pod_nodes=(
            pods.get((config.namespace, cd.uid), frozenset()) if pods is not None else None
        ),
    )


# ---------------------------------------------------------------- planning


def is_mode_mismatch(
    cd: models.ComputeDomain, *, config: models.DriverConfig, observed: Observed | None = None
) -> bool:
    """True when another mode/isolation admitted the CD: the driver must leave it alone.
    With `observed`, a CD the upstream driver admitted is judged by `judged_admission`."""
    if observed is not None:
        cd = judged_admission(cd, observed=observed, config=config)
    return modeswitch.admitted_as(cd) not in ("", _mode_label(config))


def judged_admission(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> models.ComputeDomain:
    """`cd` as mode-switch safety judges it. One another driver admitted (no stamp, our
    finalizer) counts as admitted under upstream's driverManaged/domain when it has an IMEX
    DaemonSet (the only mode upstream runs daemons in), else, under channel isolation, under
    upstream's hostManaged/domain (`none` here): upstream never gives a CD a channel of its
    own, and its workload RCT, which hands out channel 0, cannot be changed. Any other CD
    as it is (adopted under the running mode)."""
    if not modeswitch.made_by_another_driver(cd):
        return cd
    if observed.daemonset is not None:
        mode, isolation = models.IMEXMode.DRIVER_MANAGED, models.Isolation.DOMAIN
    elif config.channel_isolation:
        mode, isolation = models.IMEXMode.HOST_MANAGED, models.Isolation.NONE
    else:
        return cd
    stamp = {names.ADMITTED_MODE_ANNOTATION: mode.value,
             names.ADMITTED_ISOLATION_ANNOTATION: isolation.value}
    meta = dataclasses.replace(cd.meta, annotations={**cd.meta.annotations, **stamp})
    return dataclasses.replace(cd, meta=meta)


def plan_compute_domain(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> tuple[models.ClusterAction, ...]:
    """The actions, in order, that move the cluster toward what `cd` needs. Deterministic and
    idempotent; the executor applies them in order and stops at the first failure."""
    if is_mode_mismatch(cd, config=config, observed=observed):
        return _plan_mismatch(judged_admission(cd, observed=observed, config=config),
                              observed=observed, config=config)
    if cd.meta.deleting:
        return _plan_delete(cd, observed=observed, config=config)
    return _plan_admit(cd, observed=observed, config=config)


def plan_stale_node_labels(
    *,
    nodes: Sequence[Mapping[str, Any]],
    live_cd_uids: frozenset[str],
    config: models.DriverConfig,
) -> tuple[models.ClusterAction, ...]:
    """Remove computeDomain node labels naming CDs that no longer exist (driver-managed only).

    NB: `live_cd_uids` must come from a CD list at least as fresh as `nodes`, or a label the
    plugin just set for a brand-new CD could be taken for stale.
    """
    if config.host_managed:
        return ()
    actions: list[models.ClusterAction] = []
    for meta in sorted((_observed_meta(n) for n in nodes), key=lambda m: m.name):
        value = meta.labels.get(names.COMPUTE_DOMAIN_LABEL)
        if value and value not in live_cd_uids:
            actions.append(_unlabel_node(meta))
    return tuple(actions)


def desired_status(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> models.ComputeDomainStatus:
    """The status the CD should show given what exists (assuming its RCT exists)."""
    if config.host_managed:
        # Ready means only "admitted and its RCT exists" (and, under channel isolation, "its
        # channel is assigned"): the host runs IMEX.
        channel = observed.channel_id if config.channel_isolation else None
        return models.ComputeDomainStatus(
            status=models.DomainStatus.READY, nodes=(), channel_id=channel
        )
    if config.gates.enabled(gates.COMPUTE_DOMAIN_CLIQUES):
        nodes = _nodes_from_cliques(observed.cliques)
    else:
        # Without cliques the daemons write status.nodes themselves; we only judge readiness.
        nodes = cd.status.nodes if cd.status is not None else ()
    # A daemon that could not remove its own entry (killed, API down as it stopped) must not
    # keep its node listed once its pod is gone (upstream drops such nodes within seconds).
    nodes = tuple(n for n in nodes if not observed.is_gone_daemon(n.name))
    ready = sum(1 for n in nodes if n.status is models.DomainStatus.READY)
    if cd.spec.num_nodes > 0:
        is_ready = ready >= cd.spec.num_nodes
    else:
        is_ready = bool(nodes) and ready == len(nodes)
    status = models.DomainStatus.READY if is_ready else models.DomainStatus.NOT_READY
    return models.ComputeDomainStatus(status=status, nodes=nodes)


def _plan_admit(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> tuple[models.ClusterAction, ...]:
    actions: list[models.ClusterAction] = []
    cd_patch = _admission_metadata_patch(cd, config=config)
    overridden = _allocation_mode_overridden(cd, config=config)
    if overridden:
        override = models.AllocationMode.SINGLE.value
        cd_patch.setdefault("annotations", {})[ALLOCATION_MODE_OVERRIDDEN_ANNOTATION] = override
    if cd_patch:
        actions.append(_patch(kinds.COMPUTE_DOMAIN.kind, cd.meta, {"metadata": cd_patch}))
    if modeswitch.made_by_another_driver(cd):
        # After the stamp: if that patch races, the next plan adopts (and reports) again.
        actions.append(_adopted_event(cd, observed=observed, config=config))
    if overridden:
        # After the annotation patch: if that patch races, the next plan reports again.
        actions.append(
            models.EmitEvent(
                involved=_cd_ref(cd),
                reason=ALLOCATION_MODE_OVERRIDDEN_REASON,
                message=(
                    f"spec.channel.allocationMode is {cd.spec.channel.allocation_mode.value}, but "
                    f"host-managed IMEX gives {modes.host_managed_channel_grant(config)}: the "
                    "generated ResourceClaimTemplate uses Single. Set allocationMode: Single (or "
                    "leave it out) to silence this warning."
                ),
            )
        )
    if MODE_MISMATCH_REPORTED_ANNOTATION in cd.meta.annotations:
        actions.append(_mismatch_condition_patch(cd, observed=observed, condition=None))
    refusal = admission_refusal(cd, observed=observed, config=config)
    ignored = ignored_report(cd, observed=observed, config=config)
    for kind, condition in ((ADMITTED_CONDITION, refusal), (VALIDATED_CONDITION, ignored)):
        actions.extend(_report_condition(cd, observed=observed, kind=kind, condition=condition))
        # NB: each report patches the whole list: later ones must start from this one's.
        observed = dataclasses.replace(observed, conditions=_conditions_with(
            observed.conditions, kind=kind, condition=condition))
    if refusal is not None:
        not_ready = models.ComputeDomainStatus(status=models.DomainStatus.NOT_READY)
        if cd.status is None or cd.status.status is not models.DomainStatus.NOT_READY:
            actions.append(_status_patch(cd, not_ready))
        return tuple(actions)
    if config.channel_isolation:
        assigned, steps = _channel_steps(cd, observed=observed)
        actions.extend(steps)
        if not assigned:
            return tuple(actions)
    workload_ok, steps = _ensure_child(
        observed.workload_rct,
        cd_uid=cd.uid,
        build=lambda: objects.workload_rct(cd, config=config, channel_id=observed.channel_id),
        kind=kinds.RESOURCE_CLAIM_TEMPLATE.kind,
        check_owner=True,
    )
    if (config.channel_isolation and workload_ok and observed.workload_rct is not None
            and observed.workload_rct_channel not in (None, observed.channel_id)):
        # The CD's channel was re-assigned (a duplicate): the template, whose spec is
        # immutable, still hands out the old one. It goes and comes back with the new one.
        workload_ok = False
        steps = (*steps, *_retire(kinds.RESOURCE_CLAIM_TEMPLATE.kind, observed.workload_rct))
    actions.extend(steps)
    if not config.host_managed:
        _, steps = _ensure_child(
            observed.daemon_rct,
            cd_uid=cd.uid,
            build=lambda: objects.daemon_rct(cd, config=config),
            kind=kinds.RESOURCE_CLAIM_TEMPLATE.kind,
            check_owner=False,
        )
        actions.extend(steps)
        _, steps = _ensure_child(
            observed.daemonset,
            cd_uid=cd.uid,
            build=lambda: objects.daemonset(cd, config=config),
            kind=kinds.DAEMON_SET.kind,
            check_owner=False,
        )
        actions.extend(steps)
        if not steps and _upstream_daemonset(cd, observed=observed):
            assert observed.daemonset is not None
            actions.append(_patch(kinds.DAEMON_SET.kind, observed.daemonset,
                                  objects.daemonset_takeover(cd, config=config)))
        actions.extend(_prune_gone_daemons(observed))
    status = desired_status(cd, observed=observed, config=config)
    if not workload_ok:
        status = dataclasses.replace(status, status=models.DomainStatus.NOT_READY)
    if cd.status != status:
        actions.append(_status_patch(cd, status))
    return tuple(actions)


def _upstream_daemonset(cd: models.ComputeDomain, *, observed: Observed) -> bool:
    """True when the CD's DaemonSet is upstream-shaped (labelled with the CD, not with our
    target label) and must be taken over (`objects.daemonset_takeover`)."""
    ds = observed.daemonset
    return (
        ds is not None
        and not ds.deleting
        and ds.labels.get(names.COMPUTE_DOMAIN_LABEL) == cd.uid
        and ds.labels.get(names.COMPUTE_DOMAIN_TARGET_LABEL) != names.TARGET_DAEMON
    )


def _adopted_event(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> models.EmitEvent:
    kept = (
        "its ResourceClaimTemplate and the claims made from it are kept as they are, so "
        "running workloads keep their channels"
    )
    if config.host_managed:
        daemons = ""
    elif _upstream_daemonset(cd, observed=observed):
        daemons = (
            f"; its IMEX DaemonSet {config.namespace}/{names.daemonset_name(cd.uid)} is taken "
            "over in place with updateStrategy OnDelete: the running IMEX daemons keep running, "
            "and a node gets this driver's daemon only when its old daemon pod goes"
        )
    else:
        daemons = "; its IMEX DaemonSet and daemon claim template are kept or created as usual"
    return models.EmitEvent(
        involved=_cd_ref(cd),
        reason=ADOPTED_REASON,
        message=(
            f"ComputeDomain {_shown(cd.meta.namespace)}/{_shown(cd.meta.name)} was admitted by "
            "another driver (the upstream driver: its finalizer, no admitted-mode stamp) and is "
            f"adopted under {_mode_label(config)} without deletion: {kept}{daemons}."
        ),
        warning=False,
    )


def _prune_gone_daemons(observed: Observed) -> tuple[models.ClusterAction, ...]:
    """Clique patches that drop the entries of daemons whose pods are gone (see
    `Observed.is_gone_daemon`), so their peers stop listing them too. Each patch is guarded
    by the resourceVersion observed: a daemon writing meanwhile makes it fail and re-plan."""
    actions: list[models.ClusterAction] = []
    for clique in observed.cliques:
        kept = [d for d in clique.daemons if not observed.is_gone_daemon(d.node_name)]
        if len(kept) == len(clique.daemons):
            continue
        actions.append(_patch(
            kinds.COMPUTE_DOMAIN_CLIQUE.kind, clique.meta,
            {"daemons": [decoding.clique_daemon_to_k8s(d) for d in kept]},
        ))
    return tuple(actions)


def _channel_steps(
    cd: models.ComputeDomain, *, observed: Observed
) -> tuple[bool, tuple[models.ClusterAction, ...]]:
    """Channel isolation: (channel assigned, steps). No channel: a `ChannelAssigned=False`
    condition with a Warning event, NotReady, and nothing else (no RCT without a channel).
    A fresh channel is recorded in `status.channelID` *before* the RCT that carries it is
    created, so a restart can never build a table that disagrees with an existing RCT; the
    write is conditioned on the CD's resourceVersion the choice was made from.

    A duplicate (another live CD created earlier names the same channel): re-assigned when no
    claim carries it yet (`observed.channel_id` is then the new channel), with an Event on
    both; else it keeps the channel and gets `ChannelUnique=False`, which the plugin refuses
    new prepares on (see `channels.duplicate_standing`)."""
    if observed.channel_id is None:
        condition = Condition(
            type=CHANNEL_ASSIGNED_CONDITION,
            status="False",
            reason=channels.EXHAUSTED_REASON,
            message=observed.channel_refusal or "waiting for an IMEX channel",
        )
        steps = list(_report_condition(cd, observed=observed, kind=CHANNEL_ASSIGNED_CONDITION,
                                       condition=condition))
        if cd.status is None or cd.status.status is not models.DomainStatus.NOT_READY:
            steps.append(_status_patch(cd, models.ComputeDomainStatus(
                status=models.DomainStatus.NOT_READY)))
        return False, tuple(steps)
    steps = []
    recorded = cd.status.channel_id if cd.status is not None else None
    standing, first = channels.duplicate_standing(
        domain_uid=cd.uid, channel_id=recorded, rivals=observed.channel_rivals)
    if recorded != observed.channel_id:
        if recorded is not None and first is not None:
            message = channels.duplicate_message(
                namespace=cd.meta.namespace, name=cd.meta.name, channel_id=recorded,
                first=first, moved_to=observed.channel_id)
            steps += _duplicate_events(cd, first=first, message=message)
        status = models.ComputeDomainStatus(
            status=models.DomainStatus.NOT_READY, channel_id=observed.channel_id)
        steps.append(dataclasses.replace(_status_patch(cd, status),
                                         resource_version=cd.meta.resource_version))
    unique: Condition | None = None
    if standing is channels.Standing.CONFLICT and first is not None and recorded is not None:
        message = channels.duplicate_message(
            namespace=cd.meta.namespace, name=cd.meta.name, channel_id=recorded, first=first,
            moved_to=None)
        unique = Condition(type=channels.UNIQUE_CONDITION, status="False",
                           reason=channels.DUPLICATE_REASON, message=message)
    marked = _report_condition(cd, observed=observed, kind=channels.UNIQUE_CONDITION,
                               condition=unique)
    if unique is not None and marked and first is not None:
        steps += _duplicate_events(cd, first=first, message=unique.message)[1:]
    steps += marked
    steps += _report_condition(cd, observed=observed, kind=CHANNEL_ASSIGNED_CONDITION,
                               condition=None)
    return True, tuple(steps)


def _duplicate_events(
    cd: models.ComputeDomain, *, first: channels.ChannelHolder, message: str
) -> list[models.ClusterAction]:
    """The duplicate reported on both ComputeDomains (this one first)."""
    other = models.ObjectRef(
        kind=kinds.COMPUTE_DOMAIN.kind, name=first.name, namespace=first.namespace,
        uid=first.domain_uid, api_version=kinds.COMPUTE_DOMAIN.api_version)
    return [models.EmitEvent(involved=ref, reason=channels.DUPLICATE_REASON, message=message)
            for ref in (_cd_ref(cd), other)]


def _status_patch(
    cd: models.ComputeDomain, status: models.ComputeDomainStatus
) -> models.PatchObject:
    return models.PatchObject(
        kind=kinds.COMPUTE_DOMAIN.kind,
        namespace=cd.meta.namespace,
        name=cd.meta.name,
        patch={"status": decoding.compute_domain_status_to_k8s(status)},
        subresource="status",
    )


def admission_refusal(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> Condition | None:
    """Why the driver refuses to build anything for this CD (an `Admitted=False` condition
    whose message names the cause and the fix), or None when it can be served.

    NB: a CD's spec is immutable, so every fix is "delete and recreate"; the CRD cannot refuse
    these values itself without rejecting objects the upstream CRD accepts.
    """
    name = cd.spec.channel.resource_claim_template_name
    where = f"ComputeDomain {_shown(cd.meta.namespace)}/{_shown(cd.meta.name)}"
    recreate = "Delete this ComputeDomain and create it again with"
    if not is_dns1123_subdomain(cd.meta.name):
        return _refused(
            "InvalidName",
            f"{where}: its name ({len(cd.meta.name)} characters) is not a valid object name "
            "(at most 253 lowercase letters, digits, '-' and '.', starting and ending with a "
            "letter or digit), so no Kubernetes object can be named after it. "
            f"{recreate} a valid name.",
        )
    if not is_dns1123_subdomain(name):
        return _refused(
            "InvalidResourceClaimTemplateName",
            f"{where}: spec.channel.resourceClaimTemplate.name {name[:300]!r} is not a valid "
            "object name (at most 253 lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit), so its ResourceClaimTemplate cannot be created. "
            f"{recreate} a valid name.",
        )
    if not config.host_managed and cd.spec.num_nodes > MAX_NUM_NODES:
        return _refused(
            "NumNodesTooLarge",
            f"{where}: spec.numNodes is {cd.spec.num_nodes}, more than any NVLink domain "
            f"spans (at most {MAX_NUM_NODES}); it could never become Ready. {recreate} "
            "numNodes: 0 (recommended) or the number of nodes the workload really uses.",
        )
    workload = observed.workload_rct
    owner = workload.labels.get(names.COMPUTE_DOMAIN_LABEL) if workload is not None else None
    if workload is not None and owner != cd.uid:
        holder = (
            f"belongs to another ComputeDomain (uid {owner})"
            if owner
            else "exists and was not created by this driver"
        )
        return _refused(
            "ResourceClaimTemplateNameTaken",
            f"{where}: ResourceClaimTemplate {workload.namespace}/{workload.name} {holder}; "
            "the driver never touches it, and this ComputeDomain stays NotReady. "
            f"{recreate} another spec.channel.resourceClaimTemplate.name.",
        )
    return None


def ignored_report(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> Condition | None:
    """A `Validated=False` condition naming what the driver ignores in a CD it serves (see
    `Observed.ignored`; numNodes beyond any NVLink domain in host-managed mode, where numNodes
    is ignored), or None when it ignores nothing."""
    ignored = list(observed.ignored)
    if config.host_managed and cd.spec.num_nodes > MAX_NUM_NODES:
        ignored.append(
            f"spec.numNodes {cd.spec.num_nodes} is more than any NVLink domain spans (at most "
            f"{MAX_NUM_NODES}) and is ignored in hostManaged mode"
        )
    if not ignored:
        return None
    where = f"ComputeDomain {_shown(cd.meta.namespace)}/{_shown(cd.meta.name)}"
    return Condition(
        type=VALIDATED_CONDITION, status="False", reason=IGNORED_FIELDS_REASON,
        message=(f"{where} is served, but: " + "; ".join(ignored[:10])
                 + (f"; and {len(ignored) - 10} more" if len(ignored) > 10 else "")
                 + ". Delete it and create it again without them to silence this warning."),
    )


def _shown(name: str) -> str:
    """A name short enough for a message (a hostile CD may carry a huge one)."""
    return name if len(name) <= 63 else f"{name[:40]}...({len(name)} characters)"


def _refused(reason: str, message: str) -> Condition:
    return Condition(type=ADMITTED_CONDITION, status="False", reason=reason, message=message)


def plan_reconcile_failure(
    cd: models.ComputeDomain, *, observed: Observed, cause: str, http_status: int = 0
) -> tuple[models.ClusterAction, ...]:
    """Report a reconcile the API server refused or failed: a Warning event and a
    `Reconciled=False` condition naming the cause and the fix. Nothing when the same failure
    is already reported (retries with backoff do not repeat it)."""
    if http_status in (400, 422):
        fix = (
            "the API server refused an object this ComputeDomain needs: fix what the message "
            "names (the spec is immutable: delete and recreate the ComputeDomain), or the "
            "admission policy that refuses it"
        )
    elif http_status in (401, 403):
        fix = "the driver lacks the right: check its RBAC rules (the Helm chart's ClusterRole)"
    else:
        fix = (
            "the API server or an admission webhook failed: check they are up "
            "(kubectl get --raw /readyz; kubectl get validatingwebhookconfigurations); "
            "the driver retries with backoff"
        )
    condition = Condition(
        type=RECONCILED_CONDITION,
        status="False",
        reason=RECONCILE_FAILED_REASON,
        message=f"cannot reconcile: {cause[:700]}; {fix}",
    )
    return _report_condition(cd, observed=observed, kind=RECONCILED_CONDITION, condition=condition)


def plan_reconcile_recovered(
    cd: models.ComputeDomain, *, observed: Observed
) -> tuple[models.ClusterAction, ...]:
    """After a successful reconcile: drop a `Reconciled=False` condition left by a failure."""
    return _report_condition(cd, observed=observed, kind=RECONCILED_CONDITION, condition=None)


def _report_condition(
    cd: models.ComputeDomain, *, observed: Observed, kind: str, condition: Condition | None
) -> tuple[models.ClusterAction, ...]:
    """Set (with a Warning event) or clear the condition of type `kind`; nothing if it already
    reads so."""
    current = next((c for c in observed.conditions if c.type == kind), None)
    if current is None and condition is None:
        return ()
    if current is not None and condition is not None and (
        (current.status, current.reason, current.message)
        == (condition.status, condition.reason, condition.message)
    ):
        return ()  # the same report; lastTransitionTime is not compared
    actions: list[models.ClusterAction] = []
    if condition is not None:
        actions.append(
            models.EmitEvent(involved=_cd_ref(cd), reason=condition.reason,
                             message=condition.message)
        )
    actions.append(_conditions_patch(cd, observed=observed, kind=kind, condition=condition))
    return tuple(actions)


def _conditions_with(
    conditions: tuple[Condition, ...], *, kind: str, condition: Condition | None
) -> tuple[Condition, ...]:
    """`conditions` with the `kind` entry replaced (as `_conditions_patch` writes them)."""
    current = next((c for c in conditions if c.type == kind), None)
    if current is None and condition is None:
        return conditions
    if current is not None and condition is not None and (
        (current.status, current.reason, current.message)
        == (condition.status, condition.reason, condition.message)
    ):
        return conditions  # unchanged (and not re-sent by `_report_condition`)
    return (*(c for c in conditions if c.type != kind),
            *((condition,) if condition is not None else ()))


def _conditions_patch(
    cd: models.ComputeDomain, *, observed: Observed, kind: str, condition: Condition | None
) -> models.PatchObject:
    """The whole `status.conditions` list with the `kind` entry replaced (a merge patch
    replaces lists): other writers' conditions are kept as observed.

    NB: no resourceVersion: it may follow another patch of the same plan.
    """
    kept = [c for c in observed.conditions if c.type != kind]
    if condition is not None:
        kept.append(condition)
    return models.PatchObject(
        kind=kinds.COMPUTE_DOMAIN.kind,
        namespace=cd.meta.namespace,
        name=cd.meta.name,
        patch={"status": {"conditions": [condition_to_k8s(c) for c in kept] or None}},
        subresource="status",
    )


def _allocation_mode_overridden(cd: models.ComputeDomain, *, config: models.DriverConfig) -> bool:
    """True when this plan must report that host-managed mode turned `All` into `Single`."""
    admitted_as = objects.channel_allocation_mode(cd, config=config)
    return (
        config.host_managed
        and cd.spec.channel.allocation_mode is not admitted_as
        and ALLOCATION_MODE_OVERRIDDEN_ANNOTATION not in cd.meta.annotations
    )


def _admission_metadata_patch(
    cd: models.ComputeDomain, *, config: models.DriverConfig
) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    if names.COMPUTE_DOMAIN_FINALIZER not in cd.meta.finalizers:
        patch["finalizers"] = [*cd.meta.finalizers, names.COMPUTE_DOMAIN_FINALIZER]
    annotations: dict[str, str | None] = {}
    if not modeswitch.admitted_as(cd):
        annotations[names.ADMITTED_MODE_ANNOTATION] = config.mode.value
        annotations[names.ADMITTED_ISOLATION_ANNOTATION] = config.isolation.value
    if MODE_MISMATCH_REPORTED_ANNOTATION in cd.meta.annotations:
        # The driver is back in the mode that admitted the CD: the old report no longer holds.
        annotations[MODE_MISMATCH_REPORTED_ANNOTATION] = None
    if annotations:
        patch["annotations"] = annotations
    return patch


def _ensure_child(
    meta: models.ObjectMeta | None,
    *,
    cd_uid: str,
    build: Callable[[], dict[str, Any]],
    kind: str,
    check_owner: bool,
) -> tuple[bool, tuple[models.ClusterAction, ...]]:
    """Steps that make one owned child exist; returns (present-and-usable after them, steps)."""
    if meta is None:
        return True, (models.CreateObject(kind=kind, obj=build()),)
    if check_owner and meta.labels.get(names.COMPUTE_DOMAIN_LABEL) != cd_uid:
        # Someone else's object holds the name: never touch it; the CD stays NotReady.
        return False, ()
    if meta.deleting:
        # Deleted behind our back while the CD lives: let it go, re-create it once it is gone.
        if names.COMPUTE_DOMAIN_FINALIZER in meta.finalizers:
            return False, (_remove_finalizer(kind, meta),)
        return False, ()
    if names.COMPUTE_DOMAIN_FINALIZER not in meta.finalizers:
        return True, (
            _patch(
                kind,
                meta,
                {"metadata": {"finalizers": [*meta.finalizers, names.COMPUTE_DOMAIN_FINALIZER]}},
            ),
        )
    return True, ()


def _plan_delete(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> tuple[models.ClusterAction, ...]:
    """Retire every child (delete, then drop our finalizer once it is deleting), then the CD's
    finalizer once nothing is left. Host-managed: the workload RCT only."""
    actions: list[models.ClusterAction] = []
    remaining = 0
    rct_kind = kinds.RESOURCE_CLAIM_TEMPLATE.kind
    workload = observed.workload_rct
    if workload is not None and workload.labels.get(names.COMPUTE_DOMAIN_LABEL) == cd.uid:
        remaining += 1
        actions.extend(_retire(rct_kind, workload))
    if not config.host_managed:
        daemon_side = [(rct_kind, observed.daemon_rct), (kinds.DAEMON_SET.kind, observed.daemonset)]
        for kind, meta in daemon_side:
            if meta is not None:
                remaining += 1
                actions.extend(_retire(kind, meta))
        for node in observed.labelled_nodes:
            remaining += 1
            actions.append(_unlabel_node(node))
        if observed.daemonset is None:
            # NB: only once the daemons are gone, or they would write their cliques back.
            for clique in observed.cliques:
                actions.extend(_retire(kinds.COMPUTE_DOMAIN_CLIQUE.kind, clique.meta))
        remaining += len(observed.cliques)
    if remaining == 0 and names.COMPUTE_DOMAIN_FINALIZER in cd.meta.finalizers:
        actions.append(_remove_finalizer(kinds.COMPUTE_DOMAIN.kind, cd.meta))
    return tuple(actions)


def _plan_mismatch(
    cd: models.ComputeDomain, *, observed: Observed, config: models.DriverConfig
) -> tuple[models.ClusterAction, ...]:
    if cd.meta.deleting:
        # Undo what the admitting mode created, so the user's deletion can finish.
        admitting = (
            models.IMEXMode.HOST_MANAGED
            if cd.meta.annotations.get(names.ADMITTED_MODE_ANNOTATION)
            == models.IMEXMode.HOST_MANAGED.value
            else models.IMEXMode.DRIVER_MANAGED
        )
        return _plan_delete(
            cd, observed=observed, config=dataclasses.replace(config, mode=admitting)
        )
    current = _mode_label(config)
    if cd.meta.annotations.get(MODE_MISMATCH_REPORTED_ANNOTATION) == current:
        return ()
    return (
        models.EmitEvent(
            involved=_cd_ref(cd),
            reason=MODE_MISMATCH_REASON,
            message=mode_mismatch_message(cd, current=current),
        ),
        _patch(
            kinds.COMPUTE_DOMAIN.kind,
            cd.meta,
            {"metadata": {"annotations": {MODE_MISMATCH_REPORTED_ANNOTATION: current}}},
        ),
        _mismatch_condition_patch(
            cd,
            observed=observed,
            condition=Condition(
                type=MODE_MISMATCH_CONDITION,
                status="True",
                reason=MODE_MISMATCH_REASON,
                message=mode_mismatch_message(cd, current=current),
            ),
        ),
    )


def _mismatch_condition_patch(
    cd: models.ComputeDomain, *, observed: Observed, condition: Condition | None
) -> models.PatchObject:
    """Set (or, with None, clear) the status condition that mirrors the mismatch event."""
    return _conditions_patch(
        cd, observed=observed, kind=MODE_MISMATCH_CONDITION, condition=condition
    )


def mode_mismatch_message(cd: models.ComputeDomain, *, current: str) -> str:
    """The event text for a CD admitted under another IMEX mode/isolation."""
    admitted = modeswitch.admitted_as(cd)
    return (
        f"ComputeDomain {cd.meta.namespace}/{cd.meta.name} was admitted under IMEX mode "
        f"{admitted} (mode/isolation) but the driver now runs {current}; the driver leaves it "
        f"untouched and its workloads cannot start. Delete and recreate the ComputeDomain to use "
        f"it under {current}, or set the driver back to {admitted}."
    )


# ---------------------------------------------------------------- action helpers


def _retire(kind: str, meta: models.ObjectMeta) -> tuple[models.ClusterAction, ...]:
    if not meta.deleting:
        return (models.DeleteObject(kind=kind, namespace=meta.namespace, name=meta.name),)
    if names.COMPUTE_DOMAIN_FINALIZER in meta.finalizers:
        return (_remove_finalizer(kind, meta),)
    return ()


def _remove_finalizer(kind: str, meta: models.ObjectMeta) -> models.PatchObject:
    kept = [f for f in meta.finalizers if f != names.COMPUTE_DOMAIN_FINALIZER]
    return _patch(kind, meta, {"metadata": {"finalizers": kept}})


def _unlabel_node(meta: models.ObjectMeta) -> models.PatchObject:
    return _patch(
        kinds.NODE.kind, meta, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}}
    )


def _patch(kind: str, meta: models.ObjectMeta, patch: Mapping[str, Any]) -> models.PatchObject:
    """A metadata merge patch guarded by the observed resourceVersion (409 if it moved on)."""
    return models.PatchObject(
        kind=kind,
        namespace=meta.namespace,
        name=meta.name,
        patch=patch,
        resource_version=meta.resource_version,
    )


def _cd_ref(cd: models.ComputeDomain) -> models.ObjectRef:
    return models.ObjectRef(
        kind=kinds.COMPUTE_DOMAIN.kind,
        name=cd.meta.name,
        namespace=cd.meta.namespace,
        uid=cd.uid,
        api_version=kinds.COMPUTE_DOMAIN.api_version,
    )


def _mode_label(config: models.DriverConfig) -> str:
    return f"{config.mode.value}/{config.isolation.value}"


def _nodes_from_cliques(
    cliques: Iterable[models.ComputeDomainClique],
) -> tuple[models.ComputeDomainNode, ...]:
    by_name: dict[str, models.ComputeDomainNode] = {}
    for clique in cliques:
        for d in clique.daemons:
            by_name[d.node_name] = models.ComputeDomainNode(
                name=d.node_name,
                ip_address=d.ip_address,
                clique_id=d.clique_id,
                index=d.index,
                status=d.status,
            )
    return tuple(sorted(by_name.values(), key=lambda n: n.name))


# ---------------------------------------------------------------- tolerant JSON readers

def _decodable_cliques(raw: Iterable[Mapping[str, Any]]) -> Iterator[models.ComputeDomainClique]:
    """Cliques that decode; observation must never raise, so a malformed one counts as absent
    (its daemons are not Ready) until the daemon that owns it writes it again."""
    for obj in raw:
        try:
            yield decoding.compute_domain_clique_from_k8s(obj)
        except errors.DecodeError:
            continue


def _observed_meta(obj: Mapping[str, Any]) -> models.ObjectMeta:
    # NB: tolerant, as these objects are only observed: a malformed one someone else wrote
    # must not stop the reconcile of the CD it sits next to.
    return decoding.object_meta_from_k8s(obj, strict=False)


def _raw_meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
