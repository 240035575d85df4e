"""Two plugin pods of one driver on a node, as a rolling update runs them (per-pod sockets).

Covers: servers with different pod UIDs serve side by side from the same directories, each
registering its own DRA socket and healthy only once the kubelet registered it; a stopping
server answers the call it is in (the drain) and refuses new ones while its registration
socket is still there, then removes both sockets;
`serving_sockets` finds the other pod's live socket but not a dead one; `remove_dead_sockets`
removes a killed pod's per-pod sockets, never a live, young, fixed or other driver's one.
"""

from __future__ import annotations

import os
import pathlib
import socket
import threading
import time
from collections.abc import Iterator, Mapping

import grpc
import pytest
from grpc_fake_service import DRIVER, FakePluginService
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adapters.grpc import client, server
from core import models, names, ports

OLD_UID = "0f4b2a5e-8c1d-4e2f-9a3b-7c6d5e4f3a2b"
NEW_UID = "7d1e9c3a-2b4f-4a6e-8d5c-1f0e9b8a7c6d"


def _ref(uid: str) -> models.ClaimRef:
    return models.ClaimRef(uid=names.ClaimUID(uid), namespace="team", name=f"claim-{uid}")


class HeldPrepares(FakePluginService):
    """Prepares wait for `release` once `entered` is set: a call in flight at a stop."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        self.entered.set()
        assert self.release.wait(10)
        return super().node_prepare(claims, call=call)


def _server(base: pathlib.Path, service: FakePluginService, uid: str,
            driver: str = DRIVER) -> server.PluginServer:
    return server.PluginServer(
        service=service, driver_name=driver, plugin_dir=str(base / "plugins" / driver),
        registry_dir=str(base / "registry"), health_port=None, pod_uid=uid,
    )


@pytest.fixture
def old_and_new(sock_base: pathlib.Path) -> Iterator[tuple[server.PluginServer,
                                                           server.PluginServer, HeldPrepares]]:
    held = HeldPrepares()
    old = _server(sock_base, held, OLD_UID)
    new = _server(sock_base, FakePluginService(), NEW_UID)
    old.start()
    new.start()
    try:
        yield old, new, held
    finally:
        held.release.set()
        for srv in (old, new):
            if not srv.wait(0):
                srv.stop(0)


def test_two_pods_of_a_driver_serve_side_by_side_each_under_its_own_names(
    old_and_new: tuple[server.PluginServer, server.PluginServer, HeldPrepares],
) -> None:
    old, new, held = old_and_new
    held.release.set()
    assert os.path.basename(old.registration_socket_path) == f"{DRIVER}-{OLD_UID}-reg.sock"
    assert os.path.basename(new.dra_socket_path) == f"dra-{NEW_UID}.sock"
    for srv in (old, new):
        with client.RegistrationClient(srv.registration_socket_path, timeout_s=5) as reg:
            assert reg.get_info().endpoint == srv.dra_socket_path
        with client.DRAClient(srv.dra_socket_path, timeout_s=5) as dra:
            assert dra.prepare([_ref("u1")])[names.ClaimUID("u1")].error == ""


def test_a_stopping_pod_answers_its_call_in_flight_before_it_deregisters(
    old_and_new: tuple[server.PluginServer, server.PluginServer, HeldPrepares],
) -> None:
    old, new, held = old_and_new
    answers: list[Mapping[names.ClaimUID, models.ClaimResult]] = []

    def call_old() -> None:
        with client.DRAClient(old.dra_socket_path, timeout_s=10) as dra:
            answers.append(dra.prepare([_ref("u1")]))

    caller = threading.Thread(target=call_old)
    caller.start()
    assert held.entered.wait(5)
    stopper = threading.Thread(target=old.stop, args=(10.0,))
    stopper.start()
    # Draining: new calls are refused, the kubelet still sees the registration.
    deadline = time.monotonic() + 5
    while True:
        with client.DRAClient(old.dra_socket_path, timeout_s=1) as dra:
            try:
                dra.prepare([_ref("u2")])
            except client.PluginCallError:
                break
        assert time.monotonic() < deadline, "the stopping plugin still takes new calls"
        time.sleep(0.05)
    assert os.path.exists(old.registration_socket_path)
    held.release.set()
    caller.join(10)
    stopper.join(10)
    assert answers == [{"u1": models.ClaimResult(devices=(held.device_for("u1"),))}]
    assert not os.path.exists(old.registration_socket_path)
    assert not os.path.exists(old.dra_socket_path)
    # The new pod serves on, and is what the old one sees beside it.
    assert server.serving_sockets(os.path.dirname(old.dra_socket_path),
                                  besides=old.dra_socket_path) == (new.dra_socket_path,)
    with client.DRAClient(new.dra_socket_path, timeout_s=5) as dra:
        assert dra.prepare([_ref("u3")])[names.ClaimUID("u3")].error == ""


def test_a_per_pod_plugin_is_healthy_only_once_the_kubelet_registered_it(
    sock_base: pathlib.Path,
) -> None:
    srv = server.PluginServer(
        service=FakePluginService(), driver_name=DRIVER,
        plugin_dir=str(sock_base / "plugins" / DRIVER), registry_dir=str(sock_base / "registry"),
        health_port=0, health_host="127.0.0.1", pod_uid=NEW_UID,
    )
    srv.start()
    try:
        assert srv.health_port is not None
        with grpc.insecure_channel(f"127.0.0.1:{srv.health_port}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=10)
            # Started, sockets accepting, but the kubelet does not know it yet: the
            # DaemonSet must not count the pod ready and stop the old one.
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert client.try_register(srv.registration_socket_path) is not None
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        srv.stop(0)


def _dead_socket(path: pathlib.Path, *, age_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_a_killed_pods_sockets_are_removed_but_no_live_young_or_foreign_one(
    sock_base: pathlib.Path,
) -> None:
    plugin_dir, registry_dir = sock_base / "plugins" / DRIVER, sock_base / "registry"
    live = _server(sock_base, FakePluginService(), NEW_UID)
    live.start()
    try:
        os.utime(live.dra_socket_path, (0, 0))
        os.utime(live.registration_socket_path, (0, 0))
        dead = [plugin_dir / f"dra-{OLD_UID}.sock", registry_dir / f"{DRIVER}-{OLD_UID}-reg.sock"]
        kept = [plugin_dir / "dra.sock", registry_dir / f"{DRIVER}-reg.sock",
                registry_dir / f"gpu.nvidia.com-{OLD_UID}-reg.sock"]
        for path in [*dead, *kept]:
            _dead_socket(path, age_s=600)
        young = plugin_dir / "dra-young.sock"
        _dead_socket(young, age_s=0)
        assert server.serving_sockets(str(plugin_dir), besides=live.dra_socket_path) == ()
        removed = server.remove_dead_sockets(
            plugin_dir=str(plugin_dir), registry_dir=str(registry_dir), driver_name=DRIVER,
            now=time.time())
        assert sorted(removed) == sorted(str(p) for p in dead)
        for path in [*kept, young]:
            assert path.exists()
        assert os.path.exists(live.dra_socket_path)
        assert os.path.exists(live.registration_socket_path)
        with client.DRAClient(live.dra_socket_path, timeout_s=5) as dra:
            assert dra.prepare([_ref("u1")])[names.ClaimUID("u1")].error == ""
    finally:
        live.stop(0)

