"""`EmbeddedAPIServer`: the embedded cluster served over HTTP as a Kubernetes API server.

The real `adapters.kube.KubeCluster` (and so the real controller and kubelet plugin apps, in
other processes) can run against an `InMemoryCluster` through this loopback server: it speaks
the subset of the Kubernetes REST API that `adapters.kube` sends — get, list with equality
label selectors, streaming watches (chunked, newline-delimited JSON, ERROR 410 when the
version is too old), create, JSON merge patch (with the status subresource and resourceVersion
preconditions), update (PUT) and delete — and answers errors as `Status` objects with their
HTTP codes. ResourceClaimTemplates keep their opaque configs' bytes as sent and refuse an update
that changes them, as kube-apiserver does (see `_raw_extension`).
Plain HTTP, optionally a bearer token: for tests, the demo and the bench only. Tests may also
read the requests served (`requests`) and make the next request of a method fail
(`fail_next`).

Routing and translation are pure (`_http_codec`); this module holds the sockets and threads.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import http.server
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self
from urllib import parse

from adapters.memory import _http_codec, _raw_extension
from adapters.memory import cluster as memory_cluster
from core import errors, kinds, mergepatch, ports

log = logging.getLogger(__name__)

# Longest a watch waits inside the cluster before checking whether the server is stopping.
_WATCH_SLICE_S = 0.5
# Requests remembered for `requests()` (the newest ones).
_REQUESTS_KEPT = 10_000
# A patch of an object whose stored bytes are compared re-reads it when a writer slipped in
# between (as the API server's update loop retries), at most this often.
_UPDATE_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedRequest:
    """One request as it reached the server (what an API server's audit log records)."""

    method: str
    path: str  # with the query string
    content_type: str
    user_agent: str


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: EmbeddedAPIServer

    def __init__(self, address: tuple[str, int], owner: EmbeddedAPIServer) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        # NB: without it every small answer on a keep-alive connection waits for the
        # client's delayed ACK (Nagle), ~40 ms per request.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._connections_lock:
            self._connections.add(conn)
        return conn, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that was killed (or timed out) mid-request is routine, not a server bug.
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("event=client_went_away address=%s", client_address)
            return
        super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        """Shut every open client connection (idle keep-alives and streaming watches)."""
        with self._connections_lock:
            open_now = list(self._connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self.server.owner._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.owner._handle(self, "POST")

    def do_PATCH(self) -> None:
        self.server.owner._handle(self, "PATCH")

    def do_DELETE(self) -> None:
        self.server.owner._handle(self, "DELETE")

    def do_PUT(self) -> None:
        self.server.owner._handle(self, "PUT")

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are logged by the owner, with key=value context


class EmbeddedAPIServer:
    """Serves `cluster` on `http://host:port` (port 0 picks a free one) until `stop()`.

    With `token`, every request must carry `Authorization: Bearer <token>` (else 401, as an
    API server with token authentication answers); `token` may be changed while serving.
    """

    def __init__(
        self, cluster: memory_cluster.InMemoryCluster, *, host: str = "127.0.0.1", port: int = 0,
        token: str | None = None,
    ) -> None:
        self._cluster = cluster
        self._host = host
        self._port = port
        self.token = token
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._served: collections.deque[ServedRequest] = collections.deque(maxlen=_REQUESTS_KEPT)
        self._failures: list[tuple[str, int]] = []
        # uid -> opaque config bytes of each ResourceClaimTemplate, as its creator sent them.
        self._sent_parameters: dict[str, tuple[bytes, ...]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("EmbeddedAPIServer is already started")
        self._stopping.clear()
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="embedded-apiserver",
            daemon=True,
        )
        self._thread.start()
        log.info("embedded API server listening url=%s", self.url)
        return self

    def stop(self) -> None:
        """Stop accepting, end open watches and drop open connections; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.drop_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        log.info("embedded API server stopped")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """`http://host:port` of the running server."""
        if self._server is None:
            raise RuntimeError("EmbeddedAPIServer is not started; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig object (plain HTTP; the bearer token, if any) for this server."""
        return _http_codec.kubeconfig(self.url, token=self.token)

    def write_kubeconfig(self, path: str) -> None:
        """Write a kubeconfig for this server to `path` (JSON, which kubeconfig loaders read)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.kubeconfig(), f, indent=2)
            f.write("\n")

    # -- test hooks --------------------------------------------------------------------------

    def requests(self) -> tuple[ServedRequest, ...]:
        """The requests served so far (the newest 10,000), oldest first."""
        with self._lock:
            return tuple(self._served)

    def fail_next(self, method: str, code: int) -> None:
        """Answer the next `method` request with an error Status of HTTP `code`, once."""
        with self._lock:
            self._failures.append((method, code))

    # -- request handling ------------------------------------------------------------------

    def _admit(self, handler: _Handler, method: str) -> None:
        """Record the request; raise the RequestError it is answered with instead, if any."""
        with self._lock:
            self._served.append(ServedRequest(
                method=method,
                path=handler.path,
                content_type=handler.headers.get("Content-Type", ""),
                user_agent=handler.headers.get("User-Agent", ""),
            ))
            injected = next((c for m, c in self._failures if m == method), None)
            if injected is not None:
                self._failures.remove((method, injected))
        if self.token is not None and handler.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            raise _http_codec.RequestError(401, "Unauthorized", "Unauthorized")
        if injected is not None:
            raise _http_codec.RequestError(
                injected, _http_codec.failure_reason(injected), "injected failure"
            )

    def _handle(self, handler: _Handler, method: str) -> None:
        started = time.perf_counter()
        split = parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length > 0 else b""
        try:
            self._admit(handler, method)
            if method == "GET" and split.path == "/version":
                # NB: what a real API server answers there (its other fields left out).
                self._send_json(handler, 200, {"gitVersion": self._cluster.server_version()})
                return
            route = _http_codec.parse_route(split.path)
            query = _http_codec.parse_query(split.query)
            if method == "GET" and query.watch and not route.name:
                code, answer = 200, None
                self._stream_watch(handler, route, query)
            else:
                code, answer = self._answer(method, route, query, body, handler)
        except _http_codec.RequestError as exc:
            code, answer = exc.code, _http_codec.status(exc.code, exc.reason, exc.message)
        except errors.ClusterError as exc:
            code, reason = _http_codec.error_status(exc)
            answer = _http_codec.status(code, reason, exc.message)
        except Exception as exc:  # NB: a bug here must answer 500, not kill the connection
            log.exception("embedded API server failed method=%s path=%s", method, handler.path)
            code = 500
            answer = _http_codec.status(500, "InternalError", f"internal error: {exc!r}")
        log.debug(
            "request method=%s path=%s code=%d seconds=%.4f",
            method, handler.path, code, time.perf_counter() - started,
        )
        if answer is not None:
            self._send_json(handler, code, answer)

    def _answer(
        self,
        method: str,
        route: _http_codec.Route,
        query: _http_codec.Query,
        body: bytes,
        handler: _Handler,
    ) -> tuple[int, Mapping[str, Any]]:
        kind = route.kind.kind
        cluster = self._cluster
        if method == "GET" and not route.name:
            listed = cluster.list(
                kind, namespace=route.namespace, label_selector=query.label_selector or None
            )
            return 200, _http_codec.list_object(route.kind, listed)
        if method == "GET":
            if route.subresource not in ("", "status"):
                raise errors.NotFoundError(f"{kind} has no {route.subresource!r} subresource")
            return 200, cluster.get(kind, namespace=route.namespace, name=route.name)
        if method == "POST":
            obj = _http_codec.object_for_create(route, _http_codec.decode_body(body))
            created = cluster.create(kind, obj)
            if route.kind is kinds.RESOURCE_CLAIM_TEMPLATE:
                self._remember_parameters(created, _raw_extension.parameters_as_sent(body))
            return 201, created
        if method == "PATCH" and route.name:
            content_type = handler.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type != _http_codec.MERGE_PATCH:
                raise _http_codec.RequestError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format ({content_type!r}); this "
                    f"server accepts {_http_codec.MERGE_PATCH} only",
                )
            return 200, self._patch(route, _http_codec.decode_body(body))
        if method == "PUT":
            obj = _http_codec.object_for_update(route, _http_codec.decode_body(body))
            return 200, self._update(route, obj, sent=_raw_extension.parameters_as_sent(body))
        if method == "DELETE" and route.name and not route.subresource:
            cluster.delete(kind, namespace=route.namespace, name=route.name)
            done = _http_codec.status(200, "", f"{kind} {route.name} deletion requested")
            done["details"] = {"name": route.name, "kind": route.kind.plural}
            return 200, done
        raise _http_codec.RequestError(
            405, "MethodNotAllowed", f"{method} is not supported on {handler.path}"
        )

    def _patch(self, route: _http_codec.Route, patch: Mapping[str, Any]) -> Mapping[str, Any]:
        """A merge patch; on a ResourceClaimTemplate, refused (422) when the re-encode changes
        its opaque configs' bytes."""

        def check(current: Mapping[str, Any]) -> None:
            merged = mergepatch.merge_patch(current, patch)
            if _raw_extension.parameters_reencoded(merged) != self._stored_parameters(current):
                raise _http_codec.immutable_spec(route)

        def write(version: str) -> Mapping[str, Any]:
            return self._cluster.patch(
                route.kind.kind, namespace=route.namespace, name=route.name, patch=patch,
                subresource=route.subresource, resource_version=version,
            )

        asked = str((patch.get("metadata") or {}).get("resourceVersion") or "")
        return self._checked_write(route, asked=asked, check=check, write=write)

    def _update(
        self, route: _http_codec.Route, obj: Mapping[str, Any], *, sent: tuple[bytes, ...]
    ) -> Mapping[str, Any]:
        """A PUT; on a ResourceClaimTemplate, refused (422) when the bytes it sends for the
        opaque configs differ from the stored ones."""

        def check(current: Mapping[str, Any]) -> None:
            if sent != self._stored_parameters(current):
                raise _http_codec.immutable_spec(route)

        def write(version: str) -> Mapping[str, Any]:
            meta = {k: v for k, v in (obj.get("metadata") or {}).items()
                    if k != "resourceVersion"}
            if version:
                meta["resourceVersion"] = version
            return self._cluster.update(
                route.kind.kind, namespace=route.namespace, name=route.name,
                obj={**obj, "metadata": meta}, subresource=route.subresource,
            )

        asked = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        return self._checked_write(route, asked=asked, check=check, write=write)

    def _checked_write(
        self,
        route: _http_codec.Route,
        *,
        asked: str,
        check: Callable[[Mapping[str, Any]], None],
        write: Callable[[str], Mapping[str, Any]],
    ) -> Mapping[str, Any]:
        """`write(precondition)`, after `check(stored object)` where the bytes are compared.

        NB: the check holds for the version it read, so the write is made conditional on that
        version; a writer slipping in between makes it read and check again (as the API
        server's update loop does), unless the client asked for a version itself.
        """
        attempts = 0
        while True:
            attempts += 1
            current = self._compared_bytes_of(route, resource_version=asked)
            if current is None:
                return write(asked)
            check(current)
            try:
                return write(asked or str(current["metadata"]["resourceVersion"]))
            except errors.ConflictError:
                if asked or attempts >= _UPDATE_ATTEMPTS:
                    raise

    def _compared_bytes_of(
        self, route: _http_codec.Route, *, resource_version: str
    ) -> Mapping[str, Any] | None:
        """The stored object when an update of `route` must have its opaque config bytes
        compared: a ResourceClaimTemplate (not a subresource) whose resourceVersion matches
        the request's precondition. Otherwise None, and the cluster decides (404, 409, ...)."""
        if route.kind is not kinds.RESOURCE_CLAIM_TEMPLATE or route.subresource:
            return None
        try:
            current = self._cluster.get(
                route.kind.kind, namespace=route.namespace, name=route.name
            )
        except errors.NotFoundError:
            return None
        version = str(current["metadata"]["resourceVersion"])
        # NB: a stale precondition is a 409 before any validation, as the API server orders it.
        return current if resource_version in ("", version) else None

    def _remember_parameters(self, created: Mapping[str, Any], sent: tuple[bytes, ...]) -> None:
        with self._lock:
            self._sent_parameters[str(created["metadata"]["uid"])] = sent

    def _stored_parameters(self, current: Mapping[str, Any]) -> tuple[bytes, ...]:
        """The opaque config bytes kept for `current`: as its creator sent them over HTTP, or
        (created in this process) as the API server would have encoded them."""
        with self._lock:
            sent = self._sent_parameters.get(str(current["metadata"]["uid"]))
        return sent if sent is not None else _raw_extension.parameters_reencoded(current)

    def _stream_watch(
        self, handler: _Handler, route: _http_codec.Route, query: _http_codec.Query
    ) -> None:
        """Chunked newline-delimited events until the timeout, an error, or `stop()`."""
        handler.send_response(200)
        handler.send_header("Content-Type", _http_codec.JSON)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        kind = route.kind.kind
        deadline = time.monotonic() + query.timeout_s

        def send(line: bytes) -> None:
            handler.wfile.write(_http_codec.chunk(line))
            handler.wfile.flush()

        try:
            try:
                cursor = query.resource_version
                selector = query.label_selector or None
                if cursor in ("", "0"):
                    listed = self._cluster.list(
                        kind, namespace=route.namespace, label_selector=selector
                    )
                    for item in listed.items:
                        event = ports.WatchEvent(type=ports.WatchEventType.ADDED, obj=item)
                        send(_http_codec.watch_line(event))
                    cursor = listed.resource_version
                while not self._stopping.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    for event in self._cluster.watch(
                        kind,
                        namespace=route.namespace,
                        resource_version=cursor,
                        timeout_s=min(remaining, _WATCH_SLICE_S),
                        label_selector=selector,
                    ):
                        cursor = str(event.obj["metadata"]["resourceVersion"])
                        send(_http_codec.watch_line(event))
            except errors.ClusterError as exc:
                code, reason = _http_codec.error_status(exc)
                if code == 422:
                    code, reason = 400, "BadRequest"
                send(_http_codec.watch_error_line(code, reason, exc.message))
            handler.wfile.write(_http_codec.chunk(b""))
            handler.wfile.flush()
        except OSError as exc:  # the client went away (or stop() dropped the connection)
            log.debug("watch connection closed kind=%s error=%r", kind, exc)
        except Exception:  # NB: headers are sent: a bug here can only end the stream
            log.exception("watch failed kind=%s path=%s", kind, handler.path)

    @staticmethod
    def _send_json(handler: _Handler, code: int, doc: Mapping[str, Any]) -> None:
        data = json.dumps(doc, separators=(",", ":")).encode()
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", _http_codec.JSON)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError as exc:
            log.debug("answer not delivered code=%d error=%r", code, exc)
            handler.close_connection = True
