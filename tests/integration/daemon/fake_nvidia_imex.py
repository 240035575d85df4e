"""The tests' `nvidia-imex` / `nvidia-imex-ctl`: real executables, child processes and signals.

The scripts live in `adapters.imex.simulated` (the demo and the bench run them too); this
module installs them and reads the evidence they leave in a daemon's config directory.
"""

from __future__ import annotations

import os
import pathlib

from adapters.imex import simulated


def install(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Write both fakes into `directory`; returns (nvidia-imex, nvidia-imex-ctl)."""
    imex, ctl = simulated.install(str(directory))
    return pathlib.Path(imex), pathlib.Path(ctl)


def events(config_dir: pathlib.Path) -> list[str]:
    """What the fake nvidia-imex recorded: `start ...`, `SIGUSR1 <nodes.cfg>`, `TERM`."""
    path = config_dir / "imex.events"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def reloads(config_dir: pathlib.Path) -> list[str]:
    return [e for e in events(config_dir) if e.startswith("SIGUSR1")]


def starts(config_dir: pathlib.Path) -> list[str]:
    return [e for e in events(config_dir) if e.startswith("start")]


def pid(config_dir: pathlib.Path) -> int | None:
    path = config_dir / "imex.pid"
    try:
        value = int(path.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(value, 0)
    except ProcessLookupError:
        return None
    return value


def set_state(config_dir: pathlib.Path, state: str | None) -> None:
    """Make the fake nvidia-imex-ctl answer `state` (None: READY while the fake runs)."""
    path = config_dir / "imex.state"
    if state is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(state + "\n", encoding="utf-8")
