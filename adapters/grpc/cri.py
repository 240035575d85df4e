"""A CRI client of the node's container runtime: `Version` and `Status(verbose=true)`, no more.

Why: whether the runtime applies our CDI specs is in its answers (`core.runtime_cdi` judges
them). The runtime listens on a unix socket on the host, mounted into the plugin's container
at the same path. Without a configured endpoint the usual sockets are tried in order.

The CRI's method paths are `/runtime.v1.RuntimeService/<Method>`; our messages live in
another proto package (see `proto/.../cri_runtime_v1.proto`), so the calls are made by path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import grpc

from adapters.grpc.generated import cri_runtime_v1_pb2 as cri_pb2
from core import runtime_cdi

# Tried in order when no endpoint is configured: containerd's, then CRI-O's.
DEFAULT_ENDPOINTS = ("unix:///run/containerd/containerd.sock", "unix:///var/run/crio/crio.sock")
SERVICE = "runtime.v1.RuntimeService"
VERSION_METHOD = f"/{SERVICE}/Version"
STATUS_METHOD = f"/{SERVICE}/Status"
# The kubelet's CRI API version, sent in VersionRequest as the kubelet does.
KUBELET_API_VERSION = "0.1.0"
CALL_TIMEOUT_S = 5.0


def socket_path(endpoint: str) -> str:
    """The socket path of `unix:///path` or a bare `/path`."""
    return endpoint.removeprefix("unix://")


def endpoints_to_try(configured: str) -> tuple[str, ...]:
    """The configured endpoint alone, else the usual ones (as `unix://` targets)."""
    if configured.strip():
        return (f"unix://{socket_path(configured.strip())}",)
    return DEFAULT_ENDPOINTS


def answer_from(
    *, version: cri_pb2.VersionResponse, status: cri_pb2.StatusResponse
) -> runtime_cdi.RuntimeAnswer:
    """The runtime's answers as core values (pure)."""
    info: Mapping[str, str] = dict(status.info)
    return runtime_cdi.RuntimeAnswer.of(
        name=version.runtime_name, version=version.runtime_version, info=info
    )


class CriRuntime:
    """`ports.ContainerRuntime` over the runtime's CRI socket."""

    def __init__(self, endpoint: str = "", *, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._endpoints = endpoints_to_try(endpoint)
        self._timeout_s = timeout_s

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Where the runtime is looked for, in order."""
        return self._endpoints

    def ask(self) -> runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable:
        """Ask the first endpoint whose socket exists; Unreachable when none answers."""
        present = [e for e in self._endpoints if os.path.exists(socket_path(e))]
        if not present:
            return runtime_cdi.Unreachable(
                endpoint=",".join(self._endpoints),
                reason=f"no CRI socket at {' or '.join(socket_path(e) for e in self._endpoints)}",
            )
        return self._ask(present[0])

    def _ask(self, endpoint: str) -> runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable:
        channel: Any = grpc.insecure_channel(endpoint)
        try:
            version = channel.unary_unary(
                VERSION_METHOD,
                request_serializer=cri_pb2.VersionRequest.SerializeToString,
                response_deserializer=cri_pb2.VersionResponse.FromString,
            )(cri_pb2.VersionRequest(version=KUBELET_API_VERSION), timeout=self._timeout_s)
            status = channel.unary_unary(
                STATUS_METHOD,
                request_serializer=cri_pb2.StatusRequest.SerializeToString,
                response_deserializer=cri_pb2.StatusResponse.FromString,
            )(cri_pb2.StatusRequest(verbose=True), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            name = code.name if code is not None else "UNKNOWN"
            return runtime_cdi.Unreachable(endpoint=endpoint, reason=f"{name}: {details}")
        finally:
            channel.close()
        return answer_from(version=version, status=status)
