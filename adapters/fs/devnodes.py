"""Character device nodes as a GPU container gets them (path, major, minor, mode)."""

from __future__ import annotations

import os
import stat

from core.gpu import devices


class NotACharDevice(ValueError):
    """The path exists but is not a character device."""


def char_device(dev_root: str, path: str) -> devices.DeviceNode:
    """The node at `path` as seen under `dev_root`, described by its host path `path`.

    Raises OSError (FileNotFoundError when absent) from the stat, NotACharDevice otherwise.
    """
    seen_at = os.path.join(dev_root, path.lstrip("/"))
    info = os.stat(seen_at)
    if not stat.S_ISCHR(info.st_mode):
        raise NotACharDevice(seen_at)
    return devices.DeviceNode(
        path=path,
        major=os.major(info.st_rdev),
        minor=os.minor(info.st_rdev),
        file_mode=stat.S_IMODE(info.st_mode),
    )
