"""Whole-file writes a concurrent reader (nvidia-imex, a resolver) sees old or new, never half."""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_text(path: str, text: str, *, mode: int = 0o644) -> bool:
    """Replace `path` with `text` (temp file + fsync + rename); False when it already held it."""
    if read_text(path) == text:
        return False
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return True


def write_in_place(path: str, text: str) -> bool:
    """Overwrite `path`'s content without replacing the inode; False when unchanged.

    NB: a container's /etc/hosts is a bind mount: renaming over it fails (EBUSY), so it is
    rewritten in place.
    """
    if read_text(path) == text:
        return False
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return True


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
