"""Prepared state rebuilt from the CDI specs when the checkpoint is lost, corrupt or unreadable.

A CDI spec of ours proves its claim was prepared, so such state is never forgotten: the half
turns the specs into entries (`ClaimHalf.rebuild_from_cdi`), a bad file is moved aside (never
deleted), the rebuilt state is written as a new snapshot, and the operator gets a log line and
a Node event. What the evidence means is `core.checkpoint_recovery`'s to decide. Where the new
snapshot cannot be written, the result says so and the keeper enters the degraded mode.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from apps.pluginkit import claim_half, degraded, journaled_state, node_events
from core import checkpoint_recovery, errors, models, names, ports, upstream_checkpoint

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)

# How the takeover Event names the layout it read.
_FORMATS = {
    upstream_checkpoint.Format.V2: "upstream's v2 format",
    upstream_checkpoint.Format.V1: "upstream's v1 format of 25.3.x: no claim names or boot ID",
    upstream_checkpoint.Format.RC2503: "upstream's 25.3.0-rc.2 format: no claim names or boot ID",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recovered(Generic[RecordT]):
    """The state to go on with, and why it could not be written (then: degraded)."""

    checkpoint: models.Checkpoint[RecordT]
    unwritable: degraded.Unwritable | None = None


class CheckpointRecovery(Generic[RecordT]):
    """The four recoveries; call each with the node lock held."""

    def __init__(
        self,
        *,
        half: claim_half.HalfCheckpoint[RecordT],
        store: ports.CheckpointJournal,
        state: journaled_state.JournaledState[RecordT],
        cdi: ports.CDIStore,
        events: node_events.NodeEvents,
        node_name: str,
        boot_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._half = half
        self._store = store
        self._state = state
        self._cdi = cdi
        self._events = events
        self._node_name = node_name
        self._boot_id = boot_id
        self._clock = clock

    def missing(self) -> models.Checkpoint[RecordT]:
        """No file: a first start, or the file was deleted while specs of ours remain."""
        meaning = checkpoint_recovery.missing_checkpoint(self._cdi.claim_uids())
        if meaning is checkpoint_recovery.MissingCheckpoint.FIRST_START:
            return self._half.empty_checkpoint(boot_id=self._boot_id)
        rebuilt, unreadable = self._rebuild_from_cdi()
        log.error(
            "event=checkpoint_missing node=%s rebuilt_claims=%d unreadable_specs=%d",
            self._node_name, len(rebuilt.entries), len(unreadable),
        )
        self._events.emit(
            "CheckpointMissing",
            f"checkpoint file was missing although CDI specs exist; prepared state rebuilt "
            f"from {len(rebuilt.entries)} CDI spec file(s)"
            f"{checkpoint_recovery.unreadable_specs_note(unreadable)}",
        )
        return rebuilt

    def takeover(self, data: bytes) -> Recovered[RecordT]:
        """Upstream's plugin left `checkpoint.json`: adopt its prepared claims (their CDI
        specs stay upstream's files until unprepare) and write our own checkpoint beside it.

        Upstream's file is never written or moved. Claims with a CDI spec of ours as well
        (this plugin ran here before) keep what our spec proves.
        """
        try:
            upstream = upstream_checkpoint.decode(data)
        except errors.CheckpointCorruptError as exc:
            log.error("event=upstream_checkpoint_corrupt node=%s action=left_untouched "
                      "reason=%r", self._node_name, exc.message)
            self._events.emit("UpstreamCheckpointUnreadable", exc.message)
            return Recovered(checkpoint=self.missing())
        now = self._clock()
        adoption = self._half.adopt_upstream(upstream, boot_id=self._boot_id, now=now)
        adopted = adoption.checkpoint
        if self._cdi.claim_uids():
            rebuilt, _ = self._rebuild_from_cdi()
            adopted = dataclasses.replace(
                adopted, entries={**adopted.entries, **rebuilt.entries}, index=None
            )
        try:
            self._state.write_snapshot(adopted)
        except OSError as exc:
            return _unwritable(
                adopted, path=exc.filename, problem="it could not be written at takeover",
                cause=exc,
            )
        log.warning(
            "event=upstream_checkpoint_adopted node=%s claims=%d upstream_boot_id=%s "
            "upstream_format=%s",
            self._node_name, len(upstream.claims), upstream.boot_id, upstream.format.value,
        )
        self._events.emit(
            "UpstreamCheckpointAdopted",
            f"took over {len(upstream.claims)} claim(s) from the upstream plugin's "
            f"checkpoint.json ({_FORMATS[upstream.format]}; left untouched for a rollback)",
        )
        for notice in adoption.notices:
            log.warning(
                "event=upstream_claim_notice node=%s claim_uid=%s reason=%s message=%r",
                self._node_name, notice.claim_uid, notice.reason, notice.message,
            )
            self._events.emit(notice.reason, notice.message)
        return Recovered(checkpoint=adopted)

    def unreadable(self, exc: OSError) -> Recovered[RecordT]:
        """Same rule as a corrupt file: move it aside, rebuild from CDI files, keep serving."""
        rebuilt, unreadable = self._rebuild_from_cdi()
        problem = f"{type(exc).__name__}: {exc.strerror or exc}"
        try:
            moved_to = self._store.quarantine(suffix=f"{int(self._clock())}")
            self._state.write_snapshot(rebuilt)
        except OSError as write_exc:
            return _unwritable(rebuilt, path=exc.filename, problem=problem, cause=write_exc)
        log.error(
            "event=checkpoint_unreadable node=%s path=%s moved_to=%s rebuilt_claims=%d "
            "unreadable_specs=%d error=%r",
            self._node_name, exc.filename, moved_to, len(rebuilt.entries), len(unreadable),
            problem,
        )
        self._events.emit(
            "CheckpointUnreadable",
            f"checkpoint {exc.filename} could not be read ({problem}); it was moved to "
            f"{moved_to} and prepared state rebuilt from {len(rebuilt.entries)} CDI spec "
            f"file(s){checkpoint_recovery.unreadable_specs_note(unreadable)}",
        )
        return Recovered(checkpoint=rebuilt)

    def corrupt(self, exc: errors.CheckpointCorruptError) -> Recovered[RecordT]:
        """Move the corrupt file aside and rebuild from CDI files."""
        # NB: rebuild before moving the file aside: if reading the CDI root fails, the corrupt
        # checkpoint stays in place and the next call tries again instead of starting empty.
        rebuilt, unreadable = self._rebuild_from_cdi()
        try:
            moved_to = self._store.quarantine(suffix=f"{int(self._clock())}")
            self._state.write_snapshot(rebuilt)
        except OSError as write_exc:
            return _unwritable(rebuilt, path=None, problem=exc.message, cause=write_exc)
        log.error(
            "event=checkpoint_corrupt node=%s moved_to=%s rebuilt_claims=%d unreadable_specs=%d "
            "reason=%r",
            self._node_name, moved_to, len(rebuilt.entries), len(unreadable), exc.message,
        )
        self._events.emit(
            "CheckpointCorrupt",
            f"checkpoint was corrupt and moved to {moved_to}; prepared state rebuilt "
            f"from {len(rebuilt.entries)} CDI spec file(s)"
            f"{checkpoint_recovery.unreadable_specs_note(unreadable)}",
        )
        return Recovered(checkpoint=rebuilt)

    def lost_journal(self, snapshot: models.Checkpoint[RecordT]) -> Recovered[RecordT]:
        """Someone else deleted or emptied the journal, and with it every claim acknowledged
        since the snapshot. As for a lost snapshot: rebuild from the CDI specs (never delete
        them as orphans), and say so with an event."""
        rebuilt, unreadable = self._rebuild_from_cdi()
        rebuilt = checkpoint_recovery.after_lost_journal(rebuilt, snapshot=snapshot)
        try:
            self._state.write_snapshot(rebuilt)
        except OSError as exc:
            return _unwritable(
                rebuilt, path=exc.filename, problem="its journal was deleted or emptied", cause=exc
            )
        log.error(
            "event=checkpoint_journal_lost node=%s rebuilt_claims=%d unreadable_specs=%d",
            self._node_name, len(rebuilt.entries), len(unreadable),
        )
        self._events.emit(
            "CheckpointJournalLost",
            "the checkpoint journal was deleted or emptied by something other than this plugin "
            "(the snapshot expects one); prepared state rebuilt from "
            f"{len(rebuilt.entries)} CDI spec file(s)"
            f"{checkpoint_recovery.unreadable_specs_note(unreadable)}",
        )
        return Recovered(checkpoint=rebuilt)

    def _rebuild_from_cdi(
        self,
    ) -> tuple[models.Checkpoint[RecordT], tuple[names.ClaimUID, ...]]:
        """The checkpoint the CDI root proves, and the spec files of ours it could not read."""
        specs: dict[names.ClaimUID, Mapping[str, object]] = {}
        unreadable: list[names.ClaimUID] = []
        for uid in sorted(self._cdi.claim_uids()):
            try:
                spec = self._cdi.read(uid)
            except (errors.DecodeError, OSError) as exc:
                # Something was prepared for this claim, but what is unknown: the half's
                # rebuild keeps it held until the kubelet unprepares the claim.
                log.error(
                    "event=cdi_spec_unreadable node=%s claim_uid=%s action=%s error=%r",
                    self._node_name, uid, self._half.unreadable_spec_action, str(exc),
                )
                unreadable.append(uid)
                continue
            if spec is not None:
                specs[uid] = spec
        rebuilt = self._half.rebuild_from_cdi(
            specs, unreadable=tuple(unreadable), boot_id=self._boot_id, now=self._clock()
        )
        return rebuilt, tuple(unreadable)


def _unwritable(
    rebuilt: models.Checkpoint[RecordT], *, path: object, problem: str, cause: OSError
) -> Recovered[RecordT]:
    return Recovered(
        checkpoint=rebuilt,
        unwritable=degraded.Unwritable(path=path, problem=problem, cause=cause),
    )
