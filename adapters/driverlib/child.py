"""One run of a child process that loads a driver library, and where that library is.

A C library called through ctypes can segfault, abort or hang the process calling it (NVML's
versioned fabric-info call did so on an H100). So the plugin never loads one itself: it runs a
small Python module of ours as a child that loads the library, makes the calls and prints one
JSON line, and reads that line back. This module is the parent's half of that shape, shared
by every such adapter: the environment (this package importable, the driver root's library
directories first on LD_LIBRARY_PATH), a run bounded by a timeout, and the last JSON line.
What a crash or a refusal means is the caller's to say.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

STDERR_TAIL_CHARS: Final = 800
# The directory holding the `adapters` package, so the child finds it however we run.
IMPORT_ROOT: Final = str(pathlib.Path(__file__).resolve().parents[2])

# Where a driver root holds the driver's libraries, by distribution layout (checked in this
# order; upstream's librarySearchPaths, plus the plain lib directories).
LIBRARY_DIRS: Final = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
    "lib",
)


class ChildNotRun(Exception):
    """The child did not start, or did not finish within its timeout and was killed."""


class ChildNotStarted(ChildNotRun):
    """The child could not be started (no such program, no permission)."""


class ChildTimedOut(ChildNotRun):
    """The child outlived its timeout and was killed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finished:
    """How a child ended: what it printed and its exit status (negative: killed by a signal)."""

    stdout: str
    stderr: str
    returncode: int

    @property
    def crash_signal(self) -> str | None:
        """The signal's name ("SIGSEGV") when a signal ended the child, else None."""
        return signal_name(-self.returncode) if self.returncode < 0 else None

    @property
    def stderr_tail(self) -> str:
        """The end of stderr (where a crash's last words are), or "(empty)"."""
        return self.stderr.strip()[-STDERR_TAIL_CHARS:] or "(empty)"


def library_dirs(driver_root: str) -> tuple[str, ...]:
    """The library directories that exist under `driver_root` (none for "/": the loader's own)."""
    if os.path.normpath(driver_root) == "/":
        return ()
    candidates = (os.path.join(driver_root, d) for d in LIBRARY_DIRS)
    return tuple(path for path in candidates if os.path.isdir(path))


def find_library(driver_root: str, names: Iterable[str]) -> str | None:
    """The first regular file (symlinks resolved) named one of `names` in `driver_root`'s
    library directories, trying each name in every directory before the next name; None
    where there is none (or the root is "/", whose libraries the loader finds itself)."""
    directories = library_dirs(driver_root)
    for name in names:
        for directory in directories:
            path = os.path.realpath(os.path.join(directory, name))
            if os.path.isfile(path):
                return path
    return None


def child_env(*, driver_root: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child that loads a driver library: `env` (default: ours, with this
    package importable), with the library directories of `driver_root` leading LD_LIBRARY_PATH."""
    result = dict(env) if env is not None else importable(os.environ)
    directories = library_dirs(driver_root)
    if directories:
        result["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (*directories, result.get("LD_LIBRARY_PATH", "")) if p
        )
    return result


def importable(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this package's directory leading PYTHONPATH, so a child finds `adapters`."""
    result = dict(env)
    python_path = result.get("PYTHONPATH", "")
    result["PYTHONPATH"] = os.pathsep.join(p for p in (IMPORT_ROOT, python_path) if p)
    return result


def run(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str]) -> Finished:
    """Run `argv` to its end (stdin closed, output captured as text); the one call site of
    this I/O. Raises ChildNotStarted, or ChildTimedOut when it outlives `timeout_s` (killed)."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=dict(env),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ChildTimedOut(f"it did not finish within {timeout_s:g}s and was killed") from exc
    except OSError as exc:
        raise ChildNotStarted(f"it could not be started: {exc}") from exc
    return Finished(stdout=done.stdout, stderr=done.stderr, returncode=done.returncode)


def last_json_object(stdout: str) -> dict[str, object] | None:
    """The JSON object on the last line of `stdout`; None when that line is not one."""
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def signal_name(number: int) -> str:
    """"SIGABRT" for 6; "signal 99" for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
