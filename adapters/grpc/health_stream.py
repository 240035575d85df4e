"""The kubelet's device-health stream (`DRAResourceHealth/NodeWatchResources`), all versions.

The kubelet keeps one stream per plugin open for as long as both live, and re-opens it
after every failure; a misbehaving client may open many. A stream that held a worker thread
of the DRA server would take that thread from prepares (it once starved them), so streams
here are coroutines on the DRA server's event loop (`adapters.grpc.loop_server`): an open
stream costs no thread, and prepares keep their own pool whatever the number of streams.

Every message is the complete list (the kubelet reconciles against it), sent when a stream
opens, again after `notify()` (the list changed), and at least every `resend_s` seconds so
the kubelet never lets a state of a live plugin time out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from adapters.grpc import _codec
from adapters.grpc.generated import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_health_v1beta1_pb2,
    dra_health_v1beta1_pb2_grpc,
)
from core import device_health, ports

log = logging.getLogger(__name__)

# Under `core.device_health.KUBELET_FIXED_TIMEOUT_S` (the 1.34 kubelet's own 30 s, which
# ignores the timeout we send), with room for a loaded node's scheduling delays.
DEFAULT_RESEND_S = 20.0

Encode = Callable[[dra_health_v1_pb2.NodeWatchResourcesResponse], Any]


class HealthStreams:
    """The state shared by all open streams: the source, the open count, the change signal.

    Lives on the DRA server's event loop; `notify()` is the one method other threads call.
    """

    def __init__(
        self, source: ports.DeviceHealthSource, *, resend_s: float = DEFAULT_RESEND_S
    ) -> None:
        if resend_s <= 0:
            raise ValueError(f"health resend interval must be positive seconds, got {resend_s}")
        if resend_s >= device_health.KUBELET_FIXED_TIMEOUT_S:
            # NB: a kubelet that ignores our timeout would read every device as Unknown for
            # part of each interval.
            raise ValueError(
                f"health resend interval must be under the kubelet's fixed "
                f"{device_health.KUBELET_FIXED_TIMEOUT_S} s, got {resend_s}")
        self._source = source
        self._resend_s = resend_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeups: set[asyncio.Event] = set()
        self._closing = False

    @property
    def open_streams(self) -> int:
        """How many streams are open now (read from any thread; approximate while changing)."""
        return len(self._wakeups)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the loop the streams run on (once, at server start)."""
        self._loop = loop

    def notify(self) -> None:
        """The health list changed: every open stream sends it now. Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._wake_all)

    def close(self) -> None:
        """End every open stream (and any opened later) cleanly, so a server stop need not
        wait out its grace period for streams that never end by themselves."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._close)

    def _close(self) -> None:
        self._closing = True
        self._wake_all()

    def _wake_all(self) -> None:
        for wakeup in self._wakeups:
            wakeup.set()

    async def watch(self, *, encode: Encode, version: str, peer: str) -> AsyncIterator[Any]:
        """One stream: the list now, then on every change or resend tick, until cancelled."""
        wakeup = asyncio.Event()
        self._wakeups.add(wakeup)
        log.info("event=health_stream_opened version=%s peer=%s open=%d",
                 version, peer, len(self._wakeups))
        try:
            while not self._closing:
                wakeup.clear()
                # NB: the source answers from memory (the last published list); it must not
                # block, since every stream shares this loop.
                entries = self._source.device_health()
                yield encode(_codec.health_response_to_pb(entries))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), timeout=self._resend_s)
        finally:
            self._wakeups.discard(wakeup)
            log.info("event=health_stream_closed version=%s peer=%s open=%d",
                     version, peer, len(self._wakeups))


def _identity(response: dra_health_v1_pb2.NodeWatchResourcesResponse) -> Any:
    return response


def _as_v1beta1(response: dra_health_v1_pb2.NodeWatchResourcesResponse) -> Any:
    return _codec.convert(response, dra_health_v1beta1_pb2.NodeWatchResourcesResponse)


def _as_v1alpha1(response: dra_health_v1_pb2.NodeWatchResourcesResponse) -> Any:
    return _codec.convert(response, dra_health_v1alpha1_pb2.NodeWatchResourcesResponse)


class _Watching:
    """One version's `NodeWatchResources`: the shared stream, encoded for that version."""

    def __init__(
        self, streams: HealthStreams, *, encode: Callable[[Any], Any], version: str
    ) -> None:
        self._streams = streams
        self._encode = encode
        self._version = version

    async def NodeWatchResources(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async for message in self._streams.watch(
            encode=self._encode, version=self._version, peer=context.peer()
        ):
            yield message


class _V1Servicer(_Watching, dra_health_v1_pb2_grpc.DRAResourceHealthServicer):
    """`v1.DRAResourceHealth` (kubelet 1.37+)."""


class _V1Beta1Servicer(_Watching, dra_health_v1beta1_pb2_grpc.DRAResourceHealthServicer):
    """`v1beta1.DRAResourceHealth` (kubelet 1.36)."""


class _V1Alpha1Servicer(_Watching, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    """`v1alpha1.DRAResourceHealth` (kubelet 1.34, 1.35; later ones still accept it)."""


def add_to_server(streams: HealthStreams, server: Any) -> None:
    """Register the stream in all three versions on an asyncio gRPC server."""
    dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
        _V1Servicer(streams, encode=_identity, version="v1"), server
    )
    dra_health_v1beta1_pb2_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
        _V1Beta1Servicer(streams, encode=_as_v1beta1, version="v1beta1"), server
    )
    dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
        _V1Alpha1Servicer(
            streams, encode=_as_v1alpha1, version="v1alpha1"), server
    )
