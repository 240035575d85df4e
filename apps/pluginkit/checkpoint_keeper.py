"""The node's checkpoint as prepares and unprepares see it: loaded, recovered, persisted.

`CheckpointKeeper` answers "what is prepared here now" (applying the reboot rule and expiring
old tombstones), routes a failed read to its recovery (`checkpoint_recovery`), makes planned
writes durable (it is the `ports.CheckpointRecorder` the executor writes through), and keeps
the state in memory once the checkpoint cannot be written (`degraded`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from apps.pluginkit import checkpoint_recovery, claim_half, degraded, journaled_state, node_events
from core import checkpoint as checkpoint_codec
from core import models, ports, upstream_checkpoint

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)


class CheckpointKeeper(Generic[RecordT]):
    """Loads and writes the checkpoint; call every method but `locked` with the lock held."""

    def __init__(
        self,
        *,
        half: claim_half.HalfCheckpoint[RecordT],
        store: ports.CheckpointJournal,
        cdi: ports.CDIStore,
        events: node_events.NodeEvents,
        node_name: str,
        boot_id: str,
        clock: Callable[[], float],
        predecessor: ports.PredecessorCheckpoint | None = None,
    ) -> None:
        self._store = store
        self._predecessor = predecessor
        self._cdi = cdi
        self._events = events
        self._node_name = node_name
        self._boot_id = boot_id
        self._clock = clock
        self._state = journaled_state.JournaledState(
            store, codec=half.codec, node_name=node_name
        )
        self._recovery = checkpoint_recovery.CheckpointRecovery(
            half=half, store=store, state=self._state, cdi=cdi, events=events,
            node_name=node_name, boot_id=boot_id, clock=clock,
        )
        self._degraded: degraded.Degraded[RecordT] | None = None

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The node-wide lock around a read-modify-write of the checkpoint."""
        return self._store.locked()

    @property
    def degraded_reason(self) -> str | None:
        """Why no prepare is served (the checkpoint cannot be written), or None."""
        return self._degraded.reason if self._degraded is not None else None

    def load(self) -> models.Checkpoint[RecordT]:
        """Read the checkpoint; a corrupt one is moved aside and rebuilt from CDI files.

        Also applies the boot-ID rule (a reboot drops prepared state) and expires old
        tombstones.
        """
        current = self._degraded.checkpoint if self._degraded is not None else self._read()
        fresh = checkpoint_codec.after_boot(current, boot_id=self._boot_id)
        if fresh is not current and fresh.entries.keys() != current.entries.keys():
            log.warning(
                "event=node_rebooted node=%s dropped_claims=%d",
                self._node_name, len(current.entries) - len(fresh.entries),
            )
        return checkpoint_codec.expire_tombstones(fresh, now=self._clock())

    def record(self, step: models.WriteCheckpoint[RecordT]) -> None:
        """Make a planned checkpoint durable; while degraded, only remember it in memory."""
        if self._degraded is not None:
            # Nothing can be written: the checkpoint lives in memory; files and API act.
            self._degraded = dataclasses.replace(self._degraded, checkpoint=step.checkpoint)
        else:
            self._state.persist(step)

    def recover(self) -> models.Checkpoint[RecordT]:
        """Start-up pass: load (and repair) the checkpoint, persist it, drop orphan CDI specs.

        A CDI spec of ours that no PrepareStarted/Completed entry holds (its entry was dropped
        by a reboot, say) is deleted, so it can never be rebuilt into a blocking entry later.
        """
        current = self.load()
        try:
            self.record(models.WriteCheckpoint(checkpoint=current))
        except OSError as exc:
            self._enter_degraded(current, degraded.Unwritable(
                path=exc.filename, problem="it can be read but not replaced", cause=exc
            ))
        orphans = checkpoint_codec.orphan_cdi_specs(
            current, spec_claim_uids=self._cdi.claim_uids()
        )
        for uid in orphans:
            log.warning(
                "event=orphan_cdi_spec_deleted node=%s claim_uid=%s", self._node_name, uid
            )
            self._cdi.delete(uid)
        return current

    def compact(self) -> None:
        """Fold the journal into the snapshot (at a graceful stop).

        Afterwards the snapshot (`<half>-plugin.checkpoint.json`) alone holds every claim, in
        the format plugins before the journal read: renamed back to `checkpoint.json`, it is
        what a downgrade to such a release keeps every claim from (docs/operations.md).
        """
        if self._degraded is not None:
            return
        current = self._read()
        if self._state.fold_journal(current):
            log.info(
                "event=checkpoint_compacted node=%s claims=%d",
                self._node_name, len(current.entries),
            )

    def _read(self) -> models.Checkpoint[RecordT]:
        match self._state.read():
            case journaled_state.Loaded(checkpoint=current, uncut=uncut):
                if uncut is not None:
                    # The next append would follow the uncut bytes, and
                    # a later read would drop or reject the whole journal: nothing more is
                    # written (as if unwritable).
                    self._enter_degraded(current, degraded.Unwritable(
                        path=uncut.filename,
                        problem="its journal's torn or stale tail could not be cut",
                        cause=uncut,
                    ))
                return current
            case journaled_state.Missing():
                return self._missing()
            case journaled_state.Unreadable(error=exc):
                return self._settle(self._recovery.unreadable(exc))
            case journaled_state.Corrupt(error=corrupt):
                return self._settle(self._recovery.corrupt(corrupt))
            case journaled_state.LostJournal(snapshot=snapshot):
                return self._settle(self._recovery.lost_journal(snapshot))

    def _missing(self) -> models.Checkpoint[RecordT]:
        """No checkpoint of ours: take over what `checkpoint.json` holds, if anything.

        Our earlier release's file is renamed to our name and read as ever (its format
        upgrade included); upstream's is imported and left untouched, so a rollback finds it
        as upstream left it; anything else is left alone and the CDI specs decide.
        """
        found = None
        if self._predecessor is not None:
            try:
                found = self._predecessor.read()
            except OSError as exc:
                log.error("event=predecessor_checkpoint_unreadable node=%s error=%r",
                          self._node_name, str(exc))
        if found is None:
            return self._recovery.missing()
        origin = upstream_checkpoint.origin(found)
        if origin is upstream_checkpoint.Origin.OURS:
            assert self._predecessor is not None
            try:
                self._predecessor.hand_over()
            except OSError as exc:
                log.error("event=checkpoint_handover_failed node=%s error=%r",
                          self._node_name, str(exc))
                return self._recovery.missing()
            log.info("event=checkpoint_renamed node=%s", self._node_name)
            return self._read()
        if origin is upstream_checkpoint.Origin.UPSTREAM:
            return self._settle(self._recovery.takeover(found))
        log.warning(
            "event=predecessor_checkpoint_unknown node=%s action=left_untouched",
            self._node_name,
        )
        return self._recovery.missing()

    def _settle(
        self, recovered: checkpoint_recovery.Recovered[RecordT]
    ) -> models.Checkpoint[RecordT]:
        if recovered.unwritable is not None:
            self._enter_degraded(recovered.checkpoint, recovered.unwritable)
        return recovered.checkpoint

    def _enter_degraded(
        self, current: models.Checkpoint[RecordT], why: degraded.Unwritable
    ) -> None:
        self._degraded = degraded.Degraded(checkpoint=current, reason=why.reason)
        log.error(
            "event=checkpoint_unwritable node=%s path=%s action=serving_no_prepares error=%r",
            self._node_name, why.where, why.problem,
        )
        self._events.emit("CheckpointUnwritable", why.reason)

