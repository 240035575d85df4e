"""Level-triggered reconcile loop: list what exists, plan per ComputeDomain, apply.

Planning is `core.controlling` (pure, idempotent); this module gathers observations,
applies the actions through the cluster port and keeps the loop alive on errors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapters.kube import retrying
from apps.controller import metrics as controller_metrics
from core import controlling, decoding, errors, executing, kinds, models, names, ports

log = logging.getLogger(__name__)

# What the planner observes. Daemon-side kinds are watched in host-managed mode too, so a CD
# admitted under driver-managed mode can still be cleaned up after a switch (the chart grants
# the clean-up rights in both modes).
RELATED_KINDS = (
    kinds.RESOURCE_CLAIM_TEMPLATE.kind,
    kinds.DAEMON_SET.kind,
    kinds.NODE.kind,
    kinds.COMPUTE_DOMAIN_CLIQUE.kind,
)

# Kinds the driver keeps in its own namespace only: listed and watched there (`observe` only
# looks there), so the controller needs no cluster-wide rights on them.
DRIVER_NAMESPACE_KINDS = frozenset({kinds.DAEMON_SET.kind, kinds.COMPUTE_DOMAIN_CLIQUE.kind})

# Backoff after a failed pass (a 403 or 422 persists until someone fixes RBAC or the object):
# capped and reset by the next successful pass, so a broken cluster is not listed 20 times a
# second.
FAILED_PASS_BACKOFF = retrying.bounded_backoff(initial_s=0.25, max_s=30.0)


class Reconciler:
    """Reconciles every ComputeDomain; `reconcile_all` is one level-triggered pass."""

    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        config: models.DriverConfig,
        metrics: controller_metrics.ControllerMetrics | None = None,
    ) -> None:
        self._cluster = cluster
        self._config = config
        self._metrics = metrics
        self._dirty = threading.Event()
        self._pass_failed = False
        # uid -> resourceVersion of each undecodable CD already reported by an event.
        self._reported_invalid: dict[str, str] = {}

    @property
    def watched_kinds(self) -> tuple[str, ...]:
        return (kinds.COMPUTE_DOMAIN.kind, *RELATED_KINDS)

    def watch_namespace(self, kind: str) -> str:
        """The namespace `kind` is listed and watched in ("" for all namespaces)."""
        return self._config.namespace if kind in DRIVER_NAMESPACE_KINDS else ""

    def observe_all(
        self,
    ) -> tuple[tuple[Mapping[str, Any], ...], dict[str, Sequence[Mapping[str, Any]]]]:
        domains = self._cluster.list(kinds.COMPUTE_DOMAIN.kind).items
        related: dict[str, Sequence[Mapping[str, Any]]] = {
            kind: self._cluster.list(kind, namespace=self.watch_namespace(kind)).items
            for kind in RELATED_KINDS
        }
        return domains, related

    def reconcile_all(self) -> int:
        """One pass over all ComputeDomains; returns how many actions were applied."""
        raw_domains, related = self.observe_all()
        index = controlling.index_cluster(related)
        applied = 0
        live: set[str] = set()
        for raw in raw_domains:
            applied += self._reconcile_one(raw, index)
            live.add(str(raw.get("metadata", {}).get("uid", "")))
        actions = controlling.plan_stale_node_labels(
            nodes=related.get(kinds.NODE.kind, ()), live_cd_uids=frozenset(live),
            config=self._config,
        )
        applied += self._apply(actions)
        if self._metrics is not None:
            self._metrics.forget_missing(frozenset(live))
        for uid in set(self._reported_invalid) - live:
            del self._reported_invalid[uid]
        return applied

    def _reconcile_one(self, raw: Mapping[str, Any], index: controlling.ClusterIndex) -> int:
        try:
            cd = decoding.compute_domain_from_k8s(raw)
        except errors.DecodeError as exc:
            meta = raw.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            version = str(meta.get("resourceVersion", ""))
            if self._reported_invalid.get(uid) == version:
                return 0  # reported already; a new event only once the CD changes
            self._reported_invalid[uid] = version
            log.error(
                "event=compute_domain_invalid cd=%s/%s error=%r",
                meta.get("namespace"), meta.get("name"), exc.message,
            )
            self._cluster.emit_event(
                involved=models.ObjectRef(
                    kind=kinds.COMPUTE_DOMAIN.kind,
                    name=str(meta.get("name", "")),
                    namespace=str(meta.get("namespace", "")),
                    uid=str(meta.get("uid", "")),
                    api_version=kinds.COMPUTE_DOMAIN.api_version,
                ),
                reason="InvalidComputeDomain",
                message=f"the driver cannot use this ComputeDomain: {exc.message}",
            )
            return 0
        observed = controlling.observe(cd, objects=index, config=self._config)
        actions = controlling.plan_compute_domain(cd, observed=observed, config=self._config)
        applied = self._apply(actions)
        if self._metrics is not None and not cd.meta.deleting:
            self._metrics.record_domain(cd, config=self._config)
        if actions:
            log.info(
                "event=compute_domain_reconciled cd=%s/%s uid=%s actions=%s",
                cd.meta.namespace, cd.meta.name, cd.meta.uid,
                ",".join(_describe(a) for a in actions),
            )
        return applied

    def _apply(self, actions: Iterable[models.ClusterAction]) -> int:
        batch = tuple(actions)
        if not batch:
            return 0
        try:
            executing.execute_cluster_actions(self._cluster, batch)
        except errors.ClusterError as exc:
            # Stale observation (conflict) or a racing delete: the next pass re-plans afresh.
            log.info("event=reconcile_retry reason=%r", exc.message)
            self._pass_failed = True
            return 0
        if self._metrics is not None:
            for action in batch:
                self._metrics.count_action(action)
        return len(batch)

    def mark_dirty(self) -> None:
        self._dirty.set()

    def run(
        self,
        stop: threading.Event,
        *,
        resync_s: float = 30.0,
        min_interval_s: float = 0.5,
        backoff: retrying.Wait = FAILED_PASS_BACKOFF,
    ) -> None:
        """Reconcile on every change signal (`mark_dirty`) and at least every `resync_s`.

        Passes are at least `min_interval_s` apart. A failed pass (API error, or an action
        that failed) is retried after a capped exponential `backoff`, reset by a successful
        pass. NB: whoever sets `stop` must also call `mark_dirty()`, or the loop sleeps on
        until the next change or resync.
        """
        failures = 0
        while not stop.is_set():
            self._dirty.clear()
            self._pass_failed = False
            try:
                self.reconcile_all()
            except errors.ClusterError as exc:
                log.warning("event=reconcile_failed reason=%r", exc.message)
                self._pass_failed = True
            if self._pass_failed:
                failures += 1
                delay = retrying.backoff_delay(backoff, attempt=failures)
                log.info("event=reconcile_backoff attempt=%d delay_s=%.2f", failures, delay)
                stop.wait(delay)
                continue
            failures = 0
            self._dirty.wait(timeout=resync_s)
            stop.wait(min_interval_s)


def _describe(action: models.ClusterAction) -> str:
    match action:
        case models.CreateObject(kind=kind, obj=obj):
            return f"create:{kind}/{obj.get('metadata', {}).get('name', '')}"
        case models.PatchObject(kind=kind, name=name, subresource=sub):
            return f"patch:{kind}/{name}{'/' + sub if sub else ''}"
        case models.DeleteObject(kind=kind, name=name):
            return f"delete:{kind}/{name}"
        case models.EmitEvent(reason=reason):
            return f"event:{reason}"


def watch_changes(
    cluster: ports.Cluster, reconciler: Reconciler, stop: threading.Event
) -> list[threading.Thread]:
    """One informer thread per watched kind; every relevant event marks the reconciler dirty.

    Node events count only when a node comes, goes or changes its computeDomain label: the
    kubelet updates every node's status every few seconds, and none of that is planned on.
    """
    threads = []
    for kind in reconciler.watched_kinds:

        def follow(kind: str = kind) -> None:
            relevant = NodeLabelFilter() if kind == kinds.NODE.kind else None
            for event in retrying.list_then_watch(
                cluster, kind, namespace=reconciler.watch_namespace(kind), stop=stop, timeout_s=5
            ):
                if relevant is None or relevant.changed(event):
                    reconciler.mark_dirty()

        thread = threading.Thread(target=follow, name=f"informer-{kind}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads


class NodeLabelFilter:
    """Tells Node informer events that matter to the planner from status-only updates."""

    def __init__(self) -> None:
        self._labels: dict[str, str | None] = {}

    def changed(self, event: retrying.InformerEvent) -> bool:
        """True on a relist, an added or deleted node, or a changed computeDomain label."""
        if isinstance(event, retrying.Relist):
            self._labels = {}
            return True
        meta = event.obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        label = (meta.get("labels") or {}).get(names.COMPUTE_DOMAIN_LABEL)
        if event.type is ports.WatchEventType.DELETED:
            self._labels.pop(name, None)
            return True
        known = name in self._labels
        previous = self._labels.get(name)
        self._labels[name] = label
        return not known or event.type is ports.WatchEventType.ADDED or previous != label
