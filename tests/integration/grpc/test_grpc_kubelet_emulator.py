"""The kubelet emulator registers a real plugin server and calls it over gRPC."""

from __future__ import annotations

import pathlib

import pytest
from grpc_fake_service import DRIVER, FakePluginService

from adapters.grpc import client, kubelet_emulator, server
from core import models, names


def _ref(uid: str) -> models.ClaimRef:
    return models.ClaimRef(uid=names.ClaimUID(uid), namespace="team", name=f"claim-{uid}")


def test_emulator_registers_the_plugin_and_prepares_over_v1(
    plugin: server.PluginServer, fake_service: FakePluginService, sock_base: pathlib.Path
) -> None:
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=str(sock_base / "registry"))
    registered = kubelet.wait_for_plugin(DRIVER, timeout_s=10)
    assert registered.endpoint == plugin.dra_socket_path
    assert registered.version == "v1"
    assert plugin.registered.wait(5)
    assert kubelet.prepare(DRIVER, [_ref("u1"), _ref("bad1")]) == {
        "u1": models.ClaimResult(devices=(fake_service.device_for("u1"),)),
        "bad1": models.ClaimResult(error="claim team/claim-bad1 needs an NVLink clique"),
    }
    assert kubelet.unprepare(DRIVER, [_ref("u1")]) == {"u1": models.ClaimResult()}
    assert kubelet.liveness_check(DRIVER)
    assert kubelet.discover() == ()  # already registered: not registered twice


def test_liveness_check_fails_once_the_plugin_stopped(
    plugin: server.PluginServer, sock_base: pathlib.Path
) -> None:
    registry = str(sock_base / "registry")
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=registry, timeout_s=2)
    kubelet.wait_for_plugin(DRIVER, timeout_s=10)
    plugin.stop(0)
    assert not kubelet.liveness_check(DRIVER)
    with pytest.raises(client.PluginCallError):
        kubelet.prepare(DRIVER, [_ref("u1")])


def test_wait_for_an_absent_plugin_times_out_with_a_hint(sock_base: pathlib.Path) -> None:
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=str(sock_base / "registry"))
    with pytest.raises(TimeoutError, match="is the kubelet plugin running"):
        kubelet.wait_for_plugin(DRIVER, timeout_s=0.2)


def test_calls_to_an_unregistered_driver_are_refused(sock_base: pathlib.Path) -> None:
    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=str(sock_base))
    with pytest.raises(client.PluginCallError, match="not registered"):
        kubelet.prepare(DRIVER, [_ref("u1")])


def test_a_restarted_plugin_is_registered_again(
    sock_base: pathlib.Path, fake_service: FakePluginService
) -> None:
    def start() -> server.PluginServer:
        srv = server.PluginServer(
            service=fake_service,
            driver_name=DRIVER,
            plugin_dir=str(sock_base / "plugins"),
            registry_dir=str(sock_base / "registry"),
            health_port=None,
        )
        srv.start()
        return srv

    kubelet = kubelet_emulator.KubeletEmulator(registry_dir=str(sock_base / "registry"))
    first = start()
    kubelet.wait_for_plugin(DRIVER, timeout_s=10)
    assert first.registered.wait(5)
    first.stop(0)
    second = start()
    try:
        assert kubelet.discover() == (DRIVER,)
        assert second.registered.wait(5)
        assert kubelet.prepare(DRIVER, [_ref("u1")])[names.ClaimUID("u1")].error == ""
    finally:
        second.stop(0)
