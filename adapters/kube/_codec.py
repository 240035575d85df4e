"""Pure translation between cluster-port calls and Kubernetes API requests and responses.

Everything here is values in, values out: request paths, query strings, bodies, the Event
object, watch-line decoding and HTTP-status-to-error mapping. `_api.py` sends what this
module builds; nothing here touches the network, so every rule is unit-testable.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import json
from collections.abc import Mapping
from typing import Any, Final
from urllib import parse

from core import errors, kinds, models, ports

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
# Seconds of read slack beyond a watch's server-side timeout before the client gives up.
WATCH_READ_SLACK_S: Final = 30.0


class APIStatusError(errors.ClusterError):
    """An API server answer that maps to no more specific error (5xx, 403, 422, ...)."""

    def __init__(self, message: str, *, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class BodyEncoding(enum.Enum):
    """How a request body becomes bytes.

    NB: the API server keeps an opaque DRA config (`parameters`, a RawExtension) as the exact
    bytes the creator sent, but re-encodes it compactly before comparing on a later update; an
    object created with spaced JSON can then never be patched (422 "field is immutable").
    CANONICAL bytes (compact, sorted keys) are what such a re-encode gives back. CLIENT_DEFAULT
    reproduces the `kubernetes` client's own `json.dumps` (", " / ": ", key order kept): the
    bytes older versions of this driver created their objects with.
    """

    CANONICAL = "canonical"
    CLIENT_DEFAULT = "client-default"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """One HTTP request to the API server, before authentication and host are added."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    content_type: str = JSON
    body_encoding: BodyEncoding = BodyEncoding.CANONICAL

    @property
    def creating(self) -> bool:
        return self.method == "POST"

    def encoded_body(self) -> bytes | None:
        """The body's bytes on the wire (None without a body); see `BodyEncoding`."""
        if self.body is None:
            return None
        if self.body_encoding is BodyEncoding.CLIENT_DEFAULT:
            return json.dumps(self.body).encode("utf-8")
        return json.dumps(
            self.body, separators=(",", ":"), sort_keys=True, ensure_ascii=False
        ).encode("utf-8")

    def describe(self) -> str:
        """`METHOD /path?query` for error messages and logs."""
        query = f"?{parse.urlencode(self.query)}" if self.query else ""
        return f"{self.method} {self.path}{query}"


