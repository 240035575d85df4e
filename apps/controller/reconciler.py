"""Reconciling one ComputeDomain: observe, plan (pure, `computedomain.controlling`), apply, report.

`Reconciler.sync_domain` is what a work-queue worker runs for one CD key (see
`apps.controller.running`, the one controller loop: the binary and the embedded demo run it).
A failure of one CD is reported on that CD (a Warning event and a `Reconciled=False`
condition, once per distinct failure) and raised to the caller, which retries that key alone
with backoff.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from apps.controller import caches, channel_allocator
from apps.controller import metrics as controller_metrics
from core import decoding, errors, executing, kinds, models, ports
from core.computedomain import channels, controlling

log = logging.getLogger(__name__)

Observe = Callable[[models.ComputeDomain, Mapping[str, Any]], controlling.Observed]


class Reconciler:
    """Plans and applies what each ComputeDomain needs; reports what cannot be done."""

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
        # uid -> resourceVersion of each undecodable CD already reported by an event.
        self._reported_invalid: dict[str, str] = {}
        # Channel isolation: the table from fresh lists, until a Controller points it at its
        # caches (every Controller does: lists are only the safe default of a bare Reconciler).
        self.channels = channel_allocator.ChannelAllocator(
            max_channels=config.max_channels, snapshot=self._listed_channels
        )

    @property
    def cluster(self) -> ports.Cluster:
        return self._cluster

    @property
    def config(self) -> models.DriverConfig:
        return self._config

    @property
    def metrics(self) -> controller_metrics.ControllerMetrics | None:
        return self._metrics

    # ------------------------------------------------------------ one ComputeDomain

    def sync_domain(
        self, raw: Mapping[str, Any], *, observe: Observe, writer: ports.Cluster | None = None,
    ) -> int:
        """Reconcile one CD (raw JSON as cached or listed); returns the actions applied.

        `writer` is the cluster the actions are applied through (default: the cluster itself;
        the controller passes one that reports writes back to its caches). Raises ClusterError
        when an action failed: a conflict or a vanished object (a stale observation) as is,
        anything else after reporting it on the CD.
        """
        try:
            cd, ignored = decoding.compute_domain_tolerantly(raw)
        except errors.DecodeError as exc:
            self._report_invalid(raw, exc)
            return 0
        observed = dataclasses.replace(observe(cd, raw), ignored=ignored)
        if (self._config.channel_isolation and not cd.meta.deleting
                and not controlling.is_mode_mismatch(cd, config=self._config,
                                                     observed=observed)):
            standing, _ = channels.duplicate_standing(
                domain_uid=cd.uid, channel_id=cd.status.channel_id if cd.status else None,
                rivals=observed.channel_rivals)
            channel, refusal = self.channels.channel_for(
                cd, reassign=standing is channels.Standing.REASSIGN)
            observed = dataclasses.replace(observed, channel_id=channel, channel_refusal=refusal)
        actions = controlling.plan_compute_domain(cd, observed=observed, config=self._config)
        try:
            applied = self._apply(actions, writer=writer)
        except (errors.ConflictError, errors.NotFoundError) as exc:
            log.debug("event=reconcile_retry cd=%s/%s reason=%r",
                      cd.meta.namespace, cd.meta.name, exc.message)
            raise
        except errors.ClusterError as exc:
            self._report_failure(cd, observed=observed, exc=exc, writer=writer)
            raise
        if actions:
            log.info(
                "event=compute_domain_reconciled cd=%s/%s uid=%s actions=%s",
                cd.meta.namespace, cd.meta.name, cd.meta.uid,
                ",".join(_describe(a) for a in actions),
            )
        if any(isinstance(a, models.EmitEvent) and a.reason == controlling.ADOPTED_REASON
               for a in actions):
            daemonset = any(isinstance(a, models.PatchObject) and a.kind == kinds.DAEMON_SET.kind
                            and "spec" in a.patch for a in actions)
            log.info(
                "event=compute_domain_adopted cd=%s/%s uid=%s mode=%s isolation=%s "
                "daemonset=%s",
                cd.meta.namespace, cd.meta.name, cd.meta.uid, self._config.mode.value,
                self._config.isolation.value, "taken_over" if daemonset else "unchanged",
            )
        recovered = controlling.plan_reconcile_recovered(cd, observed=observed)
        if recovered:
            applied += self._apply(recovered, writer=writer)
            log.info("event=compute_domain_recovered cd=%s/%s uid=%s",
                     cd.meta.namespace, cd.meta.name, cd.meta.uid)
        if self._metrics is not None and not cd.meta.deleting:
            self._metrics.record_domain(cd, config=self._config)
        return applied

    def forget_domain(self, uid: str) -> None:
        """The CD is gone: drop what was remembered about it (metrics series, reports)."""
        self._reported_invalid.pop(uid, None)
        self.channels.forget(uid)
        if self._metrics is not None:
            self._metrics.forget(uid)

    def sync_stale_node_labels(
        self, *, nodes: Sequence[Mapping[str, Any]], live_cd_uids: frozenset[str]
    ) -> int:
        """Remove computeDomain labels naming CDs that are gone (see plan_stale_node_labels)."""
        actions = controlling.plan_stale_node_labels(
            nodes=nodes, live_cd_uids=live_cd_uids, config=self._config
        )
        return self._apply(actions)

    def _listed_channels(self, _uid: str, max_channels: int) -> channels.ChannelTable:
        """The channel table from fresh lists (a Reconciler outside a Controller)."""
        domains = self._cluster.list(kinds.COMPUTE_DOMAIN.kind).items
        held = [channels.domain_channel_from_k8s(o) for o in domains]
        claims = [c for o in self._cluster.list(kinds.RESOURCE_CLAIM.kind).items
                  for c in channels.claim_channels_from_k8s(o)]
        return channels.build_table(domains=held, claims=claims, max_channels=max_channels)

    # ------------------------------------------------------------ reporting

    def _report_invalid(self, raw: Mapping[str, Any], exc: errors.DecodeError) -> None:
        meta = raw.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        version = str(meta.get("resourceVersion", ""))
        if self._reported_invalid.get(uid) == version:
            return  # reported already; a new event only once the CD changes
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
                uid=uid,
                api_version=kinds.COMPUTE_DOMAIN.api_version,
            ),
            reason="InvalidComputeDomain",
            message=f"the driver cannot use this ComputeDomain: {exc.message}",
        )

    def _report_failure(
        self, cd: models.ComputeDomain, *, observed: controlling.Observed,
        exc: errors.ClusterError, writer: ports.Cluster | None = None,
    ) -> None:
        """Report the failure on the CD through `writer`, so the caches see the condition
        written and the next retry's plan (which skips a condition already set) sends
        neither the patch nor the event again."""
        status = getattr(exc, "status", 0)
        actions = controlling.plan_reconcile_failure(
            cd, observed=observed, cause=exc.message,
            http_status=status if isinstance(status, int) else 0,
        )
        log.warning(
            "event=compute_domain_reconcile_failed cd=%s/%s uid=%s reason=%r",
            cd.meta.namespace, cd.meta.name, cd.meta.uid, exc.message,
        )
        try:
            executing.execute_cluster_actions(writer or self._cluster, actions)
        except errors.ClusterError as report_exc:
            log.warning("event=failure_report_failed cd=%s/%s reason=%r",
                        cd.meta.namespace, cd.meta.name, report_exc.message)

    def _apply(
        self, actions: Iterable[models.ClusterAction], *, writer: ports.Cluster | None = None
    ) -> int:
        batch = tuple(actions)
        if not batch:
            return 0
        executing.execute_cluster_actions(writer or self._cluster, batch)
        if self._metrics is not None:
            for action in batch:
                self._metrics.count_action(action)
        return len(batch)


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


def node_label_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """True when a Node event matters to the planner: it came or went with a computeDomain
    label, or that label changed. The kubelet's status updates every few seconds do not."""
    return (caches.owner_uid(old) if old is not None else "") != (
        caches.owner_uid(new) if new is not None else "")
