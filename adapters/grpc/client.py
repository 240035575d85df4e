"""gRPC clients of a kubelet plugin: what the kubelet itself calls, built from our protos.

Used by the kubelet emulator (embedded cluster, demo, bench) and by tests that must speak to the
plugin exactly as a kubelet would: same method paths, same messages, same 45 s deadline.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Literal, Self

import grpc

from adapters.grpc import _codec
from adapters.grpc.generated import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from core import errors, models, names

DRAVersion = Literal["v1", "v1beta1"]


class PluginCallError(errors.RetryableError):
    """A gRPC call to the plugin failed as a whole (socket gone, deadline, server error)."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginInfo:
    """What a plugin's registration socket says about it (`GetInfo`)."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


def unix_target(socket_path: str) -> str:
    return f"unix://{socket_path}"


def _call_error(exc: grpc.RpcError, *, what: str, target: str) -> PluginCallError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    code_name = code.name if code is not None else "UNKNOWN"
    return PluginCallError(
        f"{what} on {target} failed: {code_name}: {details}; check that the kubelet plugin is "
        "running and that its socket path matches the kubelet's plugin directory",
        code=code_name,
    )


class _Channel:
    """One insecure channel to a unix socket; closes on `close()` / context exit."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._channel: Any = grpc.insecure_channel(unix_target(socket_path))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class DRAClient(_Channel):
    """Calls `DRAPlugin` on a plugin's DRA socket in the chosen API version."""

    def __init__(
        self,
        socket_path: str,
        *,
        version: DRAVersion = "v1",
        timeout_s: float = names.KUBELET_CALL_TIMEOUT_S,
    ) -> None:
        super().__init__(socket_path)
        self.version = version
        self._timeout_s = timeout_s
        if version == "v1":
            self._stub: Any = dra_v1_pb2_grpc.DRAPluginStub(self._channel)  # type: ignore[no-untyped-call]
        else:
            self._stub = dra_v1beta1_pb2_grpc.DRAPluginStub(self._channel)  # type: ignore[no-untyped-call]

    def prepare(
        self, refs: Iterable[models.ClaimRef]
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        """NodePrepareResources; per-claim errors come back in the results, not as exceptions.

        Raises `PluginCallError` when the call as a whole fails.
        """
        request = _codec.prepare_request_to_pb(refs)
        try:
            if self.version == "v1":
                response = self._stub.NodePrepareResources(request, timeout=self._timeout_s)
            else:
                beta = _codec.convert(request, dra_v1beta1_pb2.NodePrepareResourcesRequest)
                response = _codec.convert(
                    self._stub.NodePrepareResources(beta, timeout=self._timeout_s),
                    dra_v1_pb2.NodePrepareResourcesResponse,
                )
        except grpc.RpcError as exc:
            raise _call_error(exc, what="NodePrepareResources", target=self.socket_path) from exc
        return _codec.prepare_response_from_pb(response)

    def unprepare(
        self, refs: Iterable[models.ClaimRef]
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        """NodeUnprepareResources; same error rules as `prepare`."""
        request = _codec.unprepare_request_to_pb(refs)
        try:
            if self.version == "v1":
                response = self._stub.NodeUnprepareResources(request, timeout=self._timeout_s)
            else:
                beta = _codec.convert(request, dra_v1beta1_pb2.NodeUnprepareResourcesRequest)
                response = _codec.convert(
                    self._stub.NodeUnprepareResources(beta, timeout=self._timeout_s),
                    dra_v1_pb2.NodeUnprepareResourcesResponse,
                )
        except grpc.RpcError as exc:
            raise _call_error(exc, what="NodeUnprepareResources", target=self.socket_path) from exc
        return _codec.unprepare_response_from_pb(response)


class RegistrationClient(_Channel):
    """Calls `pluginregistration.Registration` on a plugin's registration socket."""

    def __init__(self, socket_path: str, *, timeout_s: float = names.KUBELET_CALL_TIMEOUT_S):
        super().__init__(socket_path)
        self._timeout_s = timeout_s
        self._stub: Any = pluginregistration_v1_pb2_grpc.RegistrationStub(self._channel)  # type: ignore[no-untyped-call]

    def get_info(self) -> PluginInfo:
        """GetInfo; raises `PluginCallError` when the plugin does not answer."""
        try:
            info = self._stub.GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            raise _call_error(exc, what="GetInfo", target=self.socket_path) from exc
        return PluginInfo(
            type=info.type,
            name=info.name,
            endpoint=info.endpoint,
            supported_versions=tuple(info.supported_versions),
        )

    def notify(self, registered: bool, error: str = "") -> None:
        """NotifyRegistrationStatus: tell the plugin whether the kubelet accepted it."""
        status = pluginregistration_v1_pb2.RegistrationStatus(
            plugin_registered=registered, error=error
        )
        try:
            self._stub.NotifyRegistrationStatus(status, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            what = "NotifyRegistrationStatus"
            raise _call_error(exc, what=what, target=self.socket_path) from exc


def try_register(socket_path: str, *, timeout_s: float = 2.0) -> PluginInfo | None:
    """GetInfo then NotifyRegistrationStatus(true), as the kubelet's plugin watcher does.

    None while nothing answers on `socket_path` yet (absent socket, or a call that fails).
    """
    if not os.path.exists(socket_path):
        return None
    try:
        with RegistrationClient(socket_path, timeout_s=timeout_s) as reg:
            info = reg.get_info()
            reg.notify(True)
    except PluginCallError:
        return None
    return info
