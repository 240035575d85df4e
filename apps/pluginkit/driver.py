"""A kubelet plugin's orchestration: kubelet calls in, a core planner decides, ports act.

`ClaimDriver` implements `core.ports.KubeletPluginService` (what the gRPC servicer calls)
for either half of the driver. For each claim it fetches the claim, checks that a pod on
this node reserves it, gathers what the half's planner needs, and runs the returned steps in
order under the node-wide checkpoint lock, undoing a prepare the kubelet abandoned. It keeps
the checkpoint (snapshot + journal) and recovers it when corrupt, unreadable or missing.
It decides nothing itself: each half overrides the hooks in the "device logic" section.
"""

from __future__ import annotations

import abc
import collections.abc
import contextlib
import dataclasses
import gc
import logging
import threading
import time
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import tenacity

from apps.pluginkit import metrics as plugin_metrics
from core import checkpoint as checkpoint_codec
from core import claims as claim_checks
from core import decoding, errors, executing, kinds, models, names, ports

log = logging.getLogger(__name__)

# The half's checkpoint record (`models.RecordCodec`).
P = TypeVar("P")

Clock = Callable[[], float]
# Leave the kubelet this long before its deadline to receive our answer.
_ANSWER_MARGIN_S = 0.2
# The journal is compacted into a new snapshot once it holds more records than this or a
# quarter of the claims on the node, whichever is more: a start-up replays at most that many
# records, and a compaction (O(claims)) comes at most once per that many writes.
_COMPACT_MIN_RECORDS = 1024


