"""The ComputeDomain half's device logic, plugged into the shared claim driver (`apps.pluginkit`).

`ComputeDomainHalf` plans with `computedomain.preparing`: it reads the claim's ComputeDomains
and the node's labels before the lock, probes the host IMEX daemon before a CDI spec is
written, releases the driver-managed node label with a domain's last claim, and reports claims
left from the other IMEX mode at start-up. It has no device actions of its own (its steps are
all shared plugin steps), so its action type is `Never`. `new_driver` builds the claim driver
with it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Never

from apps.kubeletplugin import domains as plugin_domains
from apps.pluginkit import claim_half, claim_reads, node_events
from apps.pluginkit import driver as claim_driver
from apps.pluginkit import metrics as plugin_metrics
from core import (
    decoding,
    device_status,
    errors,
    executing,
    kinds,
    models,
    names,
    ports,
    upstream_checkpoint,
)
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import device_status as cd_device_status
from core.computedomain import node_facts, preparing, recovery
from core.computedomain import upstream_import as cd_upstream_import

log = logging.getLogger(__name__)

# The ComputeDomains a prepare may look up, by UID (a cache view, or a fresh list).
DomainsView = Callable[[], Mapping[names.ComputeDomainUID, models.ComputeDomain]]
# Returns None when the host IMEX daemon is ready, else the error to report.
HostIMEXProbe = Callable[[], errors.RetryableError | None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observed:
    """What a prepare read from the API server before taking the node lock."""

    domains: Mapping[names.ComputeDomainUID, models.ComputeDomain]
    node_labels: Mapping[str, str]


# The claim driver of ComputeDomain claims.
PluginDriver = claim_driver.ClaimDriver[
    cd_records.ComputeDomainClaimRecord, node_facts.ImexNodeFacts, Observed, Never
]


def new_driver(
    *,
    ports: claim_driver.PluginPorts,
    node: node_facts.ImexNodeFacts,
    config: models.DriverConfig,
    clock: claim_driver.Clock = time.time,
    metrics: plugin_metrics.PluginMetrics | None = None,
    host_imex_probe: HostIMEXProbe | None = None,
    retry_budget_s: float = 30.0,
    claim_status: bool = False,
    domains: DomainsView | None = None,
) -> PluginDriver:
    """The claim driver that prepares and unprepares ComputeDomain claims on one node."""
    half = ComputeDomainHalf(
        cluster=ports.cluster, config=config, host_imex_probe=host_imex_probe,
        domains=domains or (lambda: plugin_domains.list_domains(ports.cluster)),
    )
    return claim_driver.ClaimDriver(
        half=half, ports=ports, node=node, clock=clock, metrics=metrics,
        retry_budget_s=retry_budget_s,
        driver_name=names.DRIVER_NAME if claim_status else "",
    )


class ComputeDomainHalf:
    """`claim_half.ClaimHalf[ComputeDomainClaimRecord, Observed, Never]` for
    `compute-domain.nvidia.com` claims."""

    # A spec that cannot be read may have held any channel: its rebuilt entry holds them all.
    unreadable_spec_action = "holding_every_channel"
    codec = cd_records.CODEC

    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        config: models.DriverConfig,
        host_imex_probe: HostIMEXProbe | None,
        domains: DomainsView,
    ) -> None:
        self._cluster = cluster
        self._config = config
        self._host_imex_probe = host_imex_probe
        self._domains = domains

    # ------------------------------------------------------------ its checkpoint

    def empty_checkpoint(self, *, boot_id: str) -> cd_records.Checkpoint:
        """A checkpoint with no claim."""
        return cd_records.empty(boot_id=boot_id)

    def rebuild_from_cdi(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        *,
        unreadable: tuple[names.ClaimUID, ...],
        boot_id: str,
        now: float,
    ) -> cd_records.Checkpoint:
        """The channels each spec names; an unreadable spec's claim holds every channel."""
        return recovery.rebuild_from_cdi(
            boot_id=boot_id, config=self._config, claim_specs=specs, now=now,
            unreadable=unreadable,
        )

    def adopt_upstream(
        self, upstream: upstream_checkpoint.UpstreamCheckpoint, *, boot_id: str, now: float
    ) -> upstream_checkpoint.Adoption[cd_records.ComputeDomainClaimRecord]:
        """Upstream's claims, counted as prepared under this plugin's IMEX mode."""
        return cd_upstream_import.adopt(
            upstream, mode=self._config.mode, isolation=self._config.isolation,
            boot_id=boot_id, now=now,
        )

    def plan_restore_spec(
        self, entry: cd_records.Entry, *, node: node_facts.ImexNodeFacts
    ) -> models.WriteCDISpec | None:
        """A channel claim's spec, rebuilt from its entry (a daemon claim's cannot be)."""
        return preparing.plan_restore_spec(entry, node=node)

    def freed_by(self, entry: cd_records.Entry) -> str:
        """The IMEX channels the entry held (the first eight)."""
        channels = ",".join(str(c) for c in entry.record.channel_ids[:8])
        if len(entry.record.channel_ids) > 8:
            channels += f",... ({len(entry.record.channel_ids)} in all)"
        return f"IMEX channel(s) {channels or 'none'} on this node are free again"

    # ------------------------------------------------------------ planning a claim

    def observe(self, claim: models.ResourceClaim, *, node: node_facts.ImexNodeFacts) -> Observed:
        """The claim's ComputeDomains and this node's labels."""
        return Observed(
            domains=self._resolved_domains(claim), node_labels=self._fetch_node_labels(node)
        )

    def plan_prepare(
        self,
        claim: models.ResourceClaim,
        *,
        checkpoint: cd_records.Checkpoint,
        observed: Observed,
        node: node_facts.ImexNodeFacts,
        now: float,
    ) -> cd_records.ClaimOutcome:
        """Plan with the configured IMEX mode and what `observe` read."""
        return preparing.plan_prepare(
            claim,
            checkpoint=checkpoint,
            node=node,
            config=self._config,
            domains=observed.domains,
            node_labels=observed.node_labels,
            now=now,
        )

    def check_before_steps(
        self, outcome: claim_half.PlannedClaim[cd_records.ComputeDomainClaimRecord, Never]
    ) -> None:
        """The host IMEX daemon must be ready before a channel's CDI spec is written."""
        if self._host_imex_probe is not None and any(
            isinstance(step, models.WriteCDISpec) for step in outcome.steps
        ):
            not_ready = self._host_imex_probe()
            if not_ready is not None:
                raise not_ready

    def plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: cd_records.Checkpoint, now: float
    ) -> cd_records.ClaimOutcome:
        """Undo the entry, whatever the IMEX mode it was prepared under."""
        return preparing.plan_unprepare(ref, checkpoint=checkpoint, now=now)

    def api_steps_doing(self, *, node: node_facts.ImexNodeFacts) -> str:
        """The only API write a ComputeDomain plan makes: the driver-managed node label."""
        return f"labelling node {node.node_name}"

    def device_status_data(
        self, entry: cd_records.Entry, *, node: node_facts.ImexNodeFacts
    ) -> Mapping[str, device_status.DeviceData]:
        """Each device's ComputeDomain, IMEX channels, clique and IMEX mode."""
        return cd_device_status.device_data(
            entry.record, devices=entry.devices, clique_id=node.clique_id
        )

    # ------------------------------------------------------------ its device actions (none)

    def apply(self, action: Never) -> None:
        """Never called: the half plans no device action."""
        typing.assert_never(action)

    def plan_rollback(
        self,
        done: Sequence[cd_records.PluginAction],
        *,
        claim_uid: names.ClaimUID,
        rollback_to: cd_records.Checkpoint,
    ) -> tuple[Never, ...]:
        """Nothing of its own to undo."""
        return ()

    def plan_stale_undo(
        self, entry: cd_records.Entry, *, after: cd_records.Checkpoint
    ) -> tuple[Never, ...]:
        """Nothing of its own to undo (channels are only files and API state)."""
        return ()

    # ------------------------------------------------------------ follow-ups

    def after_recover(
        self, current: cd_records.Checkpoint, *, node: node_facts.ImexNodeFacts
    ) -> None:
        """Report claims prepared under the other IMEX mode (they block a mode switch)."""
        stale = preparing.claims_under_other_mode(current, config=self._config)
        if not stale:
            return
        message = preparing.mode_switch_message(stale, config=self._config, node=node)
        log.warning(
            "event=claims_prepared_under_other_mode node=%s claims=%d mode=%s/%s",
            node.node_name, len(stale), self._config.mode.value, self._config.isolation.value,
        )
        events = node_events.NodeEvents(self._cluster, node_name=node.node_name)
        events.emit("ClaimsPreparedUnderOtherMode", message)

    def after_unprepare(
        self,
        entry: cd_records.Entry,
        *,
        after: cd_records.Checkpoint,
        node: node_facts.ImexNodeFacts,
    ) -> None:
        """Release the driver-managed node label with the domain's last claim here."""
        if entry.record.mode is models.IMEXMode.DRIVER_MANAGED and entry.record.channel_ids:
            self._release_node_label(entry, after=after, node=node)

    def _release_node_label(
        self,
        entry: cd_records.Entry,
        *,
        after: cd_records.Checkpoint,
        node: node_facts.ImexNodeFacts,
    ) -> None:
        """Unpin the node from the entry's ComputeDomain if that was its last claim here.

        Best effort: the unprepare is done either way; a label left behind (API down, a
        conflicting change) is the controller's stale-label clean-up's to remove.
        """
        try:
            labels, resource_version = self._read_node(node)
            patch = preparing.plan_label_release(
                entry, after=after, node=node,
                node_labels=labels, resource_version=resource_version,
            )
            if patch is None:
                return
            executing.execute_cluster_actions(self._cluster, (patch,))
        except errors.ClusterError as exc:
            log.warning(
                "event=node_label_release_failed node=%s domain=%s error=%r",
                node.node_name, entry.record.domain_id, str(exc),
            )
            return
        log.info(
            "event=node_label_released node=%s domain=%s", node.node_name,
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
            raise claim_reads.api_unavailable("listing ComputeDomains", exc) from exc
        return domains

    def _fetch_node_labels(self, node: node_facts.ImexNodeFacts) -> Mapping[str, str]:
        if self._config.host_managed:
            return {}  # host-managed never labels nodes
        try:
            labels, _ = self._read_node(node)
        except errors.NotFoundError:
            return {}
        except errors.ClusterError as exc:
            raise claim_reads.api_unavailable(f"reading Node {node.node_name}", exc) from exc
        return labels

    def _read_node(self, node: node_facts.ImexNodeFacts) -> tuple[dict[str, str], str]:
        """This node's labels and resourceVersion; raises ClusterError (NotFoundError if gone)."""
        found = self._cluster.get(kinds.NODE.kind, namespace="", name=node.node_name)
        meta = found.get("metadata") or {}
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
