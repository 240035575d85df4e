"""The periodic sweep that drops checkpoint entries whose claims the API server says are gone.

A PrepareStarted or PrepareCompleted entry whose ResourceClaim was deleted, recreated under
another UID or deallocated holds its devices for nobody (a crash mid-prepare, or a claim
deleted while the plugin was down); it goes with its CDI file, a Warning Event on the Node and
a metric, after the half's device actions undo what the entry says was done (an MPS daemon
stopped, a GPU's compute mode restored; the entry stays on disk until they ran, so a crash in
between leaves it for the next round). What counts as gone is
`core.checkpoint.stale_reason`'s to decide, and a claim that does not decode counts as present
(`core.stale_claims`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from apps.pluginkit import checkpoint_keeper, claim_half, node_events
from apps.pluginkit import metrics as plugin_metrics
from core import checkpoint as checkpoint_codec
from core import errors, kinds, models, names, ports, stale_claims

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)

# Runs planned plugin steps and the half's device actions in order under the node lock (the
# claim driver's executor).
StepExecutor = Callable[[Sequence[models.PluginAction[RecordT] | claim_half.ActionT]], None]


class _StaleHalf(
    claim_half.HalfCheckpoint[RecordT],
    claim_half.HalfActions[RecordT, claim_half.ActionT],
    Protocol[RecordT, claim_half.ActionT],
):
    """What the sweep needs of a half: its checkpoint's meaning and its device undo."""


class StaleSweeper(Generic[RecordT, claim_half.ActionT]):
    """One clean-up round per `sweep()` call (the plugin's clean-up thread calls it)."""

    def __init__(
        self,
        *,
        half: _StaleHalf[RecordT, claim_half.ActionT],
        keeper: checkpoint_keeper.CheckpointKeeper[RecordT],
        cluster: ports.Cluster,
        execute: StepExecutor[RecordT, claim_half.ActionT],
        events: node_events.NodeEvents,
        metrics: plugin_metrics.PluginMetrics | None,
        node_name: str,
    ) -> None:
        self._half = half
        self._keeper = keeper
        self._cluster = cluster
        self._execute = execute
        self._events = events
        self._metrics = metrics
        self._node_name = node_name

    def sweep(self) -> tuple[checkpoint_codec.StaleEntry[RecordT], ...]:
        """Drop entries whose claims are gone; returns what went.

        Nothing is cleaned in a round where the API server cannot be read: an error there is
        not evidence that a claim is gone.
        """
        with self._keeper.locked():
            snapshot = self._keeper.load()
        entries = checkpoint_codec.entries_to_check(snapshot)
        if not entries:
            return ()
        try:
            stale = self._find_stale(entries)
        except errors.ClusterError as exc:
            log.warning(
                "event=stale_claim_cleanup_skipped node=%s entries=%d reason=%r",
                self._node_name, len(entries), str(exc),
            )
            if self._metrics is not None:
                self._metrics.count_cleanup_skipped()
            return ()
        if not stale:
            return ()
        with self._keeper.locked():
            plan = checkpoint_codec.plan_stale_cleanup(self._keeper.load(), stale=stale)
            after = next(
                (s.checkpoint for s in plan.steps if isinstance(s, models.WriteCheckpoint)), None
            )
            undo = tuple(
                action for item in plan.removed if after is not None
                for action in self._half.plan_stale_undo(item.entry, after=after)
            )
            self._execute((*undo, *plan.steps))
            after = self._keeper.load()
        for item in plan.removed:
            self._report(item)
        plugin_metrics.publish_prepared_devices(self._metrics, after)
        return plan.removed

    def _find_stale(
        self, entries: tuple[models.CheckpointEntry[RecordT], ...]
    ) -> tuple[checkpoint_codec.StaleEntry[RecordT], ...]:
        """Ask the API server about each entry's claim; raises ClusterError if it cannot."""
        by_uid: dict[names.ClaimUID, models.ResourceClaim] | None = None
        found: list[checkpoint_codec.StaleEntry[RecordT]] = []
        for entry in entries:
            if entry.name:
                claim = self._lookup_claim(entry.namespace, entry.name)
            else:  # rebuilt from a CDI file: only the UID is known
                if by_uid is None:
                    listed = self._cluster.list(kinds.RESOURCE_CLAIM.kind).items
                    by_uid = stale_claims.claims_by_uid(listed)
                claim = by_uid.get(entry.claim_uid)
            reason = checkpoint_codec.stale_reason(entry, claim)
            if reason is not None:
                found.append(checkpoint_codec.StaleEntry(entry=entry, reason=reason))
        return tuple(found)

    def _lookup_claim(self, namespace: str, name: str) -> models.ResourceClaim | None:
        try:
            raw = self._cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=name)
        except errors.NotFoundError:
            return None
        return stale_claims.claim_or_placeholder(raw)

    def _report(self, item: checkpoint_codec.StaleEntry[RecordT]) -> None:
        entry = item.entry
        who = f"{entry.namespace}/{entry.name}" if entry.name else "(name unknown)"
        log.warning(
            "event=stale_claim_cleaned node=%s claim=%s uid=%s state=%s reason=%r",
            self._node_name, who, entry.claim_uid, entry.state.value, item.reason.value,
        )
        self._events.emit(
            "StaleClaimCleaned",
            f"removed the {entry.state.value} entry of claim {who} ({entry.claim_uid}) and its "
            f"CDI spec: {item.reason.value}; {self._half.freed_by(entry)}",
        )
        if self._metrics is not None:
            self._metrics.count_stale_cleaned(state=entry.state.value, reason=item.reason.name)
