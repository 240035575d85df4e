"""A TCP proxy in front of kube-apiserver that can hold requests back: a slow API server.

TLS passes through untouched (the server's certificate names 127.0.0.1, so clients that dial
the proxy's port still verify it). While armed, every chunk the server sends back waits
`delay_s` before it reaches the client: the server has read its state, the answer arrives late
(what a kubelet plugin sees when the API server answers late).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
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


def _shut(sock: socket.socket) -> None:
    """Wake every thread blocked on `sock` (a read returns end-of-stream, a write fails) and
    send the peer end-of-stream, keeping its descriptor.

    NB: never `close()` a socket another thread may be reading. Linux does not wake a thread
    blocked in recv() on a descriptor closed under it, and the number is free at once for the
    next socket this process opens. For TLS it is worse than a hang: OpenSSL reads a record in
    two recv() calls on the number it was given (header, then body), so the first call returns
    on the old connection and the second reads the *new* socket that took the number, stealing
    bytes from an unrelated connection (an answer the test's own client then waits 60 s for)
    and writing an alert into it. `socket.socket.shutdown` on the socket itself, not
    `SSLSocket.shutdown`, which would unwrap it under the other thread.
    """
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class LeaseHoldingProxy:
    """Forward https://127.0.0.1:<port> to the API server, able to hold Lease requests.

    Unlike `DelayProxy` it terminates TLS (with the API server's own self-signed certificate,
    so a client's kubeconfig still trusts it) to read each request line. While `hold()` is on,
    every request whose path names `leases` waits unanswered (as behind a stalled connection:
    the client's call blocks), and so does what follows it on that connection; everything
    else passes at once. `release()` sends what was held on.

    Each connection has two threads (requests in, answers out); when either side ends, both
    sockets are shut down (see `_shut`) and closed only once both threads have returned.
    """

    def __init__(self, *, upstream_port: int, cert_file: str, key_file: str,
                 ca_file: str) -> None:
        self._upstream_port = upstream_port
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(cert_file, key_file)
        self._client_tls = ssl.create_default_context(cafile=ca_file)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._released = threading.Event()
        self._released.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.held = 0  # lease requests held so far
        threading.Thread(target=self._accept, name="lease-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        """Ends every connection; the threads that read the sockets close them."""
        with self._lock:
            self._closed.set()
            sockets = [self._listener, *self._sockets]
        self._released.set()
        for sock in sockets:
            _shut(sock)

    def _accept(self) -> None:
        with self._listener:  # NB: closed here, by the one thread that accepts on it
            while not self._closed.is_set():
                try:
                    raw, _ = self._listener.accept()
                except OSError:
                    return
                threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self._server_tls.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        try:
            upstream = self._client_tls.wrap_socket(
                socket.create_connection(("127.0.0.1", self._upstream_port)),
                server_hostname="127.0.0.1")
        except (OSError, ssl.SSLError):
            client.close()
            return
        with self._lock:
            self._sockets |= {client, upstream}
            if self._closed.is_set():  # accepted while `close()` ran
                _shut(client)
                _shut(upstream)
        pump = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
        pump.start()
        self._requests(client, upstream)
        _shut(client)
        _shut(upstream)
        pump.join()
        with self._lock:
            self._sockets -= {client, upstream}
        client.close()  # NB: only now: no thread reads either socket any more
        upstream.close()

    def _requests(self, client: ssl.SSLSocket, upstream: ssl.SSLSocket) -> None:
        """Client -> server, one request at a time (head, then Content-Length body)."""
        buffered = b""
        with contextlib.suppress(OSError, ValueError):
            while True:
                while b"\r\n\r\n" not in buffered:
                    chunk = client.recv(65536)
                    if not chunk:
                        raise ValueError("client closed")
                    buffered += chunk
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(buffered) < length:
                    chunk = client.recv(65536)
                    if not chunk:
                        raise ValueError("client closed")
                    buffered += chunk
                body, buffered = buffered[:length], buffered[length:]
                path = head.split(b"\r\n", 1)[0].split(b" ")[1] if b" " in head else b""
                if b"/leases" in path and not self._released.is_set():
                    with self._lock:
                        self.held += 1
                    self._released.wait()  # the stall itself
                upstream.sendall(head + b"\r\n\r\n" + body)

    def _pump(self, source: ssl.SSLSocket, sink: ssl.SSLSocket) -> None:
        """Server -> client; at the end, wakes `_requests` (which then closes both)."""
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        _shut(source)
        _shut(sink)