def compaction_threshold(claims: int) -> int:
    """The most journal records kept before the journal is folded into a new snapshot."""
    return max(_COMPACT_MIN_RECORDS, claims // 4)


class PlannedClaim(Protocol[P]):
    """What a half's planner returns for one claim (`models.ClaimOutcome` and the like)."""

    @property
    def steps(self) -> tuple[object, ...]: ...

    @property
    def checkpoint(self) -> models.Checkpoint[P]: ...

    @property
    def devices(self) -> tuple[models.PreparedDevice, ...]: ...

    @property
    def error(self) -> Exception | None: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginPorts:
    cluster: ports.Cluster
    checkpoints: ports.CheckpointJournal
    cdi: ports.CDIStore


class ClaimDriver(abc.ABC, Generic[P]):
    """Prepares and unprepares claims on one node; safe to call from many gRPC threads."""

    def __init__(
        self,
        *,
        ports: PluginPorts,
        codec: models.RecordCodec[P],
        node: models.NodeFacts,
        clock: Clock = time.time,
        metrics: plugin_metrics.PluginMetrics | None = None,
        retry_budget_s: float = 30.0,
    ) -> None:
        self._ports = ports
        self._codec = codec
        self._node = node
        self._clock = clock
        self._metrics = metrics
        self._retry_budget_s = retry_budget_s
        # What the snapshot + journal on disk hold (indexed), and their stamps when we last
        # read or wrote them: equal stamps under the node lock mean no other process wrote,
        # so the state is served from memory (no re-read, no re-parse).
        self._state: models.Checkpoint[P] | None = None
        self._stamps: object = None
        self._journal_records = 0
        # The id of the snapshot on disk: the first record of a new journal names it.
        self._snapshot_id = ""
        self._in_flight = _InFlightPrepares()
        self._degraded: _Degraded[P] | None = None

    @property
    def node(self) -> models.NodeFacts:
        """The node facts prepares are planned with now."""
        return self._node

    def set_node(self, node: models.NodeFacts) -> None:
        """New node facts (a clique that appeared); later prepares plan with them."""
        self._node = node

    # ------------------------------------------------------------ startup

    def load_checkpoint(self) -> models.Checkpoint[P]:
        """Read the checkpoint; a corrupt one is moved aside and rebuilt from CDI files.

        Also applies the boot-ID rule (a reboot drops prepared state) and expires old
        tombstones. Call with the checkpoint lock held.
        """
        if self._degraded is not None:
            current = self._degraded.checkpoint
        else:
            current = self._read_checkpoint()
        fresh = checkpoint_codec.after_boot(current, boot_id=self._node.boot_id)
        if fresh is not current and fresh.entries.keys() != current.entries.keys():
            log.warning(
                "event=node_rebooted node=%s dropped_claims=%d",
                self._node.node_name, len(current.entries) - len(fresh.entries),
            )
        return checkpoint_codec.expire_tombstones(fresh, now=self._clock())

    def _read_checkpoint(self) -> models.Checkpoint[P]:
        store = self._ports.checkpoints
        if self._state is not None and store.stamps() == self._stamps:
            return self._state
        self._state = None
        try:
            raw = store.read()
            journal = store.read_journal() if raw is not None else b""
        except OSError as exc:  # a directory in its place, no permission, an I/O error
            return self._recover_unreadable_checkpoint(exc)
        if raw is None:
            return self._start_without_checkpoint()
        snapshot = checkpoint_codec.snapshot_id(raw)
        try:
            with _collector_paused():
                decoded = checkpoint_codec.decode(raw, self._codec)
                if not journal and checkpoint_codec.expects_journal(decoded):
                    return self._recover_lost_journal(decoded)
                replayed = checkpoint_codec.replay(decoded, journal, snapshot=snapshot)
        except errors.CheckpointCorruptError as exc:
            return self._recover_corrupt_checkpoint(exc)
        self._snapshot_id = snapshot
        if replayed.stale:
            log.warning(
                "event=checkpoint_journal_stale node=%s action=emptied bytes=%d reason=%r",
                self._node.node_name, len(journal),
                "it follows another snapshot (a compaction killed before emptying it, or a "
                "snapshot rewritten by an older plugin)",
            )
        if replayed.valid_length < len(journal):
            # The last append was torn (a kill or power loss before its fsync returned, so it
            # was never acknowledged): cut it, or the next append would follow garbage.
            if not replayed.stale:
                log.warning(
                    "event=checkpoint_journal_torn_tail node=%s kept_records=%d cut_bytes=%d",
                    self._node.node_name, replayed.records,
                    len(journal) - replayed.valid_length,
                )
            try:
                store.truncate_journal(replayed.valid_length)
            except OSError as exc:
                # The next append would follow the uncut bytes, and a later read would drop
                # or reject the whole journal: nothing more is written (as if unwritable).
                log.error("event=checkpoint_journal_cut_failed error=%r", str(exc))
                problem = "its journal's torn or stale tail could not be cut"
                self._enter_degraded(
                    replayed.checkpoint, path=exc.filename, problem=problem, cause=exc
                )
                return replayed.checkpoint
        if checkpoint_codec.needs_rewrite(replayed.checkpoint):
            # Written by an older release: rewritten in this format before anything is
            # appended, so the journal never mixes two formats.
            try:
                self._compact(dataclasses.replace(
                    replayed.checkpoint, format_version=checkpoint_codec.VERSION
                ))
            except OSError as exc:
                problem = f"it is in format version {replayed.checkpoint.format_version}"
                self._enter_degraded(
                    replayed.checkpoint, path=exc.filename, problem=problem, cause=exc
                )
                return replayed.checkpoint
            log.info(
                "event=checkpoint_format_upgraded node=%s from_version=%d to_version=%d "
                "claims=%d", self._node.node_name, replayed.checkpoint.format_version,
                checkpoint_codec.VERSION, len(replayed.checkpoint.entries),
            )
            assert self._state is not None
            return self._state
        self._remember(replayed.checkpoint, records=replayed.records)
        assert self._state is not None
        return self._state

    def _remember(self, cp: models.Checkpoint[P], *, records: int) -> None:
        """`cp` is what the snapshot + journal now hold."""
        self._state = checkpoint_codec.indexed(cp)
        self._journal_records = records
        self._stamps = self._ports.checkpoints.stamps()

    def _compact(
        self, cp: models.Checkpoint[P], *, journaled: bool = True,
        version: int = checkpoint_codec.VERSION,
    ) -> None:
        """Write `cp` as the new snapshot, then start the journal anew with its base record
        (`journaled`: the snapshot says so, see `checkpoint.expects_journal`) or empty it.
        `version` 1: the format the previous release reads (a graceful stop's snapshot).

        A kill in between leaves the new snapshot and the old journal, whose records hold
        absolute values the snapshot already has: replaying them changes nothing.
        NB: a kill between emptying the journal and its base record looks like a lost journal
        at the next start: state is rebuilt from the CDI specs, as complete as the snapshot.
        """
        store = self._ports.checkpoints
        data = checkpoint_codec.encode(cp, journaled=journaled, version=version)
        store.write(data)
        self._snapshot_id = checkpoint_codec.snapshot_id(data)
        store.truncate_journal(0)
        records = 0
        if journaled:
            store.append(checkpoint_codec.base_record(self._snapshot_id))
            records = 1
        self._remember(dataclasses.replace(cp, format_version=version), records=records)

    def _persist(self, step: models.WriteCheckpoint[P]) -> None:
        """Make `step.checkpoint` durable: its changes appended to the journal, or a snapshot."""
        before, after = self._state, step.checkpoint
        if before is None or checkpoint_codec.needs_rewrite(before):
            self._compact(after)  # one journal never mixes two formats
            return
        records = checkpoint_codec.encode_records(before, after, changed=step.changed)
        count = records.count(b"\n")
        # Compact once the journal outgrows the state: replay at start-up stays O(claims)
        # and the amortised cost of a write stays O(1).
        if self._journal_records + count > compaction_threshold(len(after.entries)):
            self._compact(after)
            return
        if self._journal_records == 0 and records:
            records = checkpoint_codec.base_record(self._snapshot_id) + records
            count += 1
        # An empty append still proves the journal writable (recover's check at start-up).
        self._ports.checkpoints.append(records, sync=step.durable)
        self._remember(after, records=self._journal_records + count)

    def _recover_unreadable_checkpoint(self, exc: OSError) -> models.Checkpoint[P]:
        """Same rule as a corrupt file: move it aside, rebuild from CDI files, keep serving.

        Where nothing can be moved or written, the rebuilt state is kept in memory and the
        node serves no prepares (unprepares still work) until the path is fixed.
        """
        rebuilt, unreadable = self._rebuild_from_cdi()
        problem = f"{type(exc).__name__}: {exc.strerror or exc}"
        try:
            moved_to = self._ports.checkpoints.quarantine(suffix=f"{int(self._clock())}")
            self._compact(rebuilt)
        except OSError as write_exc:
            self._enter_degraded(rebuilt, path=exc.filename, problem=problem, cause=write_exc)
            return rebuilt
        log.error(
            "event=checkpoint_unreadable node=%s path=%s moved_to=%s rebuilt_claims=%d "
            "unreadable_specs=%d error=%r",
            self._node.node_name, exc.filename, moved_to, len(rebuilt.entries), len(unreadable),
            problem,
        )
        self._emit_node_event(
            "CheckpointUnreadable",
            f"checkpoint {exc.filename} could not be read ({problem}); it was moved to "
            f"{moved_to} and prepared state rebuilt from {len(rebuilt.entries)} CDI spec "
            f"file(s){_unreadable_note(unreadable)}",
        )
        return rebuilt

    def _recover_lost_journal(self, snapshot: models.Checkpoint[P]) -> models.Checkpoint[P]:
        """The snapshot says a journal follows it, but there is none or it is empty: someone
        else deleted or emptied it, and with it every claim acknowledged since the snapshot.
        As for a lost snapshot: rebuild from the CDI specs (never delete them as orphans), and
        say so with an event. A claim the snapshot holds as completed keeps its entry there
        (it says more than its spec: request and device names)."""
        rebuilt, unreadable = self._rebuild_from_cdi()
        kept = {
            uid: snapshot.entries[uid] for uid in rebuilt.entries
            if uid in snapshot.entries
            and snapshot.entries[uid].state is models.ClaimState.PREPARE_COMPLETED
        }
        if kept:
            rebuilt = dataclasses.replace(
                rebuilt, entries={**rebuilt.entries, **kept}, index=None
            )
        problem = "its journal was deleted or emptied"
        try:
            self._compact(rebuilt)
        except OSError as exc:
            self._enter_degraded(rebuilt, path=exc.filename, problem=problem, cause=exc)
            return rebuilt
        log.error(
            "event=checkpoint_journal_lost node=%s rebuilt_claims=%d unreadable_specs=%d",
            self._node.node_name, len(rebuilt.entries), len(unreadable),
        )
        self._emit_node_event(
            "CheckpointJournalLost",
            "the checkpoint journal was deleted or emptied by something other than this plugin "
            "(the snapshot expects one); prepared state rebuilt from "
            f"{len(rebuilt.entries)} CDI spec file(s){_unreadable_note(unreadable)}",
        )
        return rebuilt

    def _enter_degraded(
        self, current: models.Checkpoint[P], *, path: object, problem: str, cause: OSError
    ) -> None:
        where = path or "the plugin checkpoint"
        reason = (
            f"the plugin checkpoint {where} cannot be written ({problem}; then "
            f"{type(cause).__name__}: {cause.strerror or cause}), so this node serves no "
            "prepares: make the plugin directory writable by the plugin (a read-only mount, an "
            "immutable or foreign-owned path, or a full disk causes this), then restart the "
            "plugin pod; unprepares still work"
        )
        self._degraded = _Degraded(checkpoint=current, reason=reason)
        log.error(
            "event=checkpoint_unwritable node=%s path=%s action=serving_no_prepares error=%r",
            self._node.node_name, where, problem,
        )
        self._emit_node_event("CheckpointUnwritable", reason)

    def _start_without_checkpoint(self) -> models.Checkpoint[P]:
        # No file: a first start, unless CDI specs of ours exist (the file was deleted or lost),
        # in which case the prepared state they prove is rebuilt, never forgotten.
        if not self._ports.cdi.claim_uids():
            return self._empty_checkpoint()
        rebuilt, unreadable = self._rebuild_from_cdi()
        log.error(
            "event=checkpoint_missing node=%s rebuilt_claims=%d unreadable_specs=%d",
            self._node.node_name, len(rebuilt.entries), len(unreadable),
        )
        self._emit_node_event(
            "CheckpointMissing",
            f"checkpoint file was missing although CDI specs exist; prepared state rebuilt "
            f"from {len(rebuilt.entries)} CDI spec file(s){_unreadable_note(unreadable)}",
        )
        return rebuilt

    def _recover_corrupt_checkpoint(
        self, exc: errors.CheckpointCorruptError
    ) -> models.Checkpoint[P]:
        # NB: rebuild before moving the file aside: if reading the CDI root fails, the corrupt
        # checkpoint stays in place and the next call tries again instead of starting empty.
        rebuilt, unreadable = self._rebuild_from_cdi()
        try:
            moved_to = self._ports.checkpoints.quarantine(suffix=f"{int(self._clock())}")
            self._compact(rebuilt)
        except OSError as write_exc:
            self._enter_degraded(rebuilt, path=None, problem=exc.message, cause=write_exc)
            return rebuilt
        log.error(
            "event=checkpoint_corrupt node=%s moved_to=%s rebuilt_claims=%d unreadable_specs=%d "
            "reason=%r",
            self._node.node_name, moved_to, len(rebuilt.entries), len(unreadable), exc.message,
        )
        self._emit_node_event(
            "CheckpointCorrupt",
            f"checkpoint was corrupt and moved to {moved_to}; prepared state rebuilt "
            f"from {len(rebuilt.entries)} CDI spec file(s){_unreadable_note(unreadable)}",
        )
        return rebuilt

    def _rebuild_from_cdi(self) -> tuple[models.Checkpoint[P], tuple[names.ClaimUID, ...]]:
        """The checkpoint the CDI root proves, and the spec files of ours it could not read."""
        specs: dict[names.ClaimUID, Mapping[str, object]] = {}
        unreadable: list[names.ClaimUID] = []
        for uid in sorted(self._ports.cdi.claim_uids()):
            try:
                spec = self._ports.cdi.read(uid)
            except (errors.DecodeError, OSError) as exc:
                # Something was prepared for this claim, but what is unknown: the half's
                # rebuild keeps it held until the kubelet unprepares the claim.
                log.error(
                    "event=cdi_spec_unreadable node=%s claim_uid=%s action=%s error=%r",
                    self._node.node_name, uid, self._unreadable_spec_action, str(exc),
                )
                unreadable.append(uid)
                continue
            if spec is not None:
                specs[uid] = spec
        return self._rebuild(specs, tuple(unreadable)), tuple(unreadable)

    def _emit_node_event(self, reason: str, message: str) -> None:
        emit_node_event(self._ports.cluster, self._node.node_name, reason, message)

    def recover(self) -> models.Checkpoint[P]:
        """Startup pass: load (and repair) the checkpoint, persist it, drop orphan CDI specs.

        A CDI spec of ours that no PrepareStarted/Completed entry holds (its entry was dropped
        by a reboot, say) is deleted, so it can never be rebuilt into a blocking entry later.
        """
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            try:
                self._execute((models.WriteCheckpoint(checkpoint=current),))
            except OSError as exc:
                problem = "it can be read but not replaced"
                self._enter_degraded(current, path=exc.filename, problem=problem, cause=exc)
            orphans = checkpoint_codec.orphan_cdi_specs(
                current, spec_claim_uids=self._ports.cdi.claim_uids()
            )
            for uid in orphans:
                log.warning(
                    "event=orphan_cdi_spec_deleted node=%s claim_uid=%s",
                    self._node.node_name, uid,
                )
                self._ports.cdi.delete(uid)
        self._after_recover(current)
        self._publish_prepared_count(current)
        return current

    def compact(self) -> None:
        """Fold the journal into the snapshot (at a graceful stop).

        Afterwards `checkpoint.json` alone holds every claim, in the format the previous
        release reads (version 1, without the journal): what makes a downgrade after a
        clean stop keep every claim. The next start rewrites it in this release's format.
        """
        with self._ports.checkpoints.locked():
            if self._degraded is not None:
                return
            current = self._read_checkpoint()
            if (
                self._journal_records or self._ports.checkpoints.read_journal()
                or current.format_version != 1
            ):
                self._compact(current, journaled=False, version=1)
                log.info(
                    "event=checkpoint_compacted node=%s claims=%d",
                    self._node.node_name, len(current.entries),
                )

    # ------------------------------------------------------------ stale entries

    def clean_stale_claims(self) -> tuple[checkpoint_codec.StaleEntry[P], ...]:
        """One clean-up round: drop entries whose claims the API server says are gone.

        A PrepareStarted or PrepareCompleted entry whose ResourceClaim was deleted, recreated
        under another UID or deallocated holds its IMEX channel(s) for nobody (a crash mid-
        prepare, or a claim deleted while the plugin was down); it goes with its CDI file, a
        Warning Event on the Node and a metric. Nothing is cleaned in a round where the API
        server cannot be read: an error there is not evidence that a claim is gone.
        """
        with self._ports.checkpoints.locked():
            snapshot = self.load_checkpoint()
        entries = checkpoint_codec.entries_to_check(snapshot)
        if not entries:
            return ()
        try:
            stale = self._find_stale(entries)
        except errors.ClusterError as exc:
            log.warning(
                "event=stale_claim_cleanup_skipped node=%s entries=%d reason=%r",
                self._node.node_name, len(entries), str(exc),
            )
            if self._metrics is not None:
                self._metrics.count_cleanup_skipped()
            return ()
        if not stale:
            return ()
        with self._ports.checkpoints.locked():
            plan = checkpoint_codec.plan_stale_cleanup(self.load_checkpoint(), stale=stale)
            self._execute(plan.steps)
            after = self.load_checkpoint()
        for item in plan.removed:
            self._report_stale(item)
        self._publish_prepared_count(after)
        return plan.removed

    def _find_stale(
        self, entries: tuple[models.CheckpointEntry[P], ...]
    ) -> tuple[checkpoint_codec.StaleEntry[P], ...]:
        """Ask the API server about each entry's claim; raises ClusterError if it cannot."""
        by_uid: dict[str, models.ResourceClaim] | None = None
        found: list[checkpoint_codec.StaleEntry[P]] = []
        for entry in entries:
            if entry.name:
                claim = self._lookup_claim(entry.namespace, entry.name)
            else:  # rebuilt from a CDI file: only the UID is known
                if by_uid is None:
                    by_uid = self._claims_by_uid()
                claim = by_uid.get(entry.claim_uid)
            reason = checkpoint_codec.stale_reason(entry, claim)
            if reason is not None:
                found.append(checkpoint_codec.StaleEntry[P](entry=entry, reason=reason))
        return tuple(found)

    def _lookup_claim(self, namespace: str, name: str) -> models.ResourceClaim | None:
        try:
            raw = self._ports.cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=name)
        except errors.NotFoundError:
            return None
        return _claim_or_placeholder(raw)

    def _claims_by_uid(self) -> dict[str, models.ResourceClaim]:
        claims = (
            _claim_or_placeholder(raw)
            for raw in self._ports.cluster.list(kinds.RESOURCE_CLAIM.kind).items
        )
        return {claim.uid: claim for claim in claims}

    def _report_stale(self, item: checkpoint_codec.StaleEntry[P]) -> None:
        entry = item.entry
        who = f"{entry.namespace}/{entry.name}" if entry.name else "(name unknown)"
        log.warning(
            "event=stale_claim_cleaned node=%s claim=%s uid=%s state=%s reason=%r",
            self._node.node_name, who, entry.claim_uid, entry.state.value, item.reason.value,
        )
        self._emit_node_event(
            "StaleClaimCleaned",
            f"removed the {entry.state.value} entry of claim {who} ({entry.claim_uid}) and its "
            f"CDI spec: {item.reason.value}; {self._freed_by(entry)}",
        )
        if self._metrics is not None:
            self._metrics.count_stale_cleaned(state=entry.state.value, reason=item.reason.name)

    # ------------------------------------------------------------ device logic (per half)

    # What the start-up log says is done with a claim whose CDI spec cannot be read.
    _unreadable_spec_action = "kept_until_unprepared"

    @abc.abstractmethod
    def _empty_checkpoint(self) -> models.Checkpoint[P]:
        """The checkpoint of a node with nothing prepared (a first start)."""
        ...

    @abc.abstractmethod
    def _rebuild(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        unreadable: tuple[names.ClaimUID, ...],
    ) -> models.Checkpoint[P]:
        """The checkpoint the readable CDI specs (and the unreadable ones' UIDs) prove."""
        ...

    def _after_recover(self, current: models.Checkpoint[P]) -> None:
        """Start-up reports about the recovered checkpoint (none by default)."""
        return None

    def _observe(self, claim: models.ResourceClaim) -> object:
        """API reads the planner needs, done before the node-wide lock is taken."""
        return None

    @abc.abstractmethod
    def _plan_prepare(
        self, claim: models.ResourceClaim, *, checkpoint: models.Checkpoint[P], observed: object
    ) -> PlannedClaim[P]:
        """The steps that prepare `claim` (called under the node-wide lock)."""
        ...

    def _check_before_steps(self, outcome: PlannedClaim[P]) -> None:
        """Raise a RetryableError when the node cannot take the planned steps yet."""
        return None

    def _api_steps_doing(self) -> str:
        """What a failed API write among the planned steps was doing, for the error."""
        return f"writing to the API server for node {self._node.node_name}"

    @abc.abstractmethod
    def _plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: models.Checkpoint[P]
    ) -> PlannedClaim[P]:
        """The steps that undo the claim's entry (called under the node-wide lock)."""
        ...

    def _after_unprepare(
        self, entry: models.CheckpointEntry[P], *, after: models.Checkpoint[P]
    ) -> None:
        """Best-effort follow-up once the claim's entry is gone (none by default)."""
        return None

    @abc.abstractmethod
    def _plan_restore_spec(self, entry: models.CheckpointEntry[P]) -> models.WriteCDISpec | None:
        """The write that brings back the entry's lost CDI spec, or None if it cannot."""
        ...

    def _freed_by(self, entry: models.CheckpointEntry[P]) -> str:
        """What a stale entry's clean-up set free, for the Node event."""
        names_ = ",".join(d.device_name for d in entry.devices[:8]) or "none"
        return f"device(s) {names_} on this node are free again"

    def _undo_device_steps(
        self, done: tuple[object, ...], *, claim_uid: names.ClaimUID,
        rollback_to: models.Checkpoint[P],
    ) -> tuple[object, ...]:
        """Steps that undo the half's own steps in `done` (an abandoned prepare's rollback to
        `rollback_to`), as the half's core planner decides them."""
        return ()

    def _execute_device_step(self, step: object) -> None:
        """Run a step only this half plans (not a checkpoint, CDI or API step)."""
        raise TypeError(f"{type(self).__name__} cannot run the planned step {step!r}")

    # ------------------------------------------------------------ kubelet calls

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        # Every claim of the call is in flight from now: the kubelet may unprepare the last
        # one while the first is still being prepared.
        with self._in_flight.tracking(ref.uid for ref in claims) as tickets:

            def handle(
                ref: models.ClaimRef, deadline: float
            ) -> tuple[models.PreparedDevice, ...]:
                flight = _InFlight(ref=ref, call=call, overtaken=tickets[ref.uid])
                return self._prepare_with_retries(flight, deadline)

            return self._per_claim("prepare", claims, handle, call=call)

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        # NB: before anything else, so a prepare of these claims still in flight (in an API
        # call, or waiting for the lock we are about to take) sees it and gives up.
        self._in_flight.overtake(ref.uid for ref in claims)
        return self._per_claim(
            "unprepare", claims, lambda ref, _deadline: self._unprepare_one(ref), call=call
        )

    def _per_claim(
        self,
        operation: str,
        claims: tuple[models.ClaimRef, ...],
        handle: Callable[[models.ClaimRef, float], tuple[models.PreparedDevice, ...]],
        *,
        call: ports.KubeletCall | None,
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        started = time.perf_counter()
        # One retry budget for the whole kubelet call, shared by its claims: the kubelet gives
        # up on the call after 45 s, and then every claim's answer is lost.
        deadline = time.monotonic() + self._retry_budget_s
        remaining = call.time_remaining() if call is not None else None
        if remaining is not None:
            deadline = min(deadline, time.monotonic() + remaining - _ANSWER_MARGIN_S)
        results: dict[names.ClaimUID, models.ClaimResult] = {}
        for ref in claims:
            invalid = claim_checks.claim_uid_error(ref.uid)
            if invalid is not None:  # bad input, not a bug: no traceback, no huge log line
                log.warning(
                    "event=%s_failed claim=%s/%s uid=%s kind=permanent error=invalid_claim_uid",
                    operation, claim_checks.shown(ref.namespace), claim_checks.shown(ref.name),
                    claim_checks.shown(ref.uid),
                )
                self._count_error(operation, "permanent")
                results[ref.uid] = models.ClaimResult(error=invalid.message)
                continue
            try:
                results[ref.uid] = models.ClaimResult(devices=handle(ref, deadline))
            except errors.DriverError as exc:
                kind = (
                    "abandoned" if isinstance(exc, _AbandonedError)
                    else "permanent" if isinstance(exc, errors.PermanentError)
                    else "retryable"
                )
                log.warning(
                    "event=%s_failed claim=%s/%s uid=%s kind=%s error=%r",
                    operation, ref.namespace, ref.name, ref.uid, kind, exc.message,
                )
                self._count_error(operation, kind)
                results[ref.uid] = models.ClaimResult(error=exc.message)
            except Exception as exc:  # one claim's bug or I/O error must not sink the others
                log.exception(
                    "event=%s_failed claim=%s/%s uid=%s kind=internal",
                    operation, ref.namespace, ref.name, ref.uid,
                )
                self._count_error(operation, "internal")
                results[ref.uid] = models.ClaimResult(
                    error=f"internal error {operation.removesuffix('e')}ing claim: {exc}"
                )
        self._observe_call(operation, time.perf_counter() - started)
        return results

    def _prepare_with_retries(
        self, flight: _InFlight, deadline: float
    ) -> tuple[models.PreparedDevice, ...]:
        # Transient conditions (daemon not ready yet, channel still held) may clear within the
        # kubelet's 45 s budget; permanent ones are reported at once. Retrying stops as soon
        # as the kubelet has given up on the call.
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(errors.RetryableError),
            stop=lambda state: (
                time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline
                or self._abandonment(flight) is not None
            ),
            wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._prepare_one(flight)
        raise AssertionError("unreachable: tenacity reraises")

    def _ensure_spec_file(self, entry: models.CheckpointEntry[P]) -> None:
        """An answer must have its CDI file: write back a lost or unreadable one from the entry.

        Call with the checkpoint lock held.
        """
        try:
            intact = self._ports.cdi.read(entry.claim_uid) is not None
        except errors.DecodeError:
            intact = False
        if intact:
            return
        restore = self._plan_restore_spec(entry)
        if restore is None:
            raise errors.PermanentError(
                f"the CDI spec file of claim {entry.namespace}/{entry.name} ({entry.claim_uid}) "
                "is missing or unreadable and cannot be rebuilt from the checkpoint; delete the "
                "pod so the kubelet unprepares the claim, then recreate it"
            )
        log.warning(
            "event=cdi_spec_restored claim=%s/%s uid=%s reason=missing_or_unreadable",
            entry.namespace, entry.name, entry.claim_uid,
        )
        self._execute((restore,))

    def _abandonment(self, flight: _InFlight) -> _AbandonedError | None:
        """Why the prepare in `flight` must stop before its next durable step, if it must."""
        ref = flight.ref
        if flight.overtaken.is_set():
            return _AbandonedError(
                f"claim {ref.namespace}/{ref.name} was unprepared while its prepare was in "
                "flight; the unprepare wins and nothing is kept (the kubelet prepares the "
                "claim again if a pod on this node still needs it)"
            )
        if flight.call is not None and not flight.call.is_active():
            return _AbandonedError(
                f"the kubelet cancelled the prepare of claim {ref.namespace}/{ref.name} or its "
                "deadline passed; nothing is kept (the kubelet retries)"
            )
        return None

    def _check_in_flight(self, flight: _InFlight) -> None:
        abandoned = self._abandonment(flight)
        if abandoned is not None:
            raise abandoned

    def _prepare_one(self, flight: _InFlight) -> tuple[models.PreparedDevice, ...]:
        ref = flight.ref
        self._check_in_flight(flight)
        # DESIGN §4 step 1: a claim already completed gets the same answer, without asking
        # the API server (which may be down while the kubelet re-prepares after a restart).
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            if self._degraded is not None:
                raise errors.PermanentError(self._degraded.reason)
            reused = claim_checks.reusable_devices(current, ref.uid)
            if reused is not None:
                self._ensure_spec_file(current.entries[ref.uid])
        if reused is not None:
            log.info(
                "event=claim_already_prepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid
            )
            return reused
        # Every API call happens here, outside the node-wide lock.
        claim = self._fetch_claim(ref)
        not_reserved = claim_checks.reservation_error(
            claim, placements=self._reserved_placements(claim), node=self._node
        )
        if not_reserved is not None:
            self._check_in_flight(flight)
            self._report(ref, not_reserved)
        observed = self._observe(claim)
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            outcome = self._plan_prepare(claim, checkpoint=current, observed=observed)
            if outcome.error is None:
                self._check_before_steps(outcome)
            try:
                self._run(outcome.steps, flight=flight, rollback_to=current)
            except errors.ClusterError as exc:  # an API write the planner asked for
                raise api_unavailable(self._api_steps_doing(), exc) from exc
        self._publish_prepared_count(outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info(
            "event=claim_prepared claim=%s/%s uid=%s devices=%s",
            ref.namespace, ref.name, ref.uid,
            ",".join(d.device_name for d in outcome.devices),
        )
        return outcome.devices

    def _unprepare_one(self, ref: models.ClaimRef) -> tuple[models.PreparedDevice, ...]:
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            outcome = self._plan_unprepare(ref, checkpoint=current)
            self._run(outcome.steps)
        self._publish_prepared_count(outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info("event=claim_unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
        entry = current.entries.get(ref.uid)
        if entry is not None:
            self._after_unprepare(entry, after=outcome.checkpoint)
        return ()

    # ------------------------------------------------------------ observations

    def _reserved_placements(
        self, claim: models.ResourceClaim
    ) -> tuple[models.PodPlacement, ...]:
        """Where the pods of the claim's `reservedFor` run now (stops at one on this node)."""
        found: list[models.PodPlacement] = []
        for consumer in claim.reserved_for:
            if not consumer.is_pod:
                continue
            try:
                pod = self._ports.cluster.get(
                    kinds.POD.kind, namespace=claim.namespace, name=consumer.name
                )
            except errors.NotFoundError:
                continue
            except errors.ClusterError as exc:
                doing = f"reading Pod {claim.namespace}/{consumer.name}"
                raise api_unavailable(doing, exc) from exc
            meta = pod.get("metadata") or {}
            spec = pod.get("spec") or {}
            if meta.get("uid") != consumer.uid:
                continue  # same name, another pod: the reserved one is gone
            node_name = str(spec.get("nodeName") or "")
            found.append(models.PodPlacement(uid=consumer.uid, node_name=node_name))
            if node_name == self._node.node_name:
                break
        return tuple(found)

    def _fetch_claim(self, ref: models.ClaimRef) -> models.ResourceClaim:
        try:
            raw = self._ports.cluster.get(
                kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name
            )
        except errors.NotFoundError:
            raise errors.RetryableError(
                f"ResourceClaim {ref.namespace}/{ref.name} not found in the API server yet"
            ) from None
        except errors.ClusterError as exc:
            doing = f"reading ResourceClaim {ref.namespace}/{ref.name}"
            raise api_unavailable(doing, exc) from exc
        claim = decoding.resource_claim_from_k8s(raw)
        if claim.uid != ref.uid:
            raise errors.PermanentError(
                f"ResourceClaim {ref.namespace}/{ref.name} has uid {claim.uid}, but the kubelet "
                f"asked for uid {ref.uid}: the claim was deleted and recreated; delete the pod"
            )
        return claim

    # ------------------------------------------------------------ effects

    def _run(
        self,
        steps: tuple[object, ...],
        *,
        flight: _InFlight | None = None,
        rollback_to: models.Checkpoint[P] | None = None,
    ) -> None:
        """Run planned steps in order; for a prepare, check before each that it still counts.

        A prepare abandoned part-way (the kubelet gave up, or an unprepare overtook it) is
        undone: the checkpoint before it is written back, then its CDI spec deleted (the
        entry goes first, so a kill in between leaves only an orphan file, removed at start).
        """
        done: list[object] = []
        for step in steps:
            abandoned = self._abandonment(flight) if flight is not None else None
            if abandoned is not None:
                if rollback_to is not None and flight is not None and _durable(done):
                    # NB: device changes are undone first, while the entry that records
                    # them is still on disk: a kill in between leaves it for the unprepare.
                    self._execute((
                        *self._undo_device_steps(
                            tuple(done), claim_uid=flight.ref.uid, rollback_to=rollback_to
                        ),
                        models.WriteCheckpoint(
                            checkpoint=rollback_to, changed=(flight.ref.uid,)
                        ),
                        models.DeleteCDISpec(claim_uid=flight.ref.uid),
                    ))
                raise abandoned
            self._execute((step,))
            done.append(step)

    def _execute(self, steps: tuple[object, ...]) -> None:
        for step in steps:
            if not _is_plugin_action(step):
                self._execute_device_step(step)
            elif not isinstance(step, models.WriteCheckpoint):
                executing.execute_plugin_steps(
                    (step,),
                    checkpoints=self._ports.checkpoints,
                    cdi=self._ports.cdi,
                    cluster=self._ports.cluster,
                )
            elif self._degraded is not None:
                # Nothing can be written: the checkpoint lives in memory; files and API act.
                self._degraded = dataclasses.replace(self._degraded, checkpoint=step.checkpoint)
            else:
                self._persist(step)

    def _report(self, ref: models.ClaimRef, error: Exception) -> None:
        if isinstance(error, errors.PermanentError):
            self._ports.cluster.emit_event(
                involved=models.ObjectRef(
                    kind=kinds.RESOURCE_CLAIM.kind,
                    name=ref.name,
                    namespace=ref.namespace,
                    uid=ref.uid,
                    api_version=kinds.RESOURCE_CLAIM.api_version,
                ),
                reason="PrepareFailed",
                message=str(error),
            )
        raise error

    def _publish_prepared_count(self, current: models.Checkpoint[P]) -> None:
        if self._metrics is None:
            return
        self._metrics.set_prepared_devices(checkpoint_codec.index_of(current).prepared_devices)

    def _count_error(self, operation: str, kind: str) -> None:
        if self._metrics is not None:
            self._metrics.count_error(operation=operation, kind=kind)

    def _observe_call(self, operation: str, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.observe_call(operation=operation, seconds=seconds)


@contextlib.contextmanager
def _collector_paused() -> collections.abc.Iterator[None]:
    """No cyclic garbage collection while a checkpoint is parsed.

    Parsing creates some 100,000 objects at 10,000 claims, all of them kept. Without the
    pause they trigger full collections that walk the whole heap, which triples the load
    time in a process that holds much else.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def emit_node_event(
    cluster: ports.Cluster, node_name: str, reason: str, message: str, *, warning: bool = True
) -> None:
    """Record a Kubernetes Event about the Node `node_name` (raises ClusterError)."""
    cluster.emit_event(
        involved=models.ObjectRef(kind="Node", name=node_name, api_version="v1"),
        reason=reason,
        message=message,
        warning=warning,
    )


def _claim_or_placeholder(raw: Mapping[str, Any]) -> models.ResourceClaim:
    """The claim; one that does not decode counts as present and allocated (never stale)."""
    try:
        return decoding.resource_claim_from_k8s(raw)
    except errors.DecodeError:
        meta = raw.get("metadata") or {}
        return models.ResourceClaim(
            uid=names.ClaimUID(str(meta.get("uid") or "")),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            allocated=True,
        )


def _durable(done: list[object]) -> bool:
    return any(isinstance(s, models.WriteCheckpoint | models.WriteCDISpec) for s in done)


def api_unavailable(doing: str, exc: errors.ClusterError) -> errors.RetryableError:
    """The retryable error a prepare reports when an API call it needs failed."""
    return errors.RetryableError(
        f"the API server failed while {doing} ({exc}); retrying: check the API server and "
        "this node's network if it persists"
    )


def _unreadable_note(unreadable: tuple[names.ClaimUID, ...]) -> str:
    if not unreadable:
        return ""
    return (
        f"; {len(unreadable)} unreadable spec file(s) ({', '.join(unreadable)}) hold every "
        "IMEX channel until their claims are unprepared: inspect and delete those files if "
        "the claims are gone"
    )


# The steps `core.executing` (or the checkpoint store) runs; anything else is the half's own.
def _is_plugin_action(step: object) -> typing.TypeGuard[models.PluginAction[Any]]:
    return isinstance(step, models.PLUGIN_ACTION_TYPES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Degraded(Generic[P]):
    """The checkpoint cannot be written: its state in memory, and why no prepare is served."""

    checkpoint: models.Checkpoint[P]
    reason: str


class _AbandonedError(errors.PermanentError):
    """A prepare that must not finish: the kubelet gave up on it, or unprepared the claim."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _InFlight:
    """One claim's prepare as it runs: its kubelet call, and whether an unprepare overtook it."""

    ref: models.ClaimRef
    call: ports.KubeletCall | None
    overtaken: threading.Event


class _InFlightPrepares:
    """The prepares running now, by claim, so that an unprepare can tell them to give up.

    In memory only, and only for calls in progress (a restart ends every in-flight prepare
    anyway): nothing is kept about claims once their prepare calls returned.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tickets: dict[names.ClaimUID, list[threading.Event]] = {}

    @contextlib.contextmanager
    def tracking(
        self, uids: collections.abc.Iterable[names.ClaimUID]
    ) -> collections.abc.Iterator[dict[names.ClaimUID, threading.Event]]:
        """Register one prepare call's claims; yields each claim's "overtaken" flag."""
        tickets = {uid: threading.Event() for uid in uids}
        with self._lock:
            for uid, ticket in tickets.items():
                self._tickets.setdefault(uid, []).append(ticket)
        try:
            yield tickets
        finally:
            with self._lock:
                for uid, ticket in tickets.items():
                    held = self._tickets.get(uid, [])
                    if ticket in held:
                        held.remove(ticket)
                    if not held:
                        self._tickets.pop(uid, None)

    def overtake(self, uids: collections.abc.Iterable[names.ClaimUID]) -> None:
        """An unprepare of these claims arrived: every prepare of them in flight gives up."""
        with self._lock:
            for uid in uids:
                for ticket in self._tickets.get(uid, ()):
                    ticket.set()
