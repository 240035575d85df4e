"""Fixtures of the GPU plugin app tests: an embedded API server, one GPU node's files, processes.

The process helpers (`app_processes`) are the ComputeDomain app tests' own, and the CDI schema
check (`gpu_prep_fixtures.check_cdi`) the GPU planner tests' own: both directories go on the
import path so that the two halves are driven and judged the same way.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest

_TESTS = pathlib.Path(__file__).resolve().parents[2]
for _helpers in (_TESTS / "integration" / "apps", _TESTS / "unit" / "gpu"):
    if str(_helpers) not in sys.path:
        sys.path.insert(0, str(_helpers))

import app_processes  # noqa: E402
import gpuplugin_env  # noqa: E402
from app_processes import launch, served  # noqa: E402

__all__ = ["launch", "served"]  # the shared fixtures, registered here by import


@pytest.fixture
def short_root() -> Iterator[pathlib.Path]:
    # NB: not tmp_path: its long names would push socket paths past the 107-byte limit.
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpuapp-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def gpu_node(short_root: pathlib.Path) -> gpuplugin_env.GpuNode:
    """A GPU node's files: simulated driver root, dev root with control nodes, stand-in smi."""
    return gpuplugin_env.GpuNode.create(short_root / "gpu", node=app_processes.first_node())