def resource_path(
    kind: kinds.ResourceKind, *, namespace: str = "", name: str = "", subresource: str = ""
) -> str:
    """URL path of a collection, an object, or an object's subresource.

    Core group kinds live under `/api/v1`, others under `/apis/<group>/<version>`; the
    namespace segment appears only for namespaced kinds and only when a namespace is given
    (a namespaced kind without one addresses all namespaces, as `list`/`watch` allow).
    """
    if subresource and not name:
        raise ValueError(f"subresource {subresource!r} of {kind.kind} needs an object name")
    parts = ["/api", kind.version] if not kind.group else ["/apis", kind.group, kind.version]
    if kind.namespaced and namespace:
        parts += ["namespaces", parse.quote(namespace, safe="")]
    parts.append(kind.plural)
    if name:
        parts.append(parse.quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def _require_namespace(kind: kinds.ResourceKind, namespace: str, name: str) -> None:
    if kind.namespaced and not namespace:
        raise errors.ClusterError(
            f"{kind.kind} {name!r} is namespaced but no namespace was given; "
            "this is a bug in the caller: pass the object's namespace"
        )


def label_selector_query(label_selector: ports.LabelSelector | None) -> str:
    """Selector `a=1,b=2,c` (`c`: the key exists), sorted so requests are deterministic."""
    return ",".join(
        k if v is None else f"{k}={v}" for k, v in sorted((label_selector or {}).items())
    )


def get_request(kind: kinds.ResourceKind, *, namespace: str, name: str) -> Request:
    _require_namespace(kind, namespace, name)
    return Request(method="GET", path=resource_path(kind, namespace=namespace, name=name))


def list_request(
    kind: kinds.ResourceKind,
    *,
    namespace: str = "",
    label_selector: ports.LabelSelector | None = None,
) -> Request:
    selector = label_selector_query(label_selector)
    query = (("labelSelector", selector),) if selector else ()
    return Request(method="GET", path=resource_path(kind, namespace=namespace), query=query)


def watch_request(
    kind: kinds.ResourceKind, *, namespace: str = "", resource_version: str, timeout_s: float,
    label_selector: ports.LabelSelector | None = None,
) -> Request:
    selector = label_selector_query(label_selector)
    query = (
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("timeoutSeconds", str(max(1, int(timeout_s)))),
        ("allowWatchBookmarks", "true"),
        *((("labelSelector", selector),) if selector else ()),
    )
    return Request(method="GET", path=resource_path(kind, namespace=namespace), query=query)


def create_request(kind: kinds.ResourceKind, obj: Mapping[str, Any]) -> Request:
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    _require_namespace(kind, namespace, name)
    body = dict(obj)
    body.setdefault("apiVersion", kind.api_version)
    body.setdefault("kind", kind.kind)
    return Request(method="POST", path=resource_path(kind, namespace=namespace), body=body)


def patch_request(
    kind: kinds.ResourceKind,
    *,
    namespace: str,
    name: str,
    patch: Mapping[str, Any],
    subresource: str = "",
    resource_version: str = "",
) -> Request:
    """A JSON merge patch; a resource_version becomes the body's precondition (409 if stale)."""
    _require_namespace(kind, namespace, name)
    body: dict[str, Any] = copy.deepcopy(dict(patch))
    if resource_version:
        metadata = dict(body.get("metadata") or {})
        metadata["resourceVersion"] = resource_version
        body["metadata"] = metadata
    return Request(
        method="PATCH",
        path=resource_path(kind, namespace=namespace, name=name, subresource=subresource),
        body=body,
        content_type=MERGE_PATCH,
    )


def replace_request(
    kind: kinds.ResourceKind, obj: Mapping[str, Any], *, subresource: str = ""
) -> Request:
    """A PUT of the whole object as read (its resourceVersion is the precondition), encoded
    the way the `kubernetes` client does so an opaque config keeps the bytes it was created
    with (see `BodyEncoding`); to `subresource` (e.g. "status") when given."""
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    _require_namespace(kind, namespace, name)
    return Request(
        method="PUT",
        path=resource_path(kind, namespace=namespace, name=name, subresource=subresource),
        body=obj,
        body_encoding=BodyEncoding.CLIENT_DEFAULT,
    )


def is_immutable_field_error(exc: errors.ClusterError) -> bool:
    """True for the 422 an update gets when it would change an immutable field (a claim's
    `status.allocation` words it "field cannot be modified once set" from Kubernetes 1.36)."""
    return (
        isinstance(exc, APIStatusError)
        and exc.status == 422
        and ("field is immutable" in exc.message
             or "field cannot be modified once set" in exc.message)
    )


def delete_request(kind: kinds.ResourceKind, *, namespace: str, name: str) -> Request:
    """Delete with background propagation so a DaemonSet's pods go with it."""
    _require_namespace(kind, namespace, name)
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    return Request(
        method="DELETE", path=resource_path(kind, namespace=namespace, name=name), body=body
    )


def _status_details(body: bytes) -> tuple[str, str]:
    """(reason, message) of a `Status` body; empty strings when the body is not one."""
    try:
        status = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", body.decode("utf-8", "replace").strip()[:500]
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("reason") or ""), str(status.get("message") or "")


