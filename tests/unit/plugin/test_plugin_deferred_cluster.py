"""The API client built beside the plugin's start: calls made before it exists wait for it."""

from __future__ import annotations

import threading

import pytest

from adapters.memory import cluster as memory_cluster
from apps.pluginkit import deferred_cluster
from core import errors, kinds, ports


def test_a_call_arriving_before_the_client_is_built_waits_for_it_instead_of_failing() -> None:
    release = threading.Event()
    real = memory_cluster.InMemoryCluster()
    real.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})

    def build() -> ports.Cluster:
        release.wait(10)
        return real

    cluster = deferred_cluster.DeferredCluster(build).start()
    answered = threading.Event()
    got: list[str] = []

    def prepare_like_call() -> None:
        got.append(cluster.get(kinds.NODE.kind, namespace="", name="n")["metadata"]["name"])
        answered.set()

    threading.Thread(target=prepare_like_call, daemon=True).start()
    assert not answered.wait(0.05), "answered before the client existed"
    release.set()
    assert answered.wait(10)
    assert got == ["n"]
    assert cluster.wait() is None


def test_a_client_that_cannot_be_built_fails_every_call_with_the_reason() -> None:
    def build() -> ports.Cluster:
        raise errors.ClusterError("kubeconfig /nope: no such file; set --kubeconfig")

    cluster = deferred_cluster.DeferredCluster(build).start()
    problem = cluster.wait()
    assert problem is not None and "set --kubeconfig" in problem.message
    with pytest.raises(errors.ClusterError, match="set --kubeconfig"):
        cluster.list(kinds.NODE.kind)


def test_an_unexpected_build_failure_becomes_a_cluster_error() -> None:
    def build() -> ports.Cluster:
        raise RuntimeError("boom")

    problem = deferred_cluster.DeferredCluster(build).start().wait()
    assert isinstance(problem, errors.ClusterError)
    assert "failed to start: boom" in problem.message


def test_a_client_not_ready_in_time_is_reported() -> None:
    never = threading.Event()

    def build() -> ports.Cluster:
        never.wait(5)
        raise errors.ClusterError("late")

    cluster = deferred_cluster.DeferredCluster(build, wait_s=0.01).start()
    with pytest.raises(errors.ClusterError, match="not ready within"):
        cluster.get(kinds.NODE.kind, namespace="", name="n")
    never.set()


def test_server_version_is_the_built_clients() -> None:
    real = memory_cluster.InMemoryCluster(server_version="v1.34.4")
    cluster = deferred_cluster.DeferredCluster(lambda: real).start()
    assert isinstance(cluster, ports.ServerVersion)
    assert cluster.server_version() == "v1.34.4"


def test_server_version_of_a_client_that_cannot_tell_is_a_cluster_error() -> None:
    class _NoVersion:
        """A cluster port without `server_version`."""

    cluster = deferred_cluster.DeferredCluster(
        lambda: _NoVersion()  # type: ignore[arg-type,return-value]
    ).start()
    with pytest.raises(errors.ClusterError, match="cannot tell the server's version"):
        cluster.server_version()
