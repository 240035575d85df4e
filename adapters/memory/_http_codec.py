"""Pure translation between Kubernetes REST requests and the embedded cluster's port calls.

`apiserver.py` owns the sockets and threads; everything it has to *decide* lives here as
values in, values out: which kind and object a URL path names, what a query string asks for,
how a `core.errors` exception looks as a Kubernetes `Status` with its HTTP code, and how list
and watch answers are framed. Only the subset of the API that `adapters.kube` sends is spoken.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib import parse

from core import errors, kinds, names, ports

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
# The longest watch a client may ask for, as the API server's --min-request-timeout cap.
MAX_WATCH_TIMEOUT_S: Final = 1800.0
DEFAULT_WATCH_TIMEOUT_S: Final = 300.0

_ROUTES: Final = {(k.group, k.version, k.plural): k for k in kinds.ALL}


class RequestError(Exception):
    """A request the server answers with an error `Status` (never reaches the cluster)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True, kw_only=True)
class Route:
    """What a URL path addresses: a collection (no name), an object, or its subresource."""

    kind: kinds.ResourceKind
    namespace: str = ""
    name: str = ""
    subresource: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Query:
    """The query parameters the server honours."""

    label_selector: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    watch: bool = False
    resource_version: str = ""
    timeout_s: float = DEFAULT_WATCH_TIMEOUT_S


def _not_found_path(path: str) -> RequestError:
    return RequestError(
        404, "NotFound", f"the server could not find the requested resource (path {path!r})"
    )


def parse_route(path: str) -> Route:
    """Route of `/api/v1/...` or `/apis/<group>/<version>/...`; RequestError 404 if unknown.

    Only kinds of `core.kinds` are served. Namespaced kinds take an optional
    `namespaces/<ns>/` segment (without it, a collection spans all namespaces);
    cluster-scoped kinds never do.
    """
    segments = [parse.unquote(s) for s in path.split("?", 1)[0].strip("/").split("/")]
    if len(segments) >= 2 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        raise _not_found_path(path)
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 3 or not all(rest):
        raise _not_found_path(path)
    kind = _ROUTES.get((group, version, rest[0]))
    if kind is None or (namespace and not kind.namespaced):
        raise _not_found_path(path)
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) == 3 else ""
    if name and kind.namespaced and not namespace:
        raise _not_found_path(path)
    return Route(kind=kind, namespace=namespace, name=name, subresource=subresource)


def parse_label_selector(text: str) -> dict[str, str | None]:
    """Equality selector `a=1,b==2,c` as a mapping (`c`: the key exists, value None); other
    operators are a 400 BadRequest."""
    selector: dict[str, str | None] = {}
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if not sep and _LABEL_KEY.fullmatch(term):
            selector[term] = None
            continue
        if not sep or "!" in key or not key.strip():
            raise RequestError(
                400,
                "BadRequest",
                f"unable to parse labelSelector term {term!r}: this server only supports "
                "equality and existence terms such as app=x or app",
            )
        selector[key.strip()] = value.strip()
    return selector


# A label key: an optional DNS-subdomain prefix and '/', then a name.
_LABEL_KEY = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def parse_query(query: str) -> Query:
    """`labelSelector`, `watch`, `resourceVersion` and `timeoutSeconds`; others are ignored."""
    params = dict(parse.parse_qsl(query, keep_blank_values=True))
    timeout_s = DEFAULT_WATCH_TIMEOUT_S
    if params.get("timeoutSeconds"):
        try:
            timeout_s = float(params["timeoutSeconds"])
        except ValueError:
            raise RequestError(
                400, "BadRequest", f"timeoutSeconds {params['timeoutSeconds']!r} is not a number"
            ) from None
    return Query(
        label_selector=parse_label_selector(params.get("labelSelector", "")),
        watch=params.get("watch", "").lower() in ("true", "1"),
        resource_version=params.get("resourceVersion", ""),
        timeout_s=min(max(timeout_s, 0.0), MAX_WATCH_TIMEOUT_S),
    )


def decode_body(body: bytes) -> dict[str, Any]:
    """A JSON object request body; anything else is a 400 BadRequest."""
    try:
        doc = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, "BadRequest", f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestError(400, "BadRequest", "request body must be a JSON object")
    return doc


