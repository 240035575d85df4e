"""The one place `adapters.fs` writes files: temp file in the same directory, fsync, rename.

A reader (the plugin after a crash, a container runtime scanning the CDI root) must only
ever see the old bytes or the new bytes, never a torn file. POSIX gives that with a
temp file in the same directory + `os.replace`; durability across power loss also needs
the file fsynced before the rename and the directory fsynced after it.

NB: temp files are named `.<target>.<random>.tmp`: hidden, and never ending in `.json`
or `.yaml`, so neither our own scans nor a CDI runtime mistake one for a real file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: str) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, *, mode: int) -> None:
    """Replace `path` with `data` so that readers see either the old or the new content.

    The file gets permission bits `mode` (not subject to the umask). The parent
    directory must exist. On any failure the temp file is removed and `path` is untouched.
    """
    directory, base = os.path.split(os.path.abspath(path))
    fd, temp_path = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as temp_file:
            os.fchmod(temp_file.fileno(), mode)
            temp_file.write(data)
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
    fsync_directory(directory)
