"""The one place `adapters.fs` writes files: temp file in the same directory, fsync, rename.

A reader (the plugin after a crash, a container runtime scanning the CDI root) must only
ever see the old bytes or the new bytes, never a torn file. POSIX gives that with a
temp file in the same directory + `os.replace`; durability across power loss also needs
the file fsynced before the rename and the directory fsynced after it.

NB: temp files are named `.<target>.<random>.tmp`: hidden, and never ending in `.json`
or `.yaml`, so neither our own scans nor a CDI runtime mistake one for a real file.

Fault injection (`make faults`): `CD_DRA_FAULT=<point>:<n>` SIGKILLs this process at the
n-th hit of one durable step, and `CD_DRA_FAULT_TRACE=<file>` appends every hit's point
name to that file, so a harness can learn the order of steps and then kill at each one.
Both are read once at import; unset, each step costs one test of a module-level bool.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from typing import Final

from core import names
from core.gpu import cdi as gpu_cdi

TEMP_SUFFIX = ".tmp"

FAULT_ENV: Final = "CD_DRA_FAULT"
FAULT_TRACE_ENV: Final = "CD_DRA_FAULT_TRACE"

# The durable steps of `write_atomically`, each killed *before* it runs, per file kind.
WRITE_STEPS: Final = ("tmp-write", "fsync", "rename", "dir-fsync")
FILE_KINDS: Final = ("checkpoint", "cdi")
# Points outside `write_atomically`: `fsync_directory` called on its own (after a CDI spec
# was unlinked, or a checkpoint renamed into quarantine), and the CDI delete itself, which
# `adapters/fs/cdi.py` announces with `fault_point(CDI_UNLINK)` before unlinking.
UNLINKED_DIR_FSYNC: Final = "unlinked.dir-fsync"
CDI_UNLINK: Final = "cdi.unlink"
# The checkpoint journal's durable steps (`adapters/fs/checkpoints.py`): the append of a
# record batch, its fsync, the directory fsync that makes a new journal file durable, and
# the truncation that empties it after a compaction or cuts a torn tail.
JOURNAL_APPEND: Final = "journal.append"
JOURNAL_FSYNC: Final = "journal.fsync"
JOURNAL_CREATE_DIR_FSYNC: Final = "journal.dir-fsync"
JOURNAL_TRUNCATE: Final = "journal.truncate"
JOURNAL_POINTS: Final = (JOURNAL_APPEND, JOURNAL_FSYNC, JOURNAL_CREATE_DIR_FSYNC, JOURNAL_TRUNCATE)
# The GPU half's device actions that outlive the plugin (a GPU's compute mode, an MPS control
# daemon's Deployment): not file writes, but steps a kill between must leave undoable. The GPU
# plugin marks each right before it runs (`apps.gpuplugin.fault_marked`).
COMPUTE_MODE: Final = "gpu.compute-mode"
MPS_START: Final = "mps.start"
MPS_AWAIT: Final = "mps.await"
MPS_STOP: Final = "mps.stop"
# Dynamic MIG: a MIG device created or destroyed on the GPU.
MIG_CREATE: Final = "mig.create"
MIG_DESTROY: Final = "mig.destroy"
# Fabric Manager partition (de)activation; `fm.activated` right after an activation returned,
# before anything else: the window a partition is active that a later step must account for.
FM_ACTIVATE: Final = "fm.activate"
FM_ACTIVATED: Final = "fm.activated"
FM_DEACTIVATE: Final = "fm.deactivate"
GPU_ACTION_POINTS: Final = (
    COMPUTE_MODE, MPS_START, MPS_AWAIT, MPS_STOP, MIG_CREATE, MIG_DESTROY, FM_ACTIVATE,
    FM_ACTIVATED, FM_DEACTIVATE,
)
FAULT_POINTS: Final = (
    *(f"{kind}.{step}" for kind in FILE_KINDS for step in WRITE_STEPS),
    CDI_UNLINK,
    UNLINKED_DIR_FSYNC,
    *JOURNAL_POINTS,
    *GPU_ACTION_POINTS,
)

# Both halves' CDI spec files (the rest written here are checkpoints).
_CDI_PREFIXES: Final = tuple(
    spec_file_name("").rsplit(".", 1)[0]
    for spec_file_name in (names.cdi_spec_file_name, gpu_cdi.spec_file_name)
)


def is_temp_file(name: str, target_prefix: str = "") -> bool:
    """Whether `name` is a temp file `write_atomically` made for a target whose name starts
    with `target_prefix` (any target when empty)."""
    return name.startswith(f".{target_prefix}") and name.endswith(TEMP_SUFFIX)


def remove_temp_files(directory: str, target_prefix: str) -> tuple[str, ...]:
    """Delete the temp files that killed writes (targets starting `target_prefix`) left.

    Returns their paths; a missing directory has none.
    """
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    removed = []
    for entry in sorted(entries):
        if is_temp_file(entry, target_prefix):
            path = os.path.join(directory, entry)
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(path)
                removed.append(path)
    if removed:
        fsync_directory(directory)
    return tuple(removed)


def parse_fault(text: str) -> tuple[str, int]:
    """`<point>:<n>` -> (point, n); ValueError saying what is wrong for anything else."""
    point, sep, count = text.strip().rpartition(":")
    if not sep or point not in FAULT_POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"{FAULT_ENV}={text!r} is not <point>:<n> with n >= 1 and point one of "
            f"{', '.join(FAULT_POINTS)}"
        )
    return point, int(count)


_FAULT: Final = parse_fault(os.environ[FAULT_ENV]) if os.environ.get(FAULT_ENV) else None
_TRACE_PATH: Final = os.environ.get(FAULT_TRACE_ENV, "")
_ARMED: Final = _FAULT is not None or bool(_TRACE_PATH)
_hits: dict[str, int] = {}
_hits_lock = threading.Lock()  # gRPC threads may write concurrently


def fault_point(point: str) -> None:
    """Mark one durable step: trace it, and SIGKILL this process if it is the armed hit.

    A no-op unless `CD_DRA_FAULT` or `CD_DRA_FAULT_TRACE` was set when this module loaded;
    then a name outside `FAULT_POINTS` is a ValueError (a typo would never fire).
    """
    if _ARMED:
        if point not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {point!r}: use one of {', '.join(FAULT_POINTS)}")
        _hit(point)


def _hit(point: str) -> None:
    with _hits_lock:
        count = _hits.get(point, 0) + 1
        _hits[point] = count
        if _TRACE_PATH:
            fd = os.open(_TRACE_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{point}\n".encode())
            finally:
                os.close(fd)
    if (point, count) == _FAULT:
        os.kill(os.getpid(), signal.SIGKILL)


def _file_kind(base: str) -> str:
    return "cdi" if base.startswith(_CDI_PREFIXES) else "checkpoint"


def fsync_directory(directory: str) -> None:
    """Make a rename or unlink in `directory` durable."""
    if _ARMED:
        _hit(UNLINKED_DIR_FSYNC)
    _fsync_directory(directory)


def fsync_directory_unmarked(directory: str) -> None:
    """`fsync_directory` for a caller that marked its own fault point before it."""
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, *, mode: int, durable: bool = True) -> None:
    """Replace `path` with `data` so that readers see either the old or the new content.

    The file gets permission bits `mode` (not subject to the umask). The parent
    directory must exist. On any failure the temp file is removed and `path` is untouched.
    With `durable` False the file and directory are not fsynced: readers still never see a
    torn file, but a power loss may lose the write (for files rebuilt from durable state).
    """
    directory, base = os.path.split(os.path.abspath(path))
    kind = _file_kind(base) if _ARMED else ""
    fd, temp_path = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as temp_file:
            os.fchmod(temp_file.fileno(), mode)
            if _ARMED:
                _hit(f"{kind}.tmp-write")
            temp_file.write(data)
            temp_file.flush()
            if durable:
                if _ARMED:
                    _hit(f"{kind}.fsync")
                os.fsync(temp_file.fileno())
        if _ARMED:
            _hit(f"{kind}.rename")
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
    if not durable:
        return
    if _ARMED:
        _hit(f"{kind}.dir-fsync")
    _fsync_directory(directory)