def object_for_create(route: Route, body: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a POST, its namespace taken from the path as the API server does.

    A namespace in the body that differs from the path's is a 400 BadRequest; a name in the
    path (POST to an object URL) is a 405.
    """
    if route.name:
        raise RequestError(405, "MethodNotAllowed", "POST creates objects in a collection URL")
    obj = dict(body)
    metadata = dict(obj.get("metadata") or {})
    if route.kind.namespaced:
        given = str(metadata.get("namespace") or "")
        if route.namespace and given and given != route.namespace:
            raise RequestError(
                400,
                "BadRequest",
                f"the namespace of the provided object ({given}) does not match the namespace "
                f"sent on the request ({route.namespace})",
            )
        if not (route.namespace or given):
            raise RequestError(
                404, "NotFound", f"{route.kind.kind} is namespaced: POST to namespaces/<ns>/"
            )
        metadata["namespace"] = route.namespace or given
    obj["metadata"] = metadata
    return obj


def object_for_update(route: Route, body: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a PUT, named by the path: a name or namespace in the body that differs from
    the path's is a 400 BadRequest, as the API server answers; a collection URL is a 405."""
    if not route.name:
        raise RequestError(405, "MethodNotAllowed", "PUT replaces an object: use its URL")
    obj = dict(body)
    metadata = dict(obj.get("metadata") or {})
    for field, expected in (("name", route.name), ("namespace", route.namespace)):
        given = str(metadata.get(field) or "")
        if given and expected and given != expected:
            raise RequestError(
                400,
                "BadRequest",
                f"the {field} of the object ({given}) does not match the {field} on the URL "
                f"({expected})",
            )
        if expected:
            metadata[field] = expected
    obj["metadata"] = metadata
    return obj


def immutable_spec(route: Route) -> RequestError:
    """The 422 an update gets that would change an immutable `spec` (the API server's words)."""
    return RequestError(
        422,
        "Invalid",
        f'{route.kind.kind}.{route.kind.group} "{route.name}" is invalid: spec: Invalid value: '
        "the opaque config bytes differ from the stored ones: field is immutable",
    )


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A `meta/v1 Status` object (the body of every error answer)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code <= 299 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def error_status(exc: errors.ClusterError) -> tuple[int, str]:
    """(HTTP code, Status reason) of a cluster error, as the API server would answer it.

    A generic ClusterError is a request the embedded cluster refused as invalid (422).
    """
    if isinstance(exc, errors.NotFoundError):
        return 404, "NotFound"
    if isinstance(exc, errors.AlreadyExistsError):
        return 409, "AlreadyExists"
    if isinstance(exc, errors.ConflictError):
        return 409, "Conflict"
    if isinstance(exc, errors.GoneError):
        return 410, "Expired"
    return 422, "Invalid"


def failure_reason(code: int) -> str:
    """The Status reason the API server gives with an HTTP error `code`."""
    return _FAILURE_REASONS.get(code, "InternalError")


_FAILURE_REASONS: Final = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
    503: "ServiceUnavailable", 504: "Timeout",
}


def list_object(kind: kinds.ResourceKind, result: ports.ListResult) -> dict[str, Any]:
    """A `<Kind>List` answer carrying the list's resourceVersion.

    NB: as the API server, the items of a built-in kind's list carry no `kind` and
    `apiVersion` (the list says them once); custom resources' items keep theirs.
    """
    custom = kind.group == names.API_GROUP
    items = [
        dict(item) if custom else {k: v for k, v in item.items() if k not in _TYPE_FIELDS}
        for item in result.items
    ]
    return {
        "kind": f"{kind.kind}List",
        "apiVersion": kind.api_version,
        "metadata": {"resourceVersion": result.resource_version},
        "items": items,
    }


_TYPE_FIELDS: Final = frozenset({"kind", "apiVersion"})


def watch_line(event: ports.WatchEvent) -> bytes:
    """One newline-terminated watch event."""
    return _line({"type": event.type.value, "object": dict(event.obj)})


def watch_error_line(code: int, reason: str, message: str) -> bytes:
    """An ERROR watch event (code 410 tells the informer to relist)."""
    return _line({"type": "ERROR", "object": status(code, reason, message)})


def _line(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of a `Transfer-Encoding: chunked` body (empty data ends the body)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def kubeconfig(
    server_url: str, *, name: str = "embedded", token: str | None = None
) -> dict[str, Any]:
    """A kubeconfig (plain HTTP; a bearer token if given) whose current context is
    `server_url`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server_url}}],
        "users": [{"name": name, "user": {"token": token} if token is not None else {}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
        ],
        "current-context": name,
    }
