"""The kubelet's device-health stream on the DRA socket, over real unix sockets.

Covers: the list in all three versions (v1, v1beta1, v1alpha1) at once on open, again on
`notify()`; advertising in the registration; no stream and no advertisement without a source;
64 open streams while prepares on a 2-thread pool all complete; a stop ends open streams;
a socket that cannot be bound fails `start()` with the cause; bad settings refused.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_fake_service import DRIVER, FakePluginService

from adapters.grpc import _codec, client, health_stream, loop_server, server
from adapters.grpc.generated import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_health_v1beta1_pb2,
    dra_health_v1beta1_pb2_grpc,
)
from core import device_health, models, names, ports

VERSIONS = (
    (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
    (dra_health_v1beta1_pb2, dra_health_v1beta1_pb2_grpc),
    (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc),
)
# Far above what any call here needs: a guard against a hang, not a timing assertion.
GUARD_S = 30.0


class FakeHealthSource:
    """Implements `ports.DeviceHealthSource` with a list the test sets."""

    def __init__(self, *devices: str) -> None:
        self.devices = devices

    def device_health(self) -> tuple[device_health.DeviceHealth, ...]:
        return device_health.plan_device_health(
            pool="node-a", published=self.devices, observed=None, now_s=1_700_000_000
        )


def _start(sock_base: pathlib.Path, *, source: FakeHealthSource | None,
           max_workers: int = 16) -> server.PluginServer:
    srv = server.PluginServer(
        service=FakePluginService(),
        driver_name=DRIVER,
        plugin_dir=str(sock_base / "plugins" / DRIVER),
        registry_dir=str(sock_base / "registry"),
        health_port=None,
        max_workers=max_workers,
        device_health=source,
    )
    srv.start()
    return srv


@pytest.fixture
def healthy(sock_base: pathlib.Path) -> Iterator[tuple[server.PluginServer, FakeHealthSource]]:
    source: ports.DeviceHealthSource = FakeHealthSource("gpu-0", "gpu-1")
    assert isinstance(source, FakeHealthSource)
    srv = _start(sock_base, source=source, max_workers=2)
    try:
        yield srv, source
    finally:
        srv.stop(0)


def _names(message: Any) -> list[tuple[str, str, int]]:
    return [(d.device.pool_name, d.device.device_name, d.health) for d in message.devices]


def test_every_version_streams_the_list_at_once_and_again_on_notify(
    healthy: tuple[server.PluginServer, FakeHealthSource],
) -> None:
    srv, source = healthy
    assert srv.health_streams is not None
    with grpc.insecure_channel(client.unix_target(srv.dra_socket_path)) as channel:
        streams = [
            grpc_mod.DRAResourceHealthStub(channel).NodeWatchResources(
                pb2.NodeWatchResourcesRequest(), timeout=GUARD_S
            )
            for pb2, grpc_mod in VERSIONS
        ]
        for (pb2, _), stream in zip(VERSIONS, streams, strict=True):
            first = next(stream)
            assert _names(first) == [("node-a", "gpu-0", pb2.HEALTHY),
                                     ("node-a", "gpu-1", pb2.HEALTHY)]
            assert first.devices[0].health_check_timeout_seconds == device_health.DEFAULT_TIMEOUT_S
            assert first.devices[0].message == device_health.NOT_MONITORED_MESSAGE
        source.devices = ("gpu-0",)
        srv.health_streams.notify()
        for (pb2, _), stream in zip(VERSIONS, streams, strict=True):
            assert _names(next(stream)) == [("node-a", "gpu-0", pb2.HEALTHY)]
        for stream in streams:
            stream.cancel()


def test_the_registration_advertises_the_health_service_in_every_version(
    healthy: tuple[server.PluginServer, FakeHealthSource],
) -> None:
    srv, _ = healthy
    with client.RegistrationClient(srv.registration_socket_path) as registration:
        info = registration.get_info()
    assert info.supported_versions == (*_codec.SUPPORTED_VERSIONS, *_codec.HEALTH_VERSIONS)


def test_without_a_source_nothing_is_served_or_advertised(sock_base: pathlib.Path) -> None:
    srv = _start(sock_base, source=None)
    try:
        assert srv.health_streams is None
        with client.RegistrationClient(srv.registration_socket_path) as registration:
            assert registration.get_info().supported_versions == _codec.SUPPORTED_VERSIONS
        with grpc.insecure_channel(client.unix_target(srv.dra_socket_path)) as channel:
            stream = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(
                channel).NodeWatchResources(
                dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=GUARD_S)
            with pytest.raises(grpc.RpcError) as failure:
                next(stream)
            assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        srv.stop(0)


def test_prepares_complete_while_64_streams_are_open_on_a_two_thread_pool(
    healthy: tuple[server.PluginServer, FakeHealthSource],
) -> None:
    """Had the streams run on the prepare pool, its 2 threads would be held by the first two
    streams and not one prepare would be answered."""
    srv, _ = healthy
    assert srv.health_streams is not None
    with grpc.insecure_channel(client.unix_target(srv.dra_socket_path)) as channel:
        stub = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel)
        streams = [
            stub.NodeWatchResources(dra_health_v1_pb2.NodeWatchResourcesRequest(),
                                    timeout=GUARD_S)
            for _ in range(64)
        ]
        for stream in streams:
            assert len(next(stream).devices) == 2
        assert srv.health_streams.open_streams == 64

        def prepare(i: int) -> models.ClaimResult:
            ref = models.ClaimRef(uid=names.ClaimUID(f"uid-{i}"), namespace="ns", name=f"c{i}")
            with client.DRAClient(srv.dra_socket_path, timeout_s=GUARD_S) as dra:
                return dra.prepare((ref,))[ref.uid]

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(prepare, range(48)))
        assert all(r.error == "" and len(r.devices) == 1 for r in results)
        # The streams are still open and still answer a change.
        srv.health_streams.notify()
        for stream in streams:
            assert len(next(stream).devices) == 2
            stream.cancel()


def test_stop_ends_open_streams(sock_base: pathlib.Path) -> None:
    srv = _start(sock_base, source=FakeHealthSource("gpu-0"))
    with grpc.insecure_channel(client.unix_target(srv.dra_socket_path)) as channel:
        stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=GUARD_S)
        next(stream)
        # NB: a long grace; the stop must not need it, since the streams end themselves.
        stopper = threading.Thread(target=srv.stop, args=(GUARD_S,))
        stopper.start()
        assert list(stream) == []  # ended cleanly, not cancelled by the deadline
        stopper.join(GUARD_S)
        assert not stopper.is_alive()
    assert srv.wait(0)


def test_a_dra_socket_that_cannot_be_bound_fails_start_with_the_cause(
    tmp_path: pathlib.Path,
) -> None:
    dra = loop_server.LoopServer(max_workers=1, name="t")
    with pytest.raises(RuntimeError):
        dra.start(setup=lambda _server: None,
                  address=f"unix://{tmp_path}/no-such-dir/dra.sock")
    dra.stop(0)


@pytest.mark.parametrize("resend_s", [0, -1, device_health.KUBELET_FIXED_TIMEOUT_S, 60])
def test_bad_resend_interval_is_refused(resend_s: float) -> None:
    """Not positive, or not under the 30 s after which a 1.34 kubelet calls a device Unknown
    whatever timeout the list names."""
    with pytest.raises(ValueError, match="resend interval"):
        health_stream.HealthStreams(FakeHealthSource(), resend_s=resend_s)


def test_notify_and_close_before_start_do_nothing() -> None:
    streams = health_stream.HealthStreams(FakeHealthSource())
    streams.notify()
    streams.close()
    assert streams.open_streams == 0
