"""Fixtures of the daemon process tests: an embedded API server, the fakes, per-node dirs."""

from __future__ import annotations

import pathlib
import signal
import sys
from collections.abc import Callable, Iterator, Sequence

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import daemon_processes
import fake_nvidia_imex

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster


@pytest.fixture
def served(
    tmp_path: pathlib.Path,
) -> Iterator[tuple[memory_cluster.InMemoryCluster, pathlib.Path]]:
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    yield cluster, kubeconfig
    server.stop()
    cluster.close()


@pytest.fixture
def bin_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    directory = tmp_path / "bin"
    fake_nvidia_imex.install(directory)
    return directory


Launch = Callable[[Sequence[str]], daemon_processes.AppProcess]


@pytest.fixture
def launch(tmp_path: pathlib.Path) -> Iterator[Launch]:
    """Start `python -m apps.daemon <args>`; whatever still runs at the end is SIGTERMed."""
    started: list[daemon_processes.AppProcess] = []

    def start(args: Sequence[str]) -> daemon_processes.AppProcess:
        log_path = tmp_path / f"daemon-{len(started)}.log"
        process = daemon_processes.AppProcess("apps.daemon", args, log_path=log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.running:
            process.signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout_s=20)
        except AssertionError:
            process.kill()
