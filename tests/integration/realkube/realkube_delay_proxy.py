"""A TCP proxy in front of kube-apiserver that can hold requests back: a slow API server.

TLS passes through untouched (the server's certificate names 127.0.0.1, so clients that dial
the proxy's port still verify it). While armed, every chunk the server sends back waits
`delay_s` before it reaches the client: the server has read its state, the answer arrives late
(what a kubelet plugin sees when the API server answers late).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_STEP_S = 30  # a bound on one step of the proxy's loop, not a timing
_HEAD_LIMIT = 1 << 20  # request heads and reads up to 1 MiB


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


class LeaseHoldingProxy:
    """Forward https://127.0.0.1:<port> to the API server, able to hold Lease requests.

    Unlike `DelayProxy` it terminates TLS (with the API server's own self-signed certificate,
    so a client's kubeconfig still trusts it) to read each request line. While `hold()` is on,
    every request whose path names `leases` waits unanswered (as behind a stalled connection:
    the client's call blocks), and so does what follows it on that connection; everything
    else passes at once. `release()` sends what was held on.

    NB: one asyncio loop on one thread owns every socket. Two earlier threaded versions broke
    under load: closing a socket another thread was reading let OpenSSL read an unrelated
    connection that took its descriptor number, and reading and writing one SSL object from
    two threads (which OpenSSL does not promise is safe) sometimes lost an answer.
    """

    def __init__(self, *, upstream_port: int, cert_file: str, key_file: str,
                 ca_file: str) -> None:
        self._upstream_port = upstream_port
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(cert_file, key_file)
        self._client_tls = ssl.create_default_context(cafile=ca_file)
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.held = 0  # lease requests held so far
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lease-proxy",
                                        daemon=True)
        self._thread.start()
        self.port = self._run(self._start())

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._run(self._set_released(False))

    def release(self) -> None:
        self._run(self._set_released(True))

    def close(self) -> None:
        """Ends every connection (each side sees end-of-stream), then stops the loop."""
        if self._loop.is_closed():
            return
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _run(self, step: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(step, self._loop).result(timeout=_STEP_S)

    async def _start(self) -> int:
        self._released = asyncio.Event()
        self._released.set()
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=self._server_tls, limit=_HEAD_LIMIT)
        return int(self._server.sockets[0].getsockname()[1])

    async def _set_released(self, released: bool) -> None:
        if released:
            self._released.set()
        else:
            self._released.clear()

    async def _close(self) -> None:
        self._server.close()
        self._released.set()
        for writer in list(self._writers):
            writer.close()
        if self._connections:
            await asyncio.wait(self._connections, timeout=_STEP_S)

    async def _serve(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            upstream_in, upstream_out = await asyncio.open_connection(
                "127.0.0.1", self._upstream_port, ssl=self._client_tls,
                server_hostname="127.0.0.1", limit=_HEAD_LIMIT)
        except (OSError, ssl.SSLError):
            client_out.close()
            self._connections.discard(task)
            return
        self._writers |= {client_out, upstream_out}
        sides = {asyncio.ensure_future(self._requests(client_in, upstream_out)),
                 asyncio.ensure_future(self._answers(upstream_in, client_out))}
        await asyncio.wait(sides, return_when=asyncio.FIRST_COMPLETED)
        for side in sides:
            side.cancel()
        for writer in (client_out, upstream_out):
            writer.close()
            self._writers.discard(writer)
        self._connections.discard(task)

    async def _requests(self, client: asyncio.StreamReader,
                        upstream: asyncio.StreamWriter) -> None:
        """Client -> server, one request at a time (head, then Content-Length body)."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            while True:
                head = await client.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = await client.readexactly(length)
                request_line = head.split(b"\r\n", 1)[0].split(b" ")
                path = request_line[1] if len(request_line) > 1 else b""
                if b"/leases" in path and not self._released.is_set():
                    self.held += 1
                    await self._released.wait()  # the stall itself
                upstream.write(head + body)
                await upstream.drain()

    async def _answers(self, upstream: asyncio.StreamReader,
                       client: asyncio.StreamWriter) -> None:
        """Server -> client, as it comes."""
        with contextlib.suppress(OSError):
            while chunk := await upstream.read(65536):
                client.write(chunk)
                await client.drain()
