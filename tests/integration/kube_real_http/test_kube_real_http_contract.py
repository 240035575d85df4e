"""The Cluster port contract, run on KubeCluster -> EmbeddedAPIServer -> InMemoryCluster.

The test functions are the contract suite's own (tests/integration/cluster_contract), taken
over unchanged; this directory's conftest supplies a `cluster` that goes through real HTTP.
A few checks specific to the HTTP path follow.
"""

from __future__ import annotations

import http.client
import itertools
import json
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

import kube_real_http_loading
import pytest

from adapters.kube import cluster as kube_cluster
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from core import errors, kinds, models, ports

_contract = kube_real_http_loading.load_contract_module(
    "test_cluster_contract.py", as_name="kube_real_http_contract"
)
globals().update({k: v for k, v in vars(_contract).items() if k.startswith("test_")})
CONTRACT_TESTS = sorted(k for k in vars(_contract) if k.startswith("test_"))


def test_the_whole_contract_suite_is_taken_over() -> None:
    assert len(CONTRACT_TESTS) >= 20
    assert all(globals()[name] is getattr(_contract, name) for name in CONTRACT_TESTS)


@pytest.fixture
def served() -> Any:
    memory = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(memory).start()
    yield memory, server
    server.stop()


def _raw(server: apiserver.EmbeddedAPIServer, method: str, path: str, **kw: Any) -> Any:
    request = urllib.request.Request(server.url + path, method=method, **kw)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_unknown_resource_answers_a_404_status(served: Any) -> None:
    _memory, server = served

    code, body = _raw(server, "GET", "/apis/example.com/v1/widgets")

    assert code == 404
    assert body["kind"] == "Status" and body["reason"] == "NotFound"


def test_patch_with_a_non_merge_patch_content_type_is_a_415(served: Any) -> None:
    memory, server = served
    memory.create("Node", {"metadata": {"name": "n1"}})

    code, body = _raw(
        server, "PATCH", "/api/v1/nodes/n1", data=b"[]",
        headers={"Content-Type": "application/json-patch+json"},
    )

    assert code == 415
    assert body["reason"] == "UnsupportedMediaType"


def test_invalid_create_is_a_422_with_the_clusters_message(served: Any) -> None:
    _memory, server = served

    code, body = _raw(
        server, "POST", "/api/v1/nodes", data=b'{"metadata": {}}',
        headers={"Content-Type": "application/json"},
    )

    assert code == 422
    assert body["reason"] == "Invalid"
    assert "metadata.name" in body["message"]


def test_writes_through_http_are_seen_by_the_in_memory_cluster_and_back(
    served: Any, tmp_path: pathlib.Path
) -> None:
    memory, server = served
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kube = kube_cluster.KubeCluster.from_config(str(path))
    try:
        kube.create("Node", {"metadata": {"name": "n1", "labels": {"a": "1"}}})
        memory.patch("Node", namespace="", name="n1", patch={"metadata": {"labels": {"b": "2"}}})

        got = kube.get("Node", namespace="", name="n1")
    finally:
        kube.close()

    assert memory.get("Node", namespace="", name="n1")["metadata"]["uid"] == got["metadata"]["uid"]
    assert got["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_watch_from_empty_resource_version_starts_with_the_current_objects(
    served: Any, tmp_path: pathlib.Path
) -> None:
    memory, server = served
    memory.create("Node", {"metadata": {"name": "n1"}})
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kube = kube_cluster.KubeCluster.from_config(str(path))
    try:
        stream = kube.watch("Node", resource_version="", timeout_s=10)
        first = next(iter(stream))
        memory.create("Node", {"metadata": {"name": "n2"}})
        second = next(iter(stream))
    finally:
        kube.close()

    assert (first.type, first.obj["metadata"]["name"]) == (ports.WatchEventType.ADDED, "n1")
    assert (second.type, second.obj["metadata"]["name"]) == (ports.WatchEventType.ADDED, "n2")


def test_a_watch_ends_when_its_timeout_passes(served: Any, tmp_path: pathlib.Path) -> None:
    memory, server = served
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kube = kube_cluster.KubeCluster.from_config(str(path))
    try:
        events = list(
            kube.watch("Node", resource_version=memory.resource_version, timeout_s=1)
        )
    finally:
        kube.close()

    assert events == []


def test_stop_ends_open_watches(served: Any, tmp_path: pathlib.Path) -> None:
    memory, server = served
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kube = kube_cluster.KubeCluster.from_config(str(path))
    stream = kube.watch(
        kinds.COMPUTE_DOMAIN.kind, resource_version=memory.resource_version, timeout_s=300
    )
    memory.create(
        kinds.COMPUTE_DOMAIN.kind,
        {"metadata": {"name": "a", "namespace": "ns"},
         "spec": {"channel": {"resourceClaimTemplate": {"name": "a"}}}},
    )
    assert next(iter(stream)).obj["metadata"]["name"] == "a"

    started = time.monotonic()
    server.stop()

    try:
        after_stop = list(itertools.islice(stream, 1))
    except errors.ClusterError:  # a broken stream ends the watch as well as a clean end
        after_stop = []
    kube.close()
    assert after_stop == []
    assert time.monotonic() - started < 30


def test_kube_event_with_generate_name_is_stored(served: Any, tmp_path: pathlib.Path) -> None:
    memory, server = served
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    kube = kube_cluster.KubeCluster.from_config(str(path))
    try:
        kube.emit_event(
            involved=models.ObjectRef(kind="Node", name="n1"),
            reason="Probe",
            message="hello",
            warning=False,
        )
    finally:
        kube.close()

    (event,) = memory.list("Event", namespace="default").items
    assert event["metadata"]["name"].startswith("n1.")
    assert event["reason"] == "Probe"
    assert event["involvedObject"] == {"kind": "Node", "name": "n1", "apiVersion": "v1"}


def test_watch_is_chunked_ndjson_and_an_expired_version_is_an_error_event_with_410() -> None:
    memory = memory_cluster.InMemoryCluster(history_size=2)
    for i in range(5):
        memory.create("Node", {"metadata": {"name": f"n{i}"}})
    server = apiserver.EmbeddedAPIServer(memory).start()
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/api/v1/nodes?watch=true&resourceVersion=101&timeoutSeconds=5")
        answer = connection.getresponse()
        lines = answer.read().splitlines()
    finally:
        connection.close()
        server.stop()

    assert answer.status == 200
    assert answer.getheader("Transfer-Encoding") == "chunked"
    (line,) = lines
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_watch_with_a_label_selector_reports_only_matching_objects(served: Any) -> None:
    memory, server = served
    start = memory.resource_version
    memory.create("Node", {"metadata": {"name": "other", "labels": {"pool": "b"}}})
    memory.create("Node", {"metadata": {"name": "mine", "labels": {"pool": "a"}}})
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(
            "GET",
            f"/api/v1/nodes?watch=true&resourceVersion={start}&timeoutSeconds=1"
            "&labelSelector=pool%3Da",
        )
        lines = connection.getresponse().read().splitlines()
    finally:
        connection.close()

    assert [json.loads(line)["object"]["metadata"]["name"] for line in lines] == ["mine"]
