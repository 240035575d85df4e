"""The checkpoint as its snapshot + journal on disk hold it, mirrored in memory.

Reads replay the journal onto the snapshot; writes append the changes as journal records, or
write a new snapshot once the journal outgrows the state (`core.compaction`). Equal stamps
under the node lock mean no other process wrote since we last read or wrote, so the state
is served from memory (no re-read, no re-parse). What a read that fails means is decided by
`apps.pluginkit.checkpoint_keeper`; this module only tells it what it found.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import gc
import logging
from typing import Generic, TypeVar

from core import checkpoint as checkpoint_codec
from core import compaction, errors, models, ports

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Loaded(Generic[RecordT]):
    """What the snapshot + journal hold.

    `uncut`: the journal's torn or stale tail could not be cut, so nothing more may be
    written (the next append would follow the uncut bytes).
    """

    checkpoint: models.Checkpoint[RecordT]
    uncut: OSError | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Missing:
    """No checkpoint file exists."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unreadable:
    """The file is there but cannot be read (a directory in its place, no permission, EIO)."""

    error: OSError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Corrupt:
    """The snapshot or its journal fails the version/checksum/shape checks."""

    error: errors.CheckpointCorruptError


@dataclasses.dataclass(frozen=True, kw_only=True)
class LostJournal(Generic[RecordT]):
    """The snapshot says a journal follows it, but there is none or it is empty."""

    snapshot: models.Checkpoint[RecordT]


Found = Loaded[RecordT] | Missing | Unreadable | Corrupt | LostJournal[RecordT]


class JournaledState(Generic[RecordT]):
    """Reads and writes the node's checkpoint; call every method with the node lock held."""

    def __init__(
        self, store: ports.CheckpointJournal, *, codec: models.RecordCodec[RecordT],
        node_name: str,
    ) -> None:
        self._store = store
        self._codec = codec
        self._node_name = node_name
        # What the snapshot + journal on disk hold (indexed), and their stamps when we last
        # read or wrote them.
        self._checkpoint: models.Checkpoint[RecordT] | None = None
        self._stamps: object = None
        self._journal_records = 0
        # The id of the snapshot on disk: the first record of a new journal names it.
        self._snapshot_id = ""

    def read(self) -> Found[RecordT]:
        """What the files hold now (from memory when nobody else wrote them since)."""
        store = self._store
        if self._checkpoint is not None and store.stamps() == self._stamps:
            return Loaded(checkpoint=self._checkpoint)
        self._checkpoint = None
        try:
            raw = store.read()
            journal = store.read_journal() if raw is not None else b""
        except OSError as exc:
            return Unreadable(error=exc)
        if raw is None:
            return Missing()
        snapshot = checkpoint_codec.snapshot_id(raw)
        try:
            with _collector_paused():
                decoded = checkpoint_codec.decode(
                    raw, self._codec, check_journal_mark=not journal
                )
                if not journal and checkpoint_codec.expects_journal(decoded):
                    return LostJournal(snapshot=decoded)
                replayed = checkpoint_codec.replay(decoded, journal, snapshot=snapshot)
        except errors.CheckpointCorruptError as exc:
            return Corrupt(error=exc)
        self._snapshot_id = snapshot
        if replayed.stale:
            log.warning(
                "event=checkpoint_journal_stale node=%s action=emptied bytes=%d reason=%r",
                self._node_name, len(journal),
                "it follows another snapshot (a compaction killed before emptying it, or a "
                "snapshot rewritten by an older plugin)",
            )
        if replayed.valid_length < len(journal):
            # The last append was torn (a kill or power loss before its fsync returned, so it
            # was never acknowledged): cut it, or the next append would follow garbage.
            if not replayed.stale:
                log.warning(
                    "event=checkpoint_journal_torn_tail node=%s kept_records=%d cut_bytes=%d",
                    self._node_name, replayed.records, len(journal) - replayed.valid_length,
                )
            try:
                store.truncate_journal(replayed.valid_length)
            except OSError as exc:
                # A later read would drop or reject the whole journal: the caller stops writing.
                log.error("event=checkpoint_journal_cut_failed error=%r", str(exc))
                return Loaded(checkpoint=replayed.checkpoint, uncut=exc)
        self._remember(replayed.checkpoint, records=replayed.records)
        assert self._checkpoint is not None
        return Loaded(checkpoint=self._checkpoint)

    def persist(self, step: models.WriteCheckpoint[RecordT]) -> None:
        """Make `step.checkpoint` durable: its changes appended to the journal, or a snapshot."""
        before, after = self._checkpoint, step.checkpoint
        if before is None:
            self.write_snapshot(after)
            return
        records = checkpoint_codec.encode_records(before, after, changed=step.changed)
        count = records.count(b"\n")
        if compaction.needs_compaction(
            journal_records=self._journal_records, appended=count, claims=len(after.entries)
        ):
            self.write_snapshot(after)
            return
        if self._journal_records == 0 and records:
            records = checkpoint_codec.base_record(self._snapshot_id) + records
            count += 1
        # An empty append still proves the journal writable (recover's check at start-up).
        self._store.append(records, sync=step.durable)
        self._remember(after, records=self._journal_records + count)

    def write_snapshot(
        self, cp: models.Checkpoint[RecordT], *, journaled: bool = True,
        version: int = checkpoint_codec.VERSION,
    ) -> None:
        """Write `cp` as the new snapshot, then start the journal anew with its base record
        (`journaled`: the snapshot says so, see `checkpoint.expects_journal`) or empty it.
        `version` 1: the format the previous release reads (the snapshot of a graceful stop).

        A kill in between leaves the new snapshot and the old journal, whose records hold
        absolute values the snapshot already has: replaying them changes nothing.
        NB: a kill between emptying the journal and its base record looks like a lost journal
        at the next start: state is rebuilt from the CDI specs, as complete as the snapshot.
        """
        store = self._store
        data = checkpoint_codec.encode(cp, journaled=journaled, version=version)
        store.write(data)
        self._snapshot_id = checkpoint_codec.snapshot_id(data)
        store.truncate_journal(0)
        records = 0
        if journaled:
            store.append(checkpoint_codec.base_record(self._snapshot_id))
            records = 1
        self._remember(dataclasses.replace(cp, format_version=version), records=records)

    def fold_journal(self, current: models.Checkpoint[RecordT]) -> bool:
        """Write `current` as a snapshot no journal follows, in format version 1, if a
        journal holds anything or the snapshot is in this release's format.

        Afterwards the snapshot alone holds every claim, in the format the previous release
        reads (version 1, without the journal): a downgrade after a graceful stop keeps every
        claim. The next start rewrites it in this release's format. Returns whether it wrote.
        """
        if not (
            self._journal_records or self._store.read_journal()
            or current.format_version != 1
        ):
            return False
        self.write_snapshot(current, journaled=False, version=1)
        return True

    def _remember(self, cp: models.Checkpoint[RecordT], *, records: int) -> None:
        """`cp` is what the snapshot + journal now hold."""
        with _collector_paused():  # the index allocates O(claims) objects too, all kept
            self._checkpoint = checkpoint_codec.indexed(cp)
        self._journal_records = records
        self._stamps = self._store.stamps()


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
