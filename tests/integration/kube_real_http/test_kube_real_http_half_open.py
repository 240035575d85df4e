"""A watch whose connection goes silent resumes within the idle limit, not the watch timeout.

A half-open connection (the peer vanished without a FIN: a NAT or load balancer dropped the
flow) never ends a blocking read: the informer used to wait out the watch's own timeout plus
slack (up to 330 s) before it noticed, missing every change meanwhile. Here a TCP relay
between the real `KubeCluster` and the in-memory API server stand-in swallows everything the
server sends on the connections it already carries (what a dropped flow looks like to the
client), while new connections pass: the informer must see an object created after that.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from adapters.kube import cluster as kube_cluster
from adapters.kube import informer as kube_informer
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster

IDLE_S = 2.0
WAIT_S = 30.0  # a bound on waiting for the event; the watch timeout below is ten times it


class SwallowingRelay:
    """127.0.0.1:<port> -> `upstream_port`; `swallow()` makes every connection open now drop
    what the server sends from then on (and keeps it open); later connections pass."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._swallowing: set[socket.socket] = set()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def swallow(self) -> None:
        with self._lock:
            self._swallowing |= self._open

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._upstream_port))
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._pump, args=(client, upstream, None),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, client),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket,
              swallow_key: socket.socket | None) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                with self._lock:
                    dropped = swallow_key is not None and swallow_key in self._swallowing
                if not dropped:
                    sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def memory() -> Iterator[memory_cluster.InMemoryCluster]:
    cluster = memory_cluster.InMemoryCluster()
    yield cluster
    cluster.close()


@pytest.fixture
def relay(memory: memory_cluster.InMemoryCluster) -> Iterator[SwallowingRelay]:
    server = apiserver.EmbeddedAPIServer(memory).start()
    relay = SwallowingRelay(int(server.url.rsplit(":", 1)[1]))
    yield relay
    relay.close()
    server.stop()


def test_an_informer_resumes_a_silent_watch_within_the_idle_limit(
    tmp_path: pathlib.Path, memory: memory_cluster.InMemoryCluster, relay: SwallowingRelay,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{relay.port}'}}}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    kube = kube_cluster.KubeCluster.from_config(str(kubeconfig), watch_idle_timeout_s=IDLE_S)
    nodes = kube_informer.Informer(kube, "Node", watch_timeout_s=10 * WAIT_S)
    stop = threading.Event()
    nodes.start(stop)
    try:
        assert nodes.synced.wait(WAIT_S)
        memory.create("Node", {"metadata": {"name": "before"}})
        _wait_until(lambda: nodes.get("", "before") is not None, "the first node")
        relay.swallow()  # the watch's connection is now a dropped flow
        memory.create("Node", {"metadata": {"name": "after"}})
        _wait_until(lambda: nodes.get("", "after") is not None,
                    "the node created after the connection went silent")
    finally:
        stop.set()
        kube.close()


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {WAIT_S} s waiting for {what}"
        time.sleep(0.05)
