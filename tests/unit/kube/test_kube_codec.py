"""Request building, error mapping and watch decoding of the kube adapter's pure codec."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from adapters.kube import _codec
from core import errors, kinds, models, ports


def test_core_group_namespaced_object_path() -> None:
    path = _codec.resource_path(kinds.POD, namespace="ns", name="p1")
    assert path == "/api/v1/namespaces/ns/pods/p1"


def test_named_group_namespaced_collection_path() -> None:
    assert (
        _codec.resource_path(kinds.COMPUTE_DOMAIN, namespace="team-a")
        == "/apis/resource.nvidia.com/v1beta1/namespaces/team-a/computedomains"
    )


def test_cluster_scoped_path_ignores_namespace() -> None:
    assert (
        _codec.resource_path(kinds.RESOURCE_SLICE, namespace="ignored", name="node-1-x-0")
        == "/apis/resource.k8s.io/v1/resourceslices/node-1-x-0"
    )
    assert _codec.resource_path(kinds.NODE, name="n1") == "/api/v1/nodes/n1"


def test_status_subresource_path() -> None:
    assert (
        _codec.resource_path(kinds.COMPUTE_DOMAIN, namespace="ns", name="cd", subresource="status")
        == "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status"
    )


def test_namespaced_list_without_namespace_spans_all_namespaces() -> None:
    assert _codec.list_request(kinds.LEASE).path == "/apis/coordination.k8s.io/v1/leases"


def test_subresource_without_name_is_rejected() -> None:
    with pytest.raises(ValueError):
        _codec.resource_path(kinds.POD, namespace="ns", subresource="status")


def test_names_are_url_quoted() -> None:
    path = _codec.resource_path(kinds.COMPUTE_DOMAIN_CLIQUE, namespace="ns", name="a b/c")
    assert path.endswith("/computedomaincliques/a%20b%2Fc")


def test_get_of_namespaced_kind_without_namespace_is_a_cluster_error() -> None:
    with pytest.raises(errors.ClusterError, match="namespaced"):
        _codec.get_request(kinds.POD, namespace="", name="p")


def test_list_request_sorts_label_selector() -> None:
    request = _codec.list_request(kinds.NODE, label_selector={"b": "2", "a": "1"})
    assert request.query == (("labelSelector", "a=1,b=2"),)


def test_watch_request_query() -> None:
    request = _codec.watch_request(
        kinds.COMPUTE_DOMAIN, namespace="", resource_version="42", timeout_s=300
    )
    assert request.method == "GET"
    assert dict(request.query) == {
        "watch": "true",
        "resourceVersion": "42",
        "timeoutSeconds": "300",
        "allowWatchBookmarks": "true",
    }


def test_create_request_posts_to_the_namespace_collection_and_fills_type() -> None:
    request = _codec.create_request(
        kinds.RESOURCE_CLAIM_TEMPLATE, {"metadata": {"name": "t", "namespace": "ns"}}
    )
    assert request.method == "POST"
    assert request.path == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates"
    assert request.body is not None
    assert request.body["apiVersion"] == "resource.k8s.io/v1"
    assert request.body["kind"] == "ResourceClaimTemplate"


def test_patch_is_merge_patch_with_resource_version_precondition_in_body() -> None:
    patch: dict[str, Any] = {"metadata": {"labels": {"a": "1"}}, "status": {"status": "Ready"}}
    request = _codec.patch_request(
        kinds.COMPUTE_DOMAIN,
        namespace="ns",
        name="cd",
        patch=patch,
        subresource="status",
        resource_version="7",
    )
    assert request.method == "PATCH"
    assert request.content_type == "application/merge-patch+json"
    assert request.path.endswith("/computedomains/cd/status")
    assert request.body == {
        "metadata": {"labels": {"a": "1"}, "resourceVersion": "7"},
        "status": {"status": "Ready"},
    }
    assert "resourceVersion" not in patch["metadata"], "caller's patch must not be mutated"


def test_patch_without_resource_version_has_no_precondition() -> None:
    request = _codec.patch_request(kinds.NODE, namespace="", name="n", patch={"a": 1})
    assert request.body == {"a": 1}


def test_delete_request_uses_background_propagation() -> None:
    request = _codec.delete_request(kinds.DAEMON_SET, namespace="drv", name="ds")
    assert request.method == "DELETE"
    assert request.path == "/apis/apps/v1/namespaces/drv/daemonsets/ds"
    assert request.body is not None and request.body["propagationPolicy"] == "Background"


def _status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    ).encode()


@pytest.mark.parametrize(
    ("method", "status", "expected"),
    [
        ("GET", 404, errors.NotFoundError),
        ("DELETE", 404, errors.NotFoundError),
        ("POST", 409, errors.AlreadyExistsError),
        ("PATCH", 409, errors.ConflictError),
        ("GET", 410, errors.GoneError),
        ("GET", 500, _codec.APIStatusError),
        ("POST", 422, _codec.APIStatusError),
    ],
)
def test_http_status_maps_to_port_error(
    method: str, status: int, expected: type[errors.ClusterError]
) -> None:
    request = _codec.Request(method=method, path="/api/v1/nodes/n")
    error = _codec.error_from_response(
        request, status=status, reason="X", body=_status_body(status, "Why", "because")
    )
    assert type(error) is expected
    assert "because" in error.message


def test_other_statuses_keep_status_and_reason_and_say_what_to_check() -> None:
    request = _codec.Request(method="GET", path="/api/v1/nodes")
    error = _codec.error_from_response(
        request, status=403, reason="Forbidden", body=_codec_forbidden()
    )
    assert isinstance(error, _codec.APIStatusError)
    assert (error.status, error.reason) == (403, "Forbidden")
    assert "RBAC" in error.message
    assert "GET /api/v1/nodes" in error.message


def _codec_forbidden() -> bytes:
    return _status_body(403, "Forbidden", 'nodes is forbidden: User "x" cannot list')


def test_non_json_error_body_is_kept_as_text() -> None:
    request = _codec.Request(method="GET", path="/x")
    error = _codec.error_from_response(request, status=502, reason="Bad Gateway", body=b"oops")
    assert "oops" in error.message


def test_list_result_restores_item_kind_and_api_version() -> None:
    result = _codec.list_result(
        {
            "kind": "LeaseList",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"resourceVersion": "55"},
            "items": [{"metadata": {"name": "a"}}],
        }
    )
    assert result.resource_version == "55"
    assert result.items == (
        {"metadata": {"name": "a"}, "kind": "Lease", "apiVersion": "coordination.k8s.io/v1"},
    )


_WATCH = _codec.Request(method="GET", path="/api/v1/pods", query=(("watch", "true"),))


def test_watch_line_decodes_to_event() -> None:
    line = json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "p"}}}).encode()
    event = _codec.watch_event_from_line(line, request=_WATCH)
    assert event == ports.WatchEvent(
        type=ports.WatchEventType.MODIFIED, obj={"metadata": {"name": "p"}}
    )


def test_watch_bookmark_carries_its_resource_version_and_blank_lines_are_skipped() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    event = _codec.watch_event_from_line(json.dumps(bookmark).encode(), request=_WATCH)
    assert event == ports.WatchEvent(type=ports.WatchEventType.BOOKMARK, obj=bookmark["object"])
    assert _codec.watch_event_from_line(b"  \n", request=_WATCH) is None


def test_watch_error_event_410_raises_gone() -> None:
    line = json.dumps(
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    ).encode()
    with pytest.raises(errors.GoneError):
        _codec.watch_event_from_line(line, request=_WATCH)


def test_watch_error_event_other_code_raises_cluster_error() -> None:
    line = json.dumps({"type": "ERROR", "object": {"code": 500, "message": "boom"}}).encode()
    with pytest.raises(errors.ClusterError, match="boom") as caught:
        _codec.watch_event_from_line(line, request=_WATCH)
    assert not isinstance(caught.value, errors.GoneError)


def test_event_object_shape() -> None:
    now = datetime.datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=datetime.UTC)
    event = _codec.event_object(
        involved=models.ObjectRef(kind="ComputeDomain", name="cd1", namespace="ns", uid="u1"),
        reason="InvalidConfig",
        message="allocationMode All is not allowed",
        warning=True,
        component="compute-domain-controller",
        now=now,
    )
    assert event["metadata"] == {"generateName": "cd1.", "namespace": "ns"}
    assert event["involvedObject"] == {
        "kind": "ComputeDomain",
        "name": "cd1",
        "namespace": "ns",
        "uid": "u1",
        "apiVersion": "resource.nvidia.com/v1beta1",
    }
    assert event["type"] == "Warning"
    assert event["source"] == {"component": "compute-domain-controller"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2025-03-04T05:06:07Z"
    assert event["count"] == 1


def test_event_about_cluster_scoped_object_goes_to_default_namespace() -> None:
    event = _codec.event_object(
        involved=models.ObjectRef(kind="Node", name="n1"),
        reason="R",
        message="m",
        warning=False,
        component="c",
        now=datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),
        default_namespace="nvidia-dra-driver",
    )
    assert event["metadata"]["namespace"] == "nvidia-dra-driver"
    assert event["type"] == "Normal"
    assert "namespace" not in event["involvedObject"]


def test_rfc3339_micro() -> None:
    moment = datetime.datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)
    assert _codec.rfc3339(moment, micro=True) == "2025-01-02T03:04:05.000006Z"


def test_bodies_are_sent_as_compact_sorted_json_the_server_would_re_encode_to() -> None:
    body = {"metadata": {"name": "r"}, "spec": {"parameters": {"kind": "K", "apiVersion": "v"}}}
    request = _codec.create_request(kinds.RESOURCE_CLAIM_TEMPLATE, {**body, "metadata": {
        "name": "r", "namespace": "ns"}})
    data = request.encoded_body()
    assert data is not None
    assert b'"parameters":{"apiVersion":"v","kind":"K"}' in data
    assert b", " not in data and b": " not in data


def test_non_ascii_text_is_sent_as_utf8_not_escaped() -> None:
    request = _codec.patch_request(
        kinds.COMPUTE_DOMAIN, namespace="ns", name="cd", patch={"metadata": {"labels": {"a": "é"}}}
    )
    assert "é".encode() in (request.encoded_body() or b"")


def test_a_replace_reproduces_the_kubernetes_clients_own_bytes_in_read_order() -> None:
    obj = {"metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7"},
           "spec": {"z": 1, "a": {"kind": "K", "apiVersion": "v"}}}
    request = _codec.replace_request(kinds.RESOURCE_CLAIM_TEMPLATE, obj)
    assert request.method == "PUT"
    assert request.path.endswith("/namespaces/ns/resourceclaimtemplates/r")
    assert request.encoded_body() == json.dumps(obj).encode()


def test_a_replace_of_the_status_goes_to_the_status_subresource() -> None:
    obj = {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7"},
           "status": {"devices": []}}
    request = _codec.replace_request(kinds.RESOURCE_CLAIM, obj, subresource="status")
    assert request.method == "PUT"
    assert request.path.endswith("/namespaces/ns/resourceclaims/c/status")


def test_a_claims_allocation_changed_counts_as_an_immutable_field_error() -> None:
    """How Kubernetes 1.37 words a status patch that re-encoded the allocation's opaque
    config bytes (declarative validation)."""
    request = _codec.patch_request(kinds.RESOURCE_CLAIM, namespace="ns", name="c", patch={},
                                   subresource="status")
    message = ("ResourceClaim.resource.k8s.io \"c\" is invalid: [status.allocation: Invalid "
               "value: null: field cannot be modified once set]")
    body = json.dumps({"reason": "Invalid", "message": message})
    error = _codec.error_from_response(request, status=422, reason="", body=body.encode())
    assert _codec.is_immutable_field_error(error)


def test_requests_without_a_body_encode_to_nothing() -> None:
    assert _codec.get_request(kinds.POD, namespace="ns", name="p").encoded_body() is None


def test_only_a_422_field_is_immutable_counts_as_an_immutable_field_error() -> None:
    request = _codec.patch_request(kinds.RESOURCE_CLAIM_TEMPLATE, namespace="ns", name="r",
                                   patch={})
    message = "spec: Invalid value: x: field is immutable"
    body = json.dumps({"reason": "Invalid", "message": message})
    immutable = _codec.error_from_response(request, status=422, reason="", body=body.encode())
    other = _codec.error_from_response(request, status=422, reason="", body=b'{"message":"bad"}')
    assert _codec.is_immutable_field_error(immutable)
    assert not _codec.is_immutable_field_error(other)
    assert not _codec.is_immutable_field_error(errors.ConflictError("x"))
