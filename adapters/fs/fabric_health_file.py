"""The kubelet plugin's NVLink fabric judgment, left for the node's IMEX daemons.

Each driver-managed daemon pod mounts its domain's directory (`<plugin dir>/domains/<cdUID>`)
at `/imexd` but is given no NVML, so the plugin writes its judgment there as
`fabric-health.json` (`core.computedomain.fabric_health.encode`) and the daemon reads it.
Written atomically (temp file + rename): a reader sees the old or the new judgment, never a
torn one. Not fsynced: the plugin rewrites every file at start.
"""

from __future__ import annotations

import contextlib
import os

from adapters.fs import _atomic
from core.computedomain import fabric_health

FILE_NAME = fabric_health.FILE_NAME


def write(directory: str, health: fabric_health.FabricHealth | None) -> None:
    """Leave `health` in `directory` (None: no judgment, remove the file). The directory must
    exist."""
    path = os.path.join(directory, FILE_NAME)
    if health is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    _atomic.write_atomically(path, fabric_health.encode(health), mode=0o644, durable=False)


def remove_temp_files(directory: str) -> tuple[str, ...]:
    """Delete what a write killed half-way left in `directory` (its paths)."""
    return _atomic.remove_temp_files(directory, FILE_NAME)


def domain_dirs(root: str) -> tuple[str, ...]:
    """The per-domain directories under `root` now (none when it does not exist)."""
    try:
        entries = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    return tuple(
        os.path.join(root, entry) for entry in entries
        if not entry.startswith(".") and os.path.isdir(os.path.join(root, entry))
    )


def read(directory: str) -> fabric_health.FabricHealth | None:
    """The judgment left in `directory`; None when there is none. Raises DecodeError for a
    file that is not a judgment, OSError for one that cannot be read."""
    try:
        with open(os.path.join(directory, FILE_NAME), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    return fabric_health.decode(data)
