"""The embedded API server answers small requests without Nagle's delay.

With Nagle's algorithm on, a keep-alive client that sends a request while the previous
answer's last segment is unacknowledged waits for the peer's delayed ACK (~40 ms per GET from
a plugin process). The server must set TCP_NODELAY on every connection it accepts.
"""

from __future__ import annotations

import http.client
import socket

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster


def test_accepted_connections_have_tcp_nodelay_set() -> None:
    memory = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(memory).start()
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/api/v1/nodes")
        assert conn.getresponse().read()
        accepted = server._server._connections if server._server is not None else set()
        assert accepted, "the server kept no record of the open keep-alive connection"
        for sock in accepted:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        conn.close()
    finally:
        server.stop()
        memory.close()
