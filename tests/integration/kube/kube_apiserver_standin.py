"""A small stand-in for kube-apiserver: real HTTP on 127.0.0.1, API-server-shaped JSON.

No kube-apiserver binary can be installed here, so the kube adapter's integration tests run
the official client over real sockets against this server. It implements what the adapter
relies on: object and collection paths for core and named groups, namespaced and
cluster-scoped kinds, the status subresource, create with generateName, JSON merge patch
with a metadata.resourceVersion precondition (409), 404/409 Status bodies, label selectors,
bearer-token auth (401), and chunked streaming watches with bookmarks and an ERROR 410 event
for a compacted resourceVersion. `fail_next` injects one-off HTTP errors.

ResourceClaimTemplates behave as kube-apiserver treats their opaque DRA configs: the
`parameters` bytes of the create request are kept exactly (a RawExtension); a merge patch
re-encodes them compactly and a PUT keeps the bytes it sends, and either is refused with
422 "field is immutable" when the bytes differ from the stored ones.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import http.server
import json
import re
import threading
import uuid
from collections.abc import Mapping
from typing import Any
from urllib import parse

from core import kinds

_PLURALS = {(k.group, k.version, k.plural): k for k in kinds.ALL}


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_PARAMETERS_KEY = re.compile(r'"parameters"\s*:\s*')


def raw_parameters(raw: bytes) -> tuple[bytes, ...]:
    """The exact bytes of every `"parameters"` value in a request body, in order."""
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    found = []
    for match in _PARAMETERS_KEY.finditer(text):
        _, end = decoder.raw_decode(text, match.end())
        found.append(text[match.end() : end].encode("utf-8"))
    return tuple(found)


def reencoded_parameters(obj: Mapping[str, Any]) -> tuple[bytes, ...]:
    """What the API server's re-encode of an RCT gives: compact JSON, key order kept."""
    configs = ((obj.get("spec") or {}).get("spec") or {}).get("devices", {}).get("config") or ()
    return tuple(
        json.dumps(c["opaque"]["parameters"], separators=(",", ":"), ensure_ascii=False).encode()
        for c in configs
        if "opaque" in c
    )


@dataclasses.dataclass(frozen=True)
class _Route:
    kind: kinds.ResourceKind
    namespace: str
    name: str
    subresource: str


@dataclasses.dataclass(frozen=True)
class _Logged:
    rv: int
    kind: str
    namespace: str
    type: str
    obj: dict[str, Any]


