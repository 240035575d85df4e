"""The node's checkpoint file: raw bytes, written atomically, guarded by a node-wide lock.

The codec (version, checksum, shape) is `core.checkpoint`; this module only moves bytes
and never deletes a file it cannot read: a corrupt checkpoint is quarantined next to
the original so that a person can inspect it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator

from adapters.fs import _atomic

logger = logging.getLogger(__name__)

# Readable by the driver only: the checkpoint names claims and namespaces of the node.
CHECKPOINT_FILE_MODE = 0o600
LOCK_SUFFIX = ".lock"
QUARANTINE_INFIX = ".corrupt-"


class FileCheckpointStore:
    """`core.ports.CheckpointStore` on a file; the lock is `flock` on `<path>.lock`."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.lock_path = self.path + LOCK_SUFFIX

    def __repr__(self) -> str:
        return f"FileCheckpointStore({self.path!r})"

    def read(self) -> bytes | None:
        try:
            with open(self.path, "rb") as checkpoint_file:
                return checkpoint_file.read()
        except FileNotFoundError:
            return None

    def write(self, data: bytes) -> None:
        """Replace atomically and durably (temp + fsync + rename + directory fsync)."""
        self._ensure_directory()
        _atomic.write_atomically(self.path, data, mode=CHECKPOINT_FILE_MODE)

    def quarantine(self, *, suffix: str) -> str:
        """Rename the current file to `<path>.corrupt-<suffix>` and return that path.

        Never overwrites an earlier quarantined file: a clash gets `-1`, `-2`, ...
        appended. Raises FileNotFoundError when there is no checkpoint to move.
        """
        if not suffix or "/" in suffix or "\0" in suffix:
            raise ValueError(f"quarantine suffix must be a plain file-name part, got {suffix!r}")
        target = self.path + QUARANTINE_INFIX + suffix
        candidate, attempt = target, 0
        while os.path.lexists(candidate):
            attempt += 1
            candidate = f"{target}-{attempt}"
        try:
            os.rename(self.path, candidate)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"cannot quarantine checkpoint {self.path}: the file does not exist"
            ) from exc
        _atomic.fsync_directory(os.path.dirname(self.path))
        logger.warning("checkpoint quarantined path=%s moved_to=%s", self.path, candidate)
        return candidate

    def remove_temp_files(self) -> tuple[str, ...]:
        """Delete the temp files a killed write left beside the checkpoint; returns their paths.

        Only `.<checkpoint name>.*.tmp` (what `_atomic` creates for this file) is touched.
        Call at start-up, before anything writes.
        """
        return _remove_temp_files(os.path.dirname(self.path), os.path.basename(self.path))

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


def _remove_temp_files(directory: str, target_prefix: str) -> tuple[str, ...]:
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    removed = []
    for entry in sorted(entries):
        if entry.startswith(f".{target_prefix}") and entry.endswith(_atomic.TEMP_SUFFIX):
            path = os.path.join(directory, entry)
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(path)
                removed.append(path)
    if removed:
        _atomic.fsync_directory(directory)
    return tuple(removed)
