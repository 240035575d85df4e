"""The plugin's gRPC servers over real unix sockets, called the way the kubelet calls them.

Covers: v1 and v1beta1 prepare/unprepare, per-claim errors, missing claims, empty requests,
service exceptions becoming per-claim errors, the exact method path, GetInfo values, the
registered event, grpc.health.v1 SERVING/NOT_SERVING, the silent health stream, and socket
hygiene (stale sockets removed at start, sockets removed at stop).
"""

from __future__ import annotations

import os
import pathlib
import socket
import threading
import time

import grpc
import pytest
from grpc_fake_service import DRIVER, FakePluginService
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adapters.grpc import client, server
from adapters.grpc.generated import dra_health_v1alpha1_pb2, dra_v1_pb2
from core import models, names


def _ref(uid: str) -> models.ClaimRef:
    return models.ClaimRef(uid=names.ClaimUID(uid), namespace="team", name=f"claim-{uid}")


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_answer_per_claim(
    plugin: server.PluginServer, fake_service: FakePluginService, version: client.DRAVersion
) -> None:
    with client.DRAClient(plugin.dra_socket_path, version=version) as dra:
        prepared = dra.prepare([_ref("u1"), _ref("bad1"), _ref("skip1")])
        assert prepared == {
            "u1": models.ClaimResult(devices=(fake_service.device_for("u1"),)),
            "bad1": models.ClaimResult(error="claim team/claim-bad1 needs an NVLink clique"),
        }
        assert fake_service.prepared == {"u1"}
        assert dra.unprepare([_ref("u1")]) == {"u1": models.ClaimResult()}
    assert fake_service.prepared == set()
    assert fake_service.calls[0] == ("prepare", (_ref("u1"), _ref("bad1"), _ref("skip1")))


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_empty_requests_succeed_without_calling_the_service(
    plugin: server.PluginServer, fake_service: FakePluginService, version: client.DRAVersion
) -> None:
    with client.DRAClient(plugin.dra_socket_path, version=version) as dra:
        assert dra.prepare([]) == {}
        assert dra.unprepare([]) == {}
    assert fake_service.calls == []


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_service_exception_becomes_an_error_for_every_claim(
    plugin: server.PluginServer, version: client.DRAVersion
) -> None:
    with client.DRAClient(plugin.dra_socket_path, version=version) as dra:
        answer = dra.prepare([_ref("boom1"), _ref("u2")])
        assert set(answer) == {"boom1", "u2"}
        for result in answer.values():
            assert result.devices == ()
            assert "RuntimeError: simulated bug" in result.error
        again = dra.unprepare([_ref("boom1")])
        assert "simulated bug" in again[names.ClaimUID("boom1")].error


def test_prepare_is_served_at_the_kubelet_method_path(plugin: server.PluginServer) -> None:
    with grpc.insecure_channel(f"unix://{plugin.dra_socket_path}") as channel:
        call = channel.unary_unary(
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
            request_serializer=dra_v1_pb2.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1_pb2.NodePrepareResourcesResponse.FromString,
        )
        claim = dra_v1_pb2.Claim(namespace="team", uid="u9", name="claim-u9")
        response = call(dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=10)
    assert response.claims["u9"].devices[0].device_name == "channel-0"
    assert response.claims["u9"].error == ""


def test_v1beta1_is_served_at_its_own_method_path(plugin: server.PluginServer) -> None:
    with grpc.insecure_channel(f"unix://{plugin.dra_socket_path}") as channel:
        call = channel.unary_unary(
            "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
            request_serializer=dra_v1_pb2.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1_pb2.NodeUnprepareResourcesResponse.FromString,
        )
        claim = dra_v1_pb2.Claim(namespace="team", uid="u9", name="claim-u9")
        response = call(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10)
    assert list(response.claims) == ["u9"]


def test_get_info_describes_the_dra_plugin(plugin: server.PluginServer) -> None:
    with client.RegistrationClient(plugin.registration_socket_path) as reg:
        info = reg.get_info()
    assert info == client.PluginInfo(
        type="DRAPlugin",
        name=DRIVER,
        endpoint=plugin.dra_socket_path,
        supported_versions=("v1.DRAPlugin", "v1beta1.DRAPlugin"),
    )
    assert plugin.registration_socket_path.endswith(f"/registry/{DRIVER}-reg.sock")
    assert plugin.dra_socket_path.endswith(f"/plugins/{DRIVER}/dra.sock")


def test_registered_is_set_only_by_a_positive_notification(plugin: server.PluginServer) -> None:
    with client.RegistrationClient(plugin.registration_socket_path) as reg:
        reg.notify(False, "version mismatch")
        assert not plugin.registered.is_set()
        reg.notify(True)
    assert plugin.registered.wait(5)


def _health_status(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status)


