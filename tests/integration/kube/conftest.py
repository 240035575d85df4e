"""Fixtures of the KubeCluster tests: the HTTP stand-in and our adapter pointed at it."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import kube_apiserver_standin
import pytest

from adapters.kube import cluster


@pytest.fixture
def server() -> Iterator[kube_apiserver_standin.StandInAPIServer]:
    standin = kube_apiserver_standin.StandInAPIServer().start()
    yield standin
    standin.stop()


@pytest.fixture
def kube(
    server: kube_apiserver_standin.StandInAPIServer, tmp_path: pathlib.Path
) -> Iterator[cluster.KubeCluster]:
    path = tmp_path / "kubeconfig"
    path.write_text(server.kubeconfig())
    kc = cluster.KubeCluster.from_config(str(path), component="test-controller")
    yield kc
    kc.close()
