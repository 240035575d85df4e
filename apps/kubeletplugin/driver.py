"""The ComputeDomain half's device logic on the shared claim driver (`apps.pluginkit`).

`PluginDriver` plans with `computedomain.preparing`: it reads the claim's ComputeDomains and the
node's labels before the lock, probes the host IMEX daemon before a CDI spec is written,
releases the driver-managed node label with a domain's last claim, and reports claims left
from the other IMEX mode at start-up.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from apps.kubeletplugin import domains as plugin_domains
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit.driver import (
    ClaimDriver,
    Clock,
    PluginPorts,
    api_unavailable,
)
from core import decoding, errors, kinds, models, names
from core.computedomain import checkpoint_records as records
from core.computedomain import preparing, recovery

log = logging.getLogger(__name__)

# The ComputeDomains a prepare may look up, by UID (a cache view, or a fresh list).
DomainsView = Callable[[], Mapping[names.ComputeDomainUID, models.ComputeDomain]]
# Returns None when the host IMEX daemon is ready, else the error to report.
HostIMEXProbe = Callable[[], errors.RetryableError | None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Observed:
    """What a prepare read from the API server before taking the node lock."""

    domains: Mapping[names.ComputeDomainUID, models.ComputeDomain]
    node_labels: Mapping[str, str]


class PluginDriver(ClaimDriver[records.ComputeDomainClaimRecord]):
    """Prepares and unprepares ComputeDomain claims on one node."""

    _unreadable_spec_action = "holding_every_channel"

    def __init__(
        self,
        *,
        ports: PluginPorts,
        node: models.NodeFacts,
        config: models.DriverConfig,
        clock: Clock = time.time,
        metrics: plugin_metrics.PluginMetrics | None = None,
        host_imex_probe: HostIMEXProbe | None = None,
        retry_budget_s: float = 30.0,
        domains: DomainsView | None = None,
    ) -> None:
        super().__init__(
            ports=ports, codec=records.CODEC, node=node, clock=clock, metrics=metrics,
            retry_budget_s=retry_budget_s,
        )
        self._config = config
        self._host_imex_probe = host_imex_probe
        self._domains = domains or (lambda: plugin_domains.list_domains(ports.cluster))

    # ------------------------------------------------------------ device logic

    def _empty_checkpoint(self) -> records.Checkpoint:
        return records.empty(boot_id=self._node.boot_id)

    def _rebuild(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        unreadable: tuple[names.ClaimUID, ...],
    ) -> records.Checkpoint:
        return recovery.rebuild_from_cdi(
            boot_id=self._node.boot_id, config=self._config, claim_specs=specs,
            now=self._clock(), unreadable=unreadable,
        )

    def _after_recover(self, current: records.Checkpoint) -> None:
        self._report_other_mode_claims(current)

    def _observe(self, claim: models.ResourceClaim) -> _Observed:
        return _Observed(
            domains=self._resolved_domains(claim), node_labels=self._fetch_node_labels()
        )

    def _plan_prepare(
        self, claim: models.ResourceClaim, *, checkpoint: records.Checkpoint, observed: object
    ) -> records.ClaimOutcome:
        assert isinstance(observed, _Observed)
        return preparing.plan_prepare(
            claim,
            checkpoint=checkpoint,
            node=self._node,
            config=self._config,
            domains=observed.domains,
            node_labels=observed.node_labels,
            now=self._clock(),
        )

    def _check_before_steps(self, outcome: object) -> None:
        steps: tuple[object, ...] = getattr(outcome, "steps", ())
        if self._host_imex_probe is not None and any(
            isinstance(step, models.WriteCDISpec) for step in steps
        ):
            not_ready = self._host_imex_probe()
            if not_ready is not None:
                raise not_ready

    def _api_steps_doing(self) -> str:
        return f"labelling node {self._node.node_name}"  # the driver-managed node label

    def _plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: records.Checkpoint
    ) -> records.ClaimOutcome:
        return preparing.plan_unprepare(ref, checkpoint=checkpoint, now=self._clock())

    def _after_unprepare(
        self, entry: records.Entry, *, after: records.Checkpoint
    ) -> None:
        if entry.record.mode is models.IMEXMode.DRIVER_MANAGED and entry.record.channel_ids:
            self._release_node_label(entry, after=after)

    def _plan_restore_spec(self, entry: records.Entry) -> models.WriteCDISpec | None:
        return preparing.plan_restore_spec(entry, node=self._node)

    def _freed_by(self, entry: records.Entry) -> str:
        channels = ",".join(str(c) for c in entry.record.channel_ids[:8])
        if len(entry.record.channel_ids) > 8:
            channels += f",... ({len(entry.record.channel_ids)} in all)"
        return f"IMEX channel(s) {channels or 'none'} on this node are free again"

    def _report_other_mode_claims(self, current: records.Checkpoint) -> None:
        stale = preparing.claims_under_other_mode(current, config=self._config)
        if not stale:
            return
        message = preparing.mode_switch_message(stale, config=self._config, node=self._node)
        log.warning(
            "event=claims_prepared_under_other_mode node=%s claims=%d mode=%s/%s",
            self._node.node_name, len(stale), self._config.mode.value,
            self._config.isolation.value,
        )
        self._emit_node_event("ClaimsPreparedUnderOtherMode", message)

    def _release_node_label(
        self, entry: records.Entry, *, after: records.Checkpoint
    ) -> None:
        """Unpin the node from the entry's ComputeDomain if that was its last claim here.

        Best effort: the unprepare is done either way; a label left behind (API down, a
        conflicting change) is the controller's stale-label clean-up's to remove.
        """
        try:
            labels, resource_version = self._read_node()
            patch = preparing.plan_label_release(
                entry, after=after, node=self._node,
                node_labels=labels, resource_version=resource_version,
            )
            if patch is None:
                return
            self._execute((patch,))
        except errors.ClusterError as exc:
            log.warning(
                "event=node_label_release_failed node=%s domain=%s error=%r",
                self._node.node_name, entry.record.domain_id, str(exc),
            )
            return
        log.info(
            "event=node_label_released node=%s domain=%s", self._node.node_name,
            entry.record.domain_id,
        )

    # ------------------------------------------------------------ observations

    def _resolved_domains(
        self, claim: models.ResourceClaim
    ) -> Mapping[names.ComputeDomainUID, models.ComputeDomain]:
        """The ComputeDomains view, with the claim's own domains already looked up.

        Looking them up here makes a read-through view do its one fresh list now, outside
        the node-wide lock, instead of inside the planner. A config that does not decode is
        skipped: the planner reports it.
        """
        try:
            domains = self._domains()
            for domain_id in _claim_domain_ids(claim):
                domains.get(domain_id)
        except errors.ClusterError as exc:
            raise api_unavailable("listing ComputeDomains", exc) from exc
        return domains

    def _fetch_node_labels(self) -> Mapping[str, str]:
        if self._config.host_managed:
            return {}  # host-managed never labels nodes
        try:
            labels, _ = self._read_node()
        except errors.NotFoundError:
            return {}
        except errors.ClusterError as exc:
            raise api_unavailable(f"reading Node {self._node.node_name}", exc) from exc
        return labels

    def _read_node(self) -> tuple[dict[str, str], str]:
        """This node's labels and resourceVersion; raises ClusterError (NotFoundError if gone)."""
        node = self._ports.cluster.get(kinds.NODE.kind, namespace="", name=self._node.node_name)
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        return (
            dict(labels) if isinstance(labels, Mapping) else {},
            str(meta.get("resourceVersion") or ""),
        )


def _claim_domain_ids(claim: models.ResourceClaim) -> tuple[names.ComputeDomainUID, ...]:
    found: set[str] = set()
    for result in claim.results:
        if result.driver != names.DRIVER_NAME:
            continue
        try:
            cfg = decoding.config_for_request(claim, request=result.request)
        except errors.DecodeError:
            continue
        if isinstance(cfg, models.ChannelConfig | models.DaemonConfig):
            found.add(cfg.domain_id)
    return tuple(names.ComputeDomainUID(uid) for uid in sorted(found))