def error_from_response(
    request: Request, *, status: int, reason: str, body: bytes
) -> errors.ClusterError:
    """Map a non-2xx answer to the port's error types (404, 409, 410; anything else generic)."""
    status_reason, message = _status_details(body)
    reason = status_reason or reason
    where = request.describe()
    detail = message or reason or "no message from the API server"
    if status == 404:
        return errors.NotFoundError(f"{where}: not found ({detail})")
    if status == 409 and request.creating:
        return errors.AlreadyExistsError(f"{where}: already exists ({detail})")
    if status == 409:
        return errors.ConflictError(
            f"{where}: the object changed since it was read ({detail}); re-read and retry"
        )
    if status == 410:
        return errors.GoneError(f"{where}: resourceVersion expired ({detail}); relist")
    hint = {
        401: "check the kubeconfig or service account token",
        403: "check the driver's RBAC rules (Helm chart ClusterRole)",
    }.get(status, "see the API server message")
    return APIStatusError(
        f"{where}: HTTP {status} {reason}: {detail}; {hint}", status=status, reason=reason
    )


def decode_object(body: bytes) -> dict[str, Any]:
    obj = json.loads(body)
    if not isinstance(obj, dict):
        raise errors.ClusterError(f"API server answered with a non-object JSON value: {obj!r:.200}")
    return obj


def list_result(doc: Mapping[str, Any]) -> ports.ListResult:
    """Items of a decoded `<Kind>List`, each given back its kind/apiVersion (lists omit them)."""
    item_kind = str(doc.get("kind") or "").removesuffix("List")
    api_version = str(doc.get("apiVersion") or "")
    items: list[dict[str, Any]] = []
    for item in doc.get("items") or ():
        filled = dict(item)
        if item_kind:
            filled.setdefault("kind", item_kind)
        if api_version:
            filled.setdefault("apiVersion", api_version)
        items.append(filled)
    metadata = doc.get("metadata") or {}
    return ports.ListResult(
        items=tuple(items), resource_version=str(metadata.get("resourceVersion") or "")
    )


def watch_event_from_line(line: bytes, *, request: Request) -> ports.WatchEvent | None:
    """Decode one line of a watch stream.

    Returns None for blank lines. A BOOKMARK event carries only a resourceVersion (the
    informer resumes from it). An ERROR event raises the mapped error: code 410 becomes
    GoneError so the informer relists.
    """
    line = line.strip()
    if not line:
        return None
    doc = decode_object(line)
    event_type = str(doc.get("type") or "")
    obj = doc.get("object") or {}
    if event_type == "ERROR":
        code = int(obj.get("code") or 500)
        raise error_from_response(
            request, status=code, reason=str(obj.get("reason") or ""), body=json.dumps(obj).encode()
        )
    try:
        parsed = ports.WatchEventType(event_type)
    except ValueError:
        raise errors.ClusterError(
            f"{request.describe()}: unknown watch event type {event_type!r}"
        ) from None
    return ports.WatchEvent(type=parsed, obj=obj)


def rfc3339(moment: datetime.datetime, *, micro: bool = False) -> str:
    """UTC `2006-01-02T15:04:05Z` (metav1.Time) or with microseconds (metav1.MicroTime)."""
    utc = moment.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def event_object(
    *,
    involved: models.ObjectRef,
    reason: str,
    message: str,
    warning: bool,
    component: str,
    now: datetime.datetime,
    default_namespace: str = "default",
) -> dict[str, Any]:
    """A core/v1 Event about `involved`; cluster-scoped objects get it in `default_namespace`."""
    namespace = involved.namespace or default_namespace
    involved_object: dict[str, Any] = {"kind": involved.kind, "name": involved.name}
    if involved.namespace:
        involved_object["namespace"] = involved.namespace
    if involved.uid:
        involved_object["uid"] = involved.uid
    api_version = involved.api_version
    if not api_version and involved.kind in kinds.BY_KIND:
        api_version = kinds.by_kind(involved.kind).api_version
    if api_version:
        involved_object["apiVersion"] = api_version
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved.name}.", "namespace": namespace},
        "involvedObject": involved_object,
        "reason": reason,
        # NB: the API server rejects Event messages over 1 KiB.
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