def test_health_is_serving_while_started_and_not_serving_on_stop(
    plugin: server.PluginServer,
) -> None:
    port = plugin.health_port
    assert port is not None and port > 0
    assert _health_status(port) == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stopper = threading.Thread(target=plugin.stop, args=(1.0,))
        stopper.start()
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        stopper.join()
    assert plugin.wait(0)


def _watch_resources(channel: grpc.Channel) -> object:
    return channel.unary_stream(
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
        request_serializer=dra_health_v1alpha1_pb2.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=dra_health_v1alpha1_pb2.NodeWatchResourcesResponse.FromString,
    )


def test_the_unadvertised_resource_health_service_is_not_served(
    plugin: server.PluginServer,
) -> None:
    with grpc.insecure_channel(f"unix://{plugin.dra_socket_path}") as channel:
        stream = _watch_resources(channel)(  # type: ignore[operator]
            dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=10
        )
        with pytest.raises(grpc.RpcError) as failed:
            list(stream)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_resource_health_streams_never_starve_prepares(
    plugin: server.PluginServer, fake_service: FakePluginService
) -> None:
    """Sixteen kubelets' watch streams once took all 16 worker threads of the DRA server."""
    with grpc.insecure_channel(f"unix://{plugin.dra_socket_path}") as channel:
        streams = [
            _watch_resources(channel)(  # type: ignore[operator]
                dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=60
            )
            for _ in range(32)
        ]

        def settled() -> bool:
            # Either every stream was answered, or they hold every worker the server has.
            workers = [t for t in threading.enumerate() if t.name.startswith("kubelet-grpc")]
            return all(s.done() for s in streams) or len(workers) >= 16  # type: ignore[attr-defined]

        deadline = time.monotonic() + 10
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            with client.DRAClient(plugin.dra_socket_path, timeout_s=10) as dra:
                ref = models.ClaimRef(uid=names.ClaimUID("after-streams"), namespace="ns", name="c")
                assert dra.prepare([ref])[ref.uid].error == ""
        finally:
            for stream in streams:
                stream.cancel()  # type: ignore[attr-defined]


def test_sockets_are_removed_on_stop(plugin: server.PluginServer) -> None:
    assert os.path.exists(plugin.dra_socket_path)
    assert os.path.exists(plugin.registration_socket_path)
    plugin.stop(0.5)
    assert not os.path.exists(plugin.dra_socket_path)
    assert not os.path.exists(plugin.registration_socket_path)


def test_stale_sockets_and_files_are_replaced_at_start(
    sock_base: pathlib.Path, fake_service: FakePluginService
) -> None:
    plugin_dir = sock_base / "plugins"
    registry_dir = sock_base / "registry"
    plugin_dir.mkdir()
    registry_dir.mkdir()
    # A socket left behind by a killed plugin, and a plain file where the other socket goes.
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(plugin_dir / "dra.sock"))
    leftover.close()
    (registry_dir / f"{DRIVER}-reg.sock").write_text("stale")
    srv = server.PluginServer(
        service=fake_service,
        driver_name=DRIVER,
        plugin_dir=str(plugin_dir),
        registry_dir=str(registry_dir),
        health_port=None,
    )
    srv.start()
    try:
        assert srv.health_port is None
        with client.RegistrationClient(srv.registration_socket_path, timeout_s=5) as reg:
            assert reg.get_info().name == DRIVER
        with client.DRAClient(srv.dra_socket_path, timeout_s=5) as dra:
            assert dra.prepare([_ref("u1")])[names.ClaimUID("u1")].error == ""
    finally:
        srv.stop(0)


def test_a_directory_in_place_of_the_socket_is_refused(
    sock_base: pathlib.Path, fake_service: FakePluginService
) -> None:
    (sock_base / "plugins" / "dra.sock").mkdir(parents=True)
    srv = server.PluginServer(
        service=fake_service,
        driver_name=DRIVER,
        plugin_dir=str(sock_base / "plugins"),
        registry_dir=str(sock_base / "registry"),
        health_port=None,
    )
    with pytest.raises(IsADirectoryError, match="remove the directory"):
        srv.start()


def test_client_reports_an_absent_plugin_as_a_call_error(sock_base: pathlib.Path) -> None:
    with (
        client.DRAClient(str(sock_base / "nobody.sock"), timeout_s=1) as dra,
        pytest.raises(client.PluginCallError, match="UNAVAILABLE"),
    ):
        dra.prepare([_ref("u1")])


def test_try_register_registers_as_the_plugin_watcher_does(
    plugin: server.PluginServer, tmp_path: pathlib.Path
) -> None:
    assert client.try_register(str(tmp_path / "absent.sock")) is None
    info = client.try_register(plugin.registration_socket_path)
    assert info is not None and info.name == DRIVER
    assert plugin.registered.wait(5)
