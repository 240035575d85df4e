"""Fixtures of the app tests: an embedded API server, short node directories, process reaping."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import app_processes
import pytest
from app_processes import launch, served

__all__ = ["launch", "served"]  # the shared fixtures, registered here by import


@pytest.fixture
def node_paths() -> Iterator[app_processes.PluginPaths]:
    # NB: not tmp_path: its long names would push socket paths past the 107-byte limit.
    root = pathlib.Path(tempfile.mkdtemp(prefix="cdapp-", dir="/tmp"))
    yield app_processes.PluginPaths(root=root / "node")
    shutil.rmtree(root, ignore_errors=True)
