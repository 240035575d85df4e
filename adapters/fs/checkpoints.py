"""The node's checkpoint: a snapshot file and its journal, guarded by a node-wide lock.

`<path>` is the snapshot (replaced atomically, as today's single-file checkpoint was) and
`<path>.journal` the records appended since (one fsync per batch), so a prepare costs one
small append whatever the number of claims on the node. Every write also counts itself in the
lock file (`<path>.lock`, a write generation), so a process that cached what it last read
knows for certain whether another process (a rolling update's other plugin pod) wrote since:
file stamps alone can repeat (a reused inode, a coarse clock, the same size). The codecs
(version, checksum, shape, record lines) are `core.checkpoint`; this module only moves bytes
and never deletes a file it cannot read: a corrupt checkpoint is quarantined next to the
original (snapshot and journal both) so that a person can inspect it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from typing import TypeVar

from adapters.fs import _atomic
from core import checkpoint as checkpoint_codec
from core import models

logger = logging.getLogger(__name__)

P = TypeVar("P")

# Readable by the driver only: the checkpoint names claims and namespaces of the node.
CHECKPOINT_FILE_MODE = 0o600
LOCK_SUFFIX = ".lock"
JOURNAL_SUFFIX = ".journal"
QUARANTINE_INFIX = ".corrupt-"

# What identifies a file's current content cheaply: (inode, size, mtime ns); None if absent.
FileStamp = tuple[int, int, int] | None
# The write generation in the lock file: an unsigned 64-bit little-endian count at offset 0.
GENERATION_BYTES = 8


class FileCheckpointStore:
    """`core.ports.CheckpointStore` on a file; the lock is `flock` on `<path>.lock`."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.lock_path = self.path + LOCK_SUFFIX
        self.journal_path = self.path + JOURNAL_SUFFIX

    def __repr__(self) -> str:
        return f"FileCheckpointStore({self.path!r})"

    def read(self) -> bytes | None:
        return _read_if_present(self.path)

    def write(self, data: bytes) -> None:
        """Replace atomically and durably (temp + fsync + rename + directory fsync)."""
        self._ensure_directory()
        _atomic.write_atomically(self.path, data, mode=CHECKPOINT_FILE_MODE)
        self.count_write()

    def read_journal(self) -> bytes:
        """The journal's bytes (b"" when there is none)."""
        try:
            with open(self.journal_path, "rb") as journal_file:
                return journal_file.read()
        except FileNotFoundError:
            return b""

    def append(self, records: bytes, *, sync: bool = True) -> None:
        """Append record lines to the journal, durably unless `sync` is False (write +
        fdatasync; a new file's directory entry is fsynced too).

        An unsynced append reaches the disk with the next synced one (fdatasync flushes the
        whole file) or the kernel's writeback; a killed process never loses it.
        """
        created = not os.path.exists(self.journal_path)
        if created:
            self._ensure_directory()
        fd = os.open(
            self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
            CHECKPOINT_FILE_MODE,
        )
        try:
            _atomic.fault_point(_atomic.JOURNAL_APPEND)
            view = memoryview(records)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                _atomic.fault_point(_atomic.JOURNAL_FSYNC)
                os.fdatasync(fd)
        finally:
            os.close(fd)
            self.count_write()
        if created:
            _atomic.fault_point(_atomic.JOURNAL_CREATE_DIR_FSYNC)
            _atomic.fsync_directory_unmarked(os.path.dirname(self.path))

    def truncate_journal(self, length: int = 0) -> None:
        """Cut the journal to `length` bytes durably (0: after a compaction; more: a torn
        tail). No journal file: nothing to do."""
        try:
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            _atomic.fault_point(_atomic.JOURNAL_TRUNCATE)
            os.ftruncate(fd, length)
            os.fsync(fd)
        finally:
            os.close(fd)
            self.count_write()

    def stamps(self) -> tuple[int, FileStamp, FileStamp]:
        """(write generation, snapshot, journal) stamps: equal stamps mean nobody wrote them
        meanwhile (call with the lock held)."""
        return self._generation(), _stamp(self.path), _stamp(self.journal_path)

    def count_write(self) -> None:
        """Count one write in the lock file's write generation (call with the lock held).

        Not synced: the count only tells live processes apart; after a reboot nothing is
        cached. No lock file: nobody locked, so nobody cached what they read; nothing to count.
        NB: also after a failed write, which may have changed a file.
        """
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            count = _generation_of(os.pread(fd, GENERATION_BYTES, 0))
            os.pwrite(fd, ((count + 1) % 2**64).to_bytes(GENERATION_BYTES, "little"), 0)
        finally:
            os.close(fd)

    def _generation(self) -> int:
        try:
            with open(self.lock_path, "rb") as lock_file:
                return _generation_of(lock_file.read(GENERATION_BYTES))
        except FileNotFoundError:
            return 0

    def quarantine(self, *, suffix: str) -> str:
        """Rename the current file to `<path>.corrupt-<suffix>` and return that path.

        Never overwrites an earlier quarantined file: a clash gets `-1`, `-2`, ...
        appended. The journal, if any, goes beside it as `<that path>.journal`. Raises
        FileNotFoundError when there is no checkpoint to move.
        """
        if not suffix or "/" in suffix or "\0" in suffix:
            raise ValueError(f"quarantine suffix must be a plain file-name part, got {suffix!r}")
        target = self.path + QUARANTINE_INFIX + suffix
        candidate, attempt = target, 0
        while os.path.lexists(candidate):
            attempt += 1
            candidate = f"{target}-{attempt}"
        journal_moved = False
        if os.path.lexists(self.journal_path):
            os.rename(self.journal_path, candidate + JOURNAL_SUFFIX)
            journal_moved = True
        try:
            os.rename(self.path, candidate)
        except FileNotFoundError as exc:
            if not journal_moved:
                raise FileNotFoundError(
                    f"cannot quarantine checkpoint {self.path}: the file does not exist"
                ) from exc
        _atomic.fsync_directory(os.path.dirname(self.path))
        self.count_write()
        logger.warning("checkpoint quarantined path=%s moved_to=%s", self.path, candidate)
        return candidate

    def remove_temp_files(self) -> tuple[str, ...]:
        """Delete the temp files a killed write left beside the checkpoint; returns their paths.

        Only `.<checkpoint name>.*.tmp` (what `_atomic` creates for this file) is touched.
        Call at start-up, before anything writes.
        """
        return _atomic.remove_temp_files(os.path.dirname(self.path), os.path.basename(self.path))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive `flock` on `<path>.lock` (blocks until available).

        Node-wide: other processes and other threads (each call opens its own file
        description) wait. NB: not re-entrant; nesting `locked()` in one thread deadlocks.
        The lock file is never deleted (deleting it would let two holders lock different
        inodes).
        """
        self._ensure_directory()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, CHECKPOINT_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _ensure_directory(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)


class PredecessorFile:
    """`core.ports.PredecessorCheckpoint`: the shared-name file `path` beside `successor`."""

    def __init__(self, path: str, *, successor: FileCheckpointStore) -> None:
        self.path = os.path.abspath(path)
        self.journal_path = self.path + JOURNAL_SUFFIX
        self._successor = successor

    def __repr__(self) -> str:
        return f"PredecessorFile({self.path!r})"

    def read(self) -> bytes | None:
        return _read_if_present(self.path)

    def hand_over(self) -> None:
        """Rename journal, then snapshot: a kill between leaves the snapshot here and the
        journal there, and the next start moves the snapshot."""
        successor = self._successor
        if os.path.lexists(successor.path):
            raise FileExistsError(f"cannot hand {self.path} over: {successor.path} exists")
        if os.path.lexists(self.journal_path) and not os.path.lexists(successor.journal_path):
            os.rename(self.journal_path, successor.journal_path)
        os.rename(self.path, successor.path)
        successor.count_write()
        _atomic.fsync_directory(os.path.dirname(successor.path))
        logger.info("checkpoint handed over path=%s to=%s", self.path, successor.path)


def read_checkpoint(
    path: str, codec: models.RecordCodec[P]
) -> models.Checkpoint[P] | None:
    """The checkpoint at `path` of the half `codec` belongs to, as its plugin sees it
    (snapshot + journal; None if absent).

    For tools and tests that inspect a node; raises CheckpointCorruptError like the plugin's
    own read. A torn journal tail is ignored, not cut; so is a journal that follows another
    snapshot (stale), as the plugin ignores it.
    """
    store = FileCheckpointStore(path)
    raw = store.read()
    if raw is None:
        return None
    return checkpoint_codec.replay(
        checkpoint_codec.decode(raw, codec), store.read_journal(),
        snapshot=checkpoint_codec.snapshot_id(raw),
    ).checkpoint


def _generation_of(raw: bytes) -> int:
    """The write generation in the lock file's first bytes (0: none counted yet)."""
    return int.from_bytes(raw, "little") if len(raw) == GENERATION_BYTES else 0


def _stamp(path: str) -> FileStamp:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read_if_present(path: str) -> bytes | None:
    """The file's bytes, or None when there is no such file."""
    try:
        with open(path, "rb") as checkpoint_file:
            return checkpoint_file.read()
    except FileNotFoundError:
        return None
