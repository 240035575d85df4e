"""A client that vanishes mid-request (killed plugin, timed-out call) is routine for a server."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster


def _reset_mid_request(port: int) -> None:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    # SO_LINGER 0: close() sends RST, as a SIGKILLed process's kernel does with unread data.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def test_a_reset_connection_is_not_reported_as_a_server_error(
    capfd: pytest.CaptureFixture[str],
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    handled = threading.Event()
    with apiserver.EmbeddedAPIServer(cluster) as server:
        original = server._server.shutdown_request  # type: ignore[union-attr]

        def noting(request: object) -> None:
            original(request)
            handled.set()

        server._server.shutdown_request = noting  # type: ignore[union-attr,method-assign]
        _reset_mid_request(int(server.url.rsplit(":", 1)[1]))
        assert handled.wait(10), "the server never finished with the reset connection"
    cluster.close()
    assert "Traceback" not in capfd.readouterr().err
