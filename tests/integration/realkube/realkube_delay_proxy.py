"""A TCP proxy in front of kube-apiserver that can hold requests back: a slow API server.

TLS passes through untouched (the server's certificate names 127.0.0.1, so clients that dial
the proxy's port still verify it). While armed, every chunk the server sends back waits
`delay_s` before it reaches the client: the server has read its state, the answer arrives late
(what a kubelet plugin sees when the API server answers late).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class DelayProxy:
    """Forward 127.0.0.1:<port> to `upstream_port`; `arm(delay_s)` / `disarm()` the delay."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="delay-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def arm(self, delay_s: float) -> None:
        with self._lock:
            self._delay_s = delay_s

    def disarm(self) -> None:
        self.arm(0.0)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._upstream_port))
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if delayed:
                    with self._lock:
                        delay = self._delay_s
                    if delay:
                        time.sleep(delay)  # the injected slowness itself
                sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