class StandInAPIServer:
    def __init__(self, *, token: str = "test-token") -> None:
        self.token = token
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.log: list[_Logged] = []
        self.rv = 1000
        self.compacted_before = 0
        self.fail_next: list[tuple[str, int]] = []
        self.requests: list[tuple[str, str, str]] = []  # method, path?query, content type
        # Stored opaque-config bytes of each ResourceClaimTemplate, as created.
        self.raw_parameters: dict[tuple[str, str, str], tuple[bytes, ...]] = {}
        self.user_agents: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                outer._handle(self, "GET")

            def do_POST(self) -> None:
                outer._handle(self, "POST")

            def do_PATCH(self) -> None:
                outer._handle(self, "PATCH")

            def do_DELETE(self) -> None:
                outer._handle(self, "DELETE")

            def do_PUT(self) -> None:
                outer._handle(self, "PUT")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> StandInAPIServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            self.compacted_before = -1  # wakes and ends open watches
            self.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def compact(self) -> None:
        """Forget history: watches from any resourceVersion seen so far get ERROR 410."""
        with self.lock:
            self.compacted_before = self.rv + 1
            self.lock.notify_all()

    def kubeconfig(self) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
                "users": [{"name": "driver", "user": {"token": self.token}}],
                "contexts": [
                    {"name": "standin", "context": {"cluster": "standin", "user": "driver"}}
                ],
                "current-context": "standin",
            }
        )

    # ------------------------------------------------------------------ HTTP plumbing

    def _send_json(
        self, handler: http.server.BaseHTTPRequestHandler, code: int, doc: Mapping[str, Any]
    ) -> None:
        body = json.dumps(doc).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _route(self, path: str) -> _Route | None:
        parts = [parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        kind = _PLURALS.get((group, version, rest[0]))
        if kind is None:
            return None
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        return _Route(
            kind=kind,
            namespace=namespace if kind.namespaced else "",
            name=name,
            subresource=subresource,
        )

    def _handle(self, handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        url = parse.urlsplit(handler.path)
        query = dict(parse.parse_qsl(url.query))
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        content_type = handler.headers.get("Content-Type") or ""
        with self.lock:
            self.requests.append((method, handler.path, content_type))
            self.user_agents.append(handler.headers.get("User-Agent") or "")
            injected = next((c for m, c in self.fail_next if m == method), None)
            if injected is not None:
                self.fail_next.remove((method, injected))
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            self._send_json(handler, 401, _status(401, "Unauthorized", "Unauthorized"))
            return
        if injected is not None:
            self._send_json(handler, injected, _status(injected, "InternalError", "injected"))
            return
        route = self._route(url.path)
        if route is None:
            self._send_json(handler, 404, _status(404, "NotFound", f"no route {url.path}"))
            return
        body = json.loads(raw) if raw else {}
        if method == "GET" and query.get("watch") == "true":
            self._watch(handler, route, query)
            return
        code, doc = self._serve(method, route, query, body, content_type, raw)
        self._send_json(handler, code, doc)

    # ------------------------------------------------------------------ semantics

    def _key(self, route: _Route, name: str) -> tuple[str, str, str]:
        return (route.kind.kind, route.namespace, name)

    def _record(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.log.append(
            _Logged(
                rv=int(meta["resourceVersion"]),
                kind=obj["kind"],
                namespace=str(meta.get("namespace") or ""),
                type=event_type,
                obj=copy.deepcopy(obj),
            )
        )
        self.lock.notify_all()

    def _serve(
        self,
        method: str,
        route: _Route,
        query: Mapping[str, str],
        body: dict[str, Any],
        content_type: str,
        raw: bytes = b"",
    ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            key = self._key(route, route.name)
            what = f'{route.kind.plural}.{route.kind.group or "core"} "{route.name}"'
            if method == "GET" and route.name:
                if key not in self.objects:
                    return 404, _status(404, "NotFound", f"{what} not found")
                return 200, copy.deepcopy(self.objects[key])
            if method == "GET":
                return 200, self._list(route, query)
            if method == "POST":
                code, created = self._create(route, body)
                if code == 201 and route.kind.kind == "ResourceClaimTemplate":
                    self.raw_parameters[self._key(route, created["metadata"]["name"])] = (
                        raw_parameters(raw)
                    )
                return code, created
            if method == "PUT":
                return self._replace(route, body, raw)
            if method == "PATCH":
                if content_type != "application/merge-patch+json":
                    return 415, _status(415, "UnsupportedMediaType", content_type)
                if key not in self.objects:
                    return 404, _status(404, "NotFound", f"{what} not found")
                current = self.objects[key]
                precondition = (body.get("metadata") or {}).get("resourceVersion")
                if precondition and precondition != current["metadata"]["resourceVersion"]:
                    return 409, _status(
                        409,
                        "Conflict",
                        f"Operation cannot be fulfilled on {what}: the object has been modified;"
                        " please apply your changes to the latest version and try again",
                    )
                # The status subresource changes only .status; the main resource never does.
                patch = (
                    {"status": body.get("status")}
                    if route.subresource == "status"
                    else {k: v for k, v in body.items() if k != "status"}
                )
                updated = _merge(copy.deepcopy(current), patch)
                stored_raw = self.raw_parameters.get(key)
                if stored_raw is not None and reencoded_parameters(updated) != stored_raw:
                    return 422, self._immutable(route)
                self.rv += 1
                updated["metadata"]["resourceVersion"] = str(self.rv)
                self.objects[key] = updated
                self._record("MODIFIED", updated)
                return 200, copy.deepcopy(updated)
            if method == "DELETE":
                if key not in self.objects:
                    return 404, _status(404, "NotFound", f"{what} not found")
                gone = self.objects.pop(key)
                self.rv += 1
                gone["metadata"]["resourceVersion"] = str(self.rv)
                self._record("DELETED", gone)
                return 200, _status(200, "", "") | {"status": "Success"}
            return 405, _status(405, "MethodNotAllowed", method)

    def _immutable(self, route: _Route) -> dict[str, Any]:
        return _status(
            422,
            "Invalid",
            f'{route.kind.kind}.{route.kind.group} "{route.name}" is invalid: spec: Invalid '
            "value: ...: field is immutable",
        )

    def _replace(
        self, route: _Route, body: dict[str, Any], raw: bytes
    ) -> tuple[int, dict[str, Any]]:
        key = self._key(route, route.name)
        what = f'{route.kind.plural}.{route.kind.group or "core"} "{route.name}"'
        current = self.objects.get(key)
        if current is None:
            return 404, _status(404, "NotFound", f"{what} not found")
        precondition = (body.get("metadata") or {}).get("resourceVersion")
        if precondition != current["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", f"Operation cannot be fulfilled on {what}")
        stored_raw = self.raw_parameters.get(key)
        if stored_raw is not None and raw_parameters(raw) != stored_raw:
            return 422, self._immutable(route)
        updated = copy.deepcopy(body)
        for field in ("uid", "creationTimestamp", "namespace", "name"):
            if field in current["metadata"]:
                updated["metadata"][field] = current["metadata"][field]
        self.rv += 1
        updated["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = updated
        self._record("MODIFIED", updated)
        return 200, copy.deepcopy(updated)

    def _list(self, route: _Route, query: Mapping[str, str]) -> dict[str, Any]:
        selector = dict(
            term.split("=", 1) for term in (query.get("labelSelector") or "").split(",") if term
        )
        items = []
        for (kind, namespace, _), obj in sorted(self.objects.items()):
            if kind != route.kind.kind or (route.namespace and namespace != route.namespace):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in selector.items()):
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
        return {
            "kind": f"{route.kind.kind}List",
            "apiVersion": route.kind.api_version,
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def _create(self, route: _Route, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = str(meta.get("name") or "")
        key = self._key(route, name)
        what = f'{route.kind.plural}.{route.kind.group or "core"} "{name}"'
        if not name:
            return 422, _status(422, "Invalid", "metadata.name: Required value")
        if body.get("kind") != route.kind.kind:
            return 400, _status(400, "BadRequest", f"kind {body.get('kind')!r} on wrong path")
        if key in self.objects:
            return 409, _status(409, "AlreadyExists", f"{what} already exists")
        self.rv += 1
        meta.update(
            {
                "uid": str(uuid.uuid4()),
                "resourceVersion": str(self.rv),
                "creationTimestamp": datetime.datetime.now(datetime.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            }
        )
        if route.namespace:
            meta["namespace"] = route.namespace
        self.objects[key] = copy.deepcopy(body)
        self._record("ADDED", body)
        return 201, copy.deepcopy(body)

    def _watch(
        self, handler: http.server.BaseHTTPRequestHandler, route: _Route, query: Mapping[str, str]
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def send(doc: Mapping[str, Any]) -> None:
            data = json.dumps(doc).encode() + b"\n"
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        cursor = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 5)
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            with self.lock:
                if cursor < self.compacted_before:
                    send(
                        {
                            "type": "ERROR",
                            "object": _status(410, "Expired", "too old resource version"),
                        }
                    )
                    return
                if query.get("allowWatchBookmarks") == "true":
                    bookmark = {
                        "kind": route.kind.kind,
                        "apiVersion": route.kind.api_version,
                        "metadata": {"resourceVersion": str(cursor)},
                    }
                    send({"type": "BOOKMARK", "object": bookmark})
                while not deadline.is_set() and self.compacted_before >= 0:
                    pending = [
                        e
                        for e in self.log
                        if e.rv > cursor
                        and e.kind == route.kind.kind
                        and (not route.namespace or e.namespace == route.namespace)
                    ]
                    for event in pending:
                        send({"type": event.type, "object": event.obj})
                        cursor = event.rv
                    if cursor < self.compacted_before:
                        send(
                            {
                                "type": "ERROR",
                                "object": _status(410, "Expired", "too old resource version"),
                            }
                        )
                        return
                    self.lock.wait(0.05)
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            timer.cancel()
            try:
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            except OSError:
                pass
