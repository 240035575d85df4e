"""Sets the binding conditions of claims allocated this node's channel (gate
ComputeDomainBindingConditions, driver-managed; `core.computedomain.binding` decides).

Two threads: one follows ResourceClaims (list+watch) and keeps those holding this node's
channel device; one works whenever a claim or a ComputeDomain changes (and every second while
a claim waits, for the timeout): it labels the node for a waiting claim's ComputeDomain (what
a prepare did before), sets the ready condition once the domain's status lists this node
Ready, or the failure condition, and unpins the node from a domain whose claims all left
before a pod was bound here. Every write is retried at the next round when it fails.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping

from adapters.kube import retrying
from apps.kubeletplugin import domains as plugin_domains
from core import errors, executing, kinds, names, ports
from core.computedomain import binding

log = logging.getLogger(__name__)

# How often a round runs while some claim waits (its timeout is checked then).
_TICK_S = 1.0
# With nothing waiting: how often the worker still wakes (to notice `stop`).
_IDLE_S = 5.0


def _rfc3339(epoch_s: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(epoch_s), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class BindingWatch:
    """Serves the binding conditions of this node's channel claims (`start`)."""

    def __init__(
        self,
        cluster: ports.Cluster,
        *,
        node_name: str,
        domains: plugin_domains.DomainCache,
        timeout_s: float = binding.DEFAULT_READY_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster = cluster
        self._node = node_name
        self._domains = domains
        self._timeout_s = timeout_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._cond = threading.Condition()
        self._claims: dict[names.ClaimUID, binding.ChannelClaim] = {}
        self._dirty = False
        # When each (claim, allocation) was first seen waiting: a new allocation waits anew.
        self._since: dict[tuple[names.ClaimUID, str], float] = {}
        # The ComputeDomains this watch labelled the node for (released when their claims go).
        self._labelled: set[str] = set()
        domains.listeners.append(self.changed)

    def start(self, stop: threading.Event) -> None:
        """Follow claims and work in two daemon threads until `stop` is set."""
        log.info("event=binding_conditions_served node=%s ready_timeout_s=%g conditions=%s,%s",
                 self._node, self._timeout_s, binding.IMEX_DAEMON_READY,
                 binding.IMEX_DAEMON_FAILED)
        for target, name in ((self._follow, "informer-ResourceClaim"),
                             (self._work, "binding-conditions")):
            threading.Thread(target=target, args=(stop,), name=name, daemon=True).start()

    def changed(self) -> None:
        """Something a decision reads changed: run a round now."""
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    # ------------------------------------------------------------ following claims

    def _follow(self, stop: threading.Event) -> None:
        kind = kinds.RESOURCE_CLAIM.kind
        for event in retrying.list_then_watch(self._cluster, kind, stop=stop, timeout_s=60):
            with self._cond:
                if isinstance(event, retrying.Relist):
                    self._claims = {}
                    changed = True
                else:
                    changed = self._observe(event)
                if changed:
                    self._dirty = True
                    self._cond.notify_all()

    def _observe(self, event: ports.WatchEvent) -> bool:
        """Keep the claim if it holds this node's channel; whether that set changed."""
        meta = event.obj.get("metadata") or {}
        uid = names.ClaimUID(str(meta.get("uid") or ""))
        found = binding.channel_claim_from_k8s(event.obj, pool=self._node)
        if event.type is ports.WatchEventType.DELETED or found is None:
            return self._claims.pop(uid, None) is not None
        before = self._claims.get(uid)
        self._claims[uid] = found
        return before != found

    # ------------------------------------------------------------ working

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._cond:
                waiting = any(c.waiting for c in self._claims.values())
                # NB: idle, it still wakes now and then to notice `stop`.
                self._cond.wait_for(lambda: self._dirty or stop.is_set(),
                                    timeout=_TICK_S if waiting else _IDLE_S)
                self._dirty = False
                claims = tuple(self._claims.values())
            try:
                self.run_round(claims)
            except Exception:  # never let the worker die: the next round tries again
                log.exception("event=binding_round_failed node=%s", self._node)

    def run_round(self, claims: tuple[binding.ChannelClaim, ...]) -> None:
        """One pass over the claims holding this node's channel (public for tests)."""
        waiting = [c for c in claims if c.waiting]
        live = {(c.ref.uid, c.allocated_at) for c in waiting}
        self._since = {key: t for key, t in self._since.items() if key in live}
        held = {c.domain_id for c in claims}
        # NB: the node is read only when some claim waits or a labelled domain lost its
        # claims: not while workloads simply run.
        if not waiting and self._labelled <= held:
            return
        labels: Mapping[str, str]
        labels, resource_version = self._read_node()
        for domain_id in sorted(self._labelled - held):
            self._release(domain_id, labels=labels, resource_version=resource_version,
                          claims=claims)
        if not waiting:
            return
        domains = self._domains.view()
        now = self._clock()
        for claim in sorted(waiting, key=lambda c: c.ref.uid):
            since = self._since.setdefault((claim.ref.uid, claim.allocated_at), now)
            try:
                domain = domains.get(names.ComputeDomainUID(claim.domain_id))
            except errors.ClusterError as exc:
                log.warning("event=binding_domain_read_failed node=%s error=%r",
                            self._node, str(exc))
                return
            if labels.get(names.COMPUTE_DOMAIN_LABEL) == claim.domain_id:
                # NB: also a label set before a restart of this plugin: it is this watch's to
                # release if the domain's claims all leave before a pod is bound here.
                self._labelled.add(claim.domain_id)
            step = binding.plan_binding(
                claim, node_name=self._node, node_labels=labels, domain=domain,
                waited_s=now - since, timeout_s=self._timeout_s,
            )
            labels = self._apply(claim, step, labels=labels)

    def _apply(
        self, claim: binding.ChannelClaim, step: binding.BindingStep,
        *, labels: Mapping[str, str],
    ) -> Mapping[str, str]:
        """Run `step`; the node's labels after it."""
        match step:
            case binding.Wait():
                return labels
            case binding.LabelNode(patch=patch):
                try:
                    executing.execute_cluster_actions(self._cluster, (patch,))
                except errors.ClusterError as exc:
                    log.warning("event=node_label_failed node=%s domain=%s error=%r",
                                self._node, claim.domain_id, str(exc))
                    self.changed()
                    return labels
                self._labelled.add(claim.domain_id)
                log.info("event=node_labelled node=%s domain=%s claim=%s/%s "
                         "reason=binding_conditions", self._node, claim.domain_id,
                         claim.ref.namespace, claim.ref.name)
                return {**labels, names.COMPUTE_DOMAIN_LABEL: claim.domain_id}
            case binding.SetCondition():
                self._set_condition(claim, step)
                return labels

    def _set_condition(self, claim: binding.ChannelClaim, step: binding.SetCondition) -> None:
        ref = claim.ref
        try:
            found = self._cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace,
                                      name=ref.name)
            meta = found.get("metadata") or {}
            if meta.get("uid") != ref.uid:
                return  # gone, or another claim of that name now
            devices = binding.with_condition(
                (found.get("status") or {}).get("devices") or [], claim=claim, step=step,
                now=_rfc3339(self._wall_clock()),
            )
            if devices is None:
                return
            self._cluster.patch(
                kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name,
                patch={"status": {"devices": devices}}, subresource="status",
                resource_version=str(meta.get("resourceVersion") or ""),
            )
        except errors.NotFoundError:
            return
        except errors.ClusterError as exc:
            log.warning("event=binding_condition_failed node=%s claim=%s/%s condition=%s "
                        "error=%r retry=next_round", self._node, ref.namespace, ref.name,
                        step.type, str(exc))
            self.changed()
            return
        level = logging.INFO if step.type == binding.IMEX_DAEMON_READY else logging.WARNING
        log.log(level, "event=binding_condition_set node=%s claim=%s/%s uid=%s condition=%s "
                "reason=%s message=%r", self._node, ref.namespace, ref.name, ref.uid,
                step.type, step.reason, step.message)

    def _release(
        self, domain_id: str, *, labels: Mapping[str, str], resource_version: str,
        claims: tuple[binding.ChannelClaim, ...],
    ) -> None:
        if labels.get(names.COMPUTE_DOMAIN_LABEL) != domain_id:
            self._labelled.discard(domain_id)  # released by an unprepare, or never set
            return
        patch = binding.plan_label_release(
            domain_id, node_name=self._node, node_labels=labels,
            resource_version=resource_version, claims=claims,
        )
        if patch is None:
            return
        try:
            executing.execute_cluster_actions(self._cluster, (patch,))
        except errors.ClusterError as exc:
            log.warning("event=node_label_release_failed node=%s domain=%s error=%r",
                        self._node, domain_id, str(exc))
            return
        self._labelled.discard(domain_id)
        log.info("event=node_label_released node=%s domain=%s reason=claims_left_unbound",
                 self._node, domain_id)

    def _read_node(self) -> tuple[dict[str, str], str]:
        try:
            node = self._cluster.get(kinds.NODE.kind, namespace="", name=self._node)
        except errors.NotFoundError:
            return {}, ""
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        return dict(labels), str(meta.get("resourceVersion") or "")
