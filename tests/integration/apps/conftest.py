"""Fixtures of the app tests: an embedded API server, short node directories, process reaping."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import app_processes
import pytest

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[app_processes.ServedCluster]:
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    yield app_processes.ServedCluster(cluster=cluster, server=server, kubeconfig=kubeconfig)
    server.stop()
    cluster.close()


@pytest.fixture
def node_paths() -> Iterator[app_processes.PluginPaths]:
    # NB: not tmp_path: its long names would push socket paths past the 107-byte limit.
    root = pathlib.Path(tempfile.mkdtemp(prefix="cdapp-", dir="/tmp"))
    yield app_processes.PluginPaths(root=root / "node")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def launch(tmp_path: pathlib.Path) -> Iterator[app_processes.Launch]:
    """Start `python -m <module> <args>`; every process still running at the end is killed."""
    started: list[app_processes.AppProcess] = []

    def start(module: str, args: Sequence[str]) -> app_processes.AppProcess:
        log_path = tmp_path / f"{module.rsplit('.', 1)[-1]}-{len(started)}.log"
        process = app_processes.AppProcess(module, args, log_path=log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
