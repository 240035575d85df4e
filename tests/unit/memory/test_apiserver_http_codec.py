"""The embedded API server's pure HTTP rules: routes, queries, bodies, Status and watch framing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.kube import _codec as kube_codec
from adapters.memory import _http_codec
from core import errors, kinds, ports


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_route_of_every_path_the_kube_adapter_builds_names_the_same_object(
    kind: kinds.ResourceKind,
) -> None:
    namespace = "team-a" if kind.namespaced else ""

    route = _http_codec.parse_route(
        kube_codec.resource_path(kind, namespace=namespace, name="obj-1", subresource="status")
    )

    assert route == _http_codec.Route(
        kind=kind, namespace=namespace, name="obj-1", subresource="status"
    )


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_route_of_a_collection_without_namespace_spans_all_namespaces(
    kind: kinds.ResourceKind,
) -> None:
    route = _http_codec.parse_route(kube_codec.resource_path(kind))

    assert route == _http_codec.Route(kind=kind)


def test_route_of_a_namespaced_collection_keeps_the_namespace() -> None:
    route = _http_codec.parse_route("/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims")

    assert route == _http_codec.Route(kind=kinds.RESOURCE_CLAIM, namespace="ns1")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/healthz",
        "/api",
        "/apis/resource.k8s.io",
        "/apis/resource.k8s.io/v1/widgets",
        "/apis/resource.k8s.io/v1alpha9/resourceclaims",
        "/api/v1/namespaces/ns1/nodes/n1",  # cluster-scoped kind under a namespace
        "/api/v1/pods/p1",  # namespaced object without its namespace
        "/api/v1/namespaces/ns1/pods/p1/status/extra",
        "/api/v1/namespaces/ns1/pods//status",
    ],
)
def test_route_of_an_unknown_path_is_a_404(path: str) -> None:
    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.parse_route(path)

    assert caught.value.code == 404
    assert caught.value.reason == "NotFound"


def test_route_decodes_percent_escapes_in_names() -> None:
    route = _http_codec.parse_route("/api/v1/namespaces/ns1/events/a%3Ab")

    assert route.name == "a:b"


def test_query_reads_watch_resource_version_timeout_and_selector() -> None:
    request = kube_codec.watch_request(
        kinds.COMPUTE_DOMAIN, resource_version="123", timeout_s=7
    )

    query = _http_codec.parse_query("&".join(f"{k}={v}" for k, v in request.query)
                                    + "&labelSelector=a%3D1%2Cb%3D%3D2")

    assert query == _http_codec.Query(
        label_selector={"a": "1", "b": "2"}, watch=True, resource_version="123", timeout_s=7.0
    )


def test_query_defaults_to_a_plain_get() -> None:
    query = _http_codec.parse_query("")

    assert not query.watch
    assert query.label_selector == {}
    assert query.resource_version == ""


def test_query_caps_the_watch_timeout() -> None:
    assert _http_codec.parse_query("timeoutSeconds=99999").timeout_s == (
        _http_codec.MAX_WATCH_TIMEOUT_S
    )


def test_query_with_a_non_numeric_timeout_is_a_400() -> None:
    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.parse_query("timeoutSeconds=soon")

    assert caught.value.code == 400


@pytest.mark.parametrize("selector", ["a!=1", "a in (1,2)", "!a", "=1"])
def test_set_based_label_selectors_are_a_400(selector: str) -> None:
    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.parse_label_selector(selector)

    assert caught.value.code == 400
    assert "equality" in caught.value.message


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9./-]{0,15}", fullmatch=True),
        st.from_regex(r"[a-zA-Z0-9._-]{0,10}", fullmatch=True),
        max_size=5,
    )
)
def test_label_selector_round_trips_the_kube_adapters_selector(selector: dict[str, str]) -> None:
    text = kube_codec.label_selector_query(selector)

    assert _http_codec.parse_label_selector(text) == selector


@pytest.mark.parametrize("body", [b"{", b"[]", b"null", b"\xff"])
def test_a_body_that_is_not_a_json_object_is_a_400(body: bytes) -> None:
    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.decode_body(body)

    assert caught.value.code == 400


def test_create_takes_the_namespace_from_the_path() -> None:
    route = _http_codec.Route(kind=kinds.COMPUTE_DOMAIN, namespace="ns1")

    obj = _http_codec.object_for_create(route, {"metadata": {"name": "cd"}})

    assert obj["metadata"] == {"name": "cd", "namespace": "ns1"}


def test_create_with_a_body_namespace_other_than_the_paths_is_a_400() -> None:
    route = _http_codec.Route(kind=kinds.COMPUTE_DOMAIN, namespace="ns1")

    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.object_for_create(route, {"metadata": {"name": "cd", "namespace": "ns2"}})

    assert caught.value.code == 400
    assert "does not match" in caught.value.message


def test_create_on_an_object_url_is_a_405() -> None:
    route = _http_codec.Route(kind=kinds.NODE, name="n1")

    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.object_for_create(route, {"metadata": {"name": "n1"}})

    assert caught.value.code == 405


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (errors.NotFoundError("x"), 404, "NotFound"),
        (errors.AlreadyExistsError("x"), 409, "AlreadyExists"),
        (errors.ConflictError("x"), 409, "Conflict"),
        (errors.GoneError("x"), 410, "Expired"),
        (errors.ClusterError("x"), 422, "Invalid"),
    ],
)
def test_cluster_errors_map_to_the_api_servers_codes(
    error: errors.ClusterError, code: int, reason: str
) -> None:
    assert _http_codec.error_status(error) == (code, reason)


@pytest.mark.parametrize(
    ("error", "creating", "expected"),
    [
        (errors.NotFoundError("gone"), False, errors.NotFoundError),
        (errors.AlreadyExistsError("taken"), True, errors.AlreadyExistsError),
        (errors.ConflictError("stale"), False, errors.ConflictError),
        (errors.GoneError("old"), False, errors.GoneError),
    ],
)
def test_the_kube_adapter_reads_our_status_back_as_the_same_error(
    error: errors.ClusterError, creating: bool, expected: type[errors.ClusterError]
) -> None:
    code, reason = _http_codec.error_status(error)
    body = json.dumps(_http_codec.status(code, reason, error.message)).encode()
    request = kube_codec.Request(method="POST" if creating else "GET", path="/api/v1/nodes")

    mapped = kube_codec.error_from_response(request, status=code, reason="", body=body)

    assert type(mapped) is expected
    assert error.message in mapped.message


def test_status_object_has_the_meta_v1_shape() -> None:
    assert _http_codec.status(404, "NotFound", "no such thing") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "no such thing",
        "reason": "NotFound",
        "code": 404,
    }


def test_list_object_carries_kind_list_and_resource_version() -> None:
    result = ports.ListResult(items=({"metadata": {"name": "a"}},), resource_version="42")

    doc = _http_codec.list_object(kinds.RESOURCE_SLICE, result)

    assert doc["kind"] == "ResourceSliceList"
    assert doc["apiVersion"] == "resource.k8s.io/v1"
    assert doc["metadata"] == {"resourceVersion": "42"}
    assert kube_codec.list_result(doc).items[0]["kind"] == "ResourceSlice"


def test_watch_lines_decode_as_the_same_events_in_the_kube_adapter() -> None:
    event = ports.WatchEvent(type=ports.WatchEventType.MODIFIED, obj={"metadata": {"name": "a"}})
    request = kube_codec.Request(method="GET", path="/api/v1/nodes")

    line = _http_codec.watch_line(event)

    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert kube_codec.watch_event_from_line(line, request=request) == event


def test_watch_error_line_with_410_is_read_as_gone() -> None:
    request = kube_codec.Request(method="GET", path="/api/v1/nodes")
    line = _http_codec.watch_error_line(410, "Expired", "too old resource version")

    with pytest.raises(errors.GoneError, match="too old"):
        kube_codec.watch_event_from_line(line, request=request)


def test_chunk_frames_data_with_its_hex_length() -> None:
    assert _http_codec.chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert _http_codec.chunk(b"") == b"0\r\n\r\n"


def test_kubeconfig_points_its_current_context_at_the_server() -> None:
    config = _http_codec.kubeconfig("http://127.0.0.1:1234")

    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    server = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    assert server["cluster"]["server"] == "http://127.0.0.1:1234"


def test_kubeconfig_with_a_token_gives_it_to_the_user() -> None:
    config = _http_codec.kubeconfig("http://127.0.0.1:1234", token="t0k")

    assert [u["user"] for u in config["users"]] == [{"token": "t0k"}]


def test_items_of_a_built_in_kinds_list_carry_no_type_fields_and_custom_ones_keep_them() -> None:
    item = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}}
    result = ports.ListResult(items=(item,), resource_version="42")

    built_in = _http_codec.list_object(kinds.POD, result)
    custom = _http_codec.list_object(kinds.COMPUTE_DOMAIN, result)

    assert built_in["items"] == [{"metadata": {"name": "a"}}]
    assert custom["items"] == [item]


def test_update_takes_name_and_namespace_from_the_path() -> None:
    route = _http_codec.Route(kind=kinds.LEASE, namespace="ns1", name="l1")

    obj = _http_codec.object_for_update(route, {"metadata": {}, "spec": {}})

    assert obj == {"metadata": {"name": "l1", "namespace": "ns1"}, "spec": {}}


@pytest.mark.parametrize("metadata", [{"name": "other"}, {"name": "l1", "namespace": "ns2"}])
def test_update_naming_another_object_than_the_path_is_a_400(metadata: dict[str, str]) -> None:
    route = _http_codec.Route(kind=kinds.LEASE, namespace="ns1", name="l1")

    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.object_for_update(route, {"metadata": metadata})

    assert caught.value.code == 400
    assert "does not match" in caught.value.message


def test_update_of_a_collection_is_a_405() -> None:
    with pytest.raises(_http_codec.RequestError) as caught:
        _http_codec.object_for_update(_http_codec.Route(kind=kinds.LEASE, namespace="ns1"), {})

    assert caught.value.code == 405


def test_an_immutable_spec_is_a_422_the_kube_adapter_recognises() -> None:
    route = _http_codec.Route(kind=kinds.RESOURCE_CLAIM_TEMPLATE, namespace="ns", name="rct")
    refused = _http_codec.immutable_spec(route)
    body = json.dumps(_http_codec.status(refused.code, refused.reason, refused.message)).encode()
    request = kube_codec.Request(method="PATCH", path="/apis/x")

    mapped = kube_codec.error_from_response(request, status=refused.code, reason="", body=body)

    assert kube_codec.is_immutable_field_error(mapped)


@pytest.mark.parametrize(("code", "reason"), [(503, "ServiceUnavailable"), (500, "InternalError"),
                                              (429, "TooManyRequests"), (418, "InternalError")])
def test_failure_reasons_are_the_api_servers(code: int, reason: str) -> None:
    assert _http_codec.failure_reason(code) == reason
