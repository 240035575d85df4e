"""A stand-in container runtime for the CDI check: the CRI's `Version` and `Status` on a socket.

Why: the embedded cluster, the demo and tests need a runtime that answers like containerd
(CDI on, off, other spec dirs) or CRI-O, without one installed. It serves only the two calls
`adapters.grpc.cri` makes, on a real unix socket, so the client is tested over the wire.
What it answers can change while it runs (`answer_like`).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from adapters.grpc import cri
from adapters.grpc.generated import cri_runtime_v1_pb2 as cri_pb2


def containerd_info(*, enable_cdi: bool | None, spec_dirs: Sequence[str] | None = None,
                    ) -> dict[str, str]:
    """A verbose Status info map as containerd's CRI plugin writes it: its config as JSON under
    "config" (`enable_cdi=None`: a containerd before 1.7, whose config has no enableCDI)."""
    config: dict[str, Any] = {"containerd": {"snapshotter": "overlayfs"}}
    if enable_cdi is not None:
        config["enableCDI"] = enable_cdi
        config["cdiSpecDirs"] = list(spec_dirs) if spec_dirs is not None else [
            "/etc/cdi", "/var/run/cdi"]
    return {"config": json.dumps(config), "golang": json.dumps("go1.23.4")}


class FakeRuntime:
    """Serves `runtime.v1.RuntimeService/{Version,Status}` on `socket_path` until `stop()`."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._lock = threading.Lock()
        self._name = "containerd"
        self._version = "v2.1.4"
        self._info: dict[str, str] = containerd_info(enable_cdi=True)
        self._server: Any = None

    def answer_like(self, *, name: str, version: str, info: Mapping[str, str]) -> None:
        """Answer from now on as runtime `name` `version` with verbose status `info`."""
        with self._lock:
            self._name, self._version, self._info = name, version, dict(info)

    def start(self) -> FakeRuntime:
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2,
                                                                   thread_name_prefix="fake-cri"))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(cri.SERVICE, {
            "Version": grpc.unary_unary_rpc_method_handler(
                self._version_call,
                request_deserializer=cri_pb2.VersionRequest.FromString,
                response_serializer=cri_pb2.VersionResponse.SerializeToString),
            "Status": grpc.unary_unary_rpc_method_handler(
                self._status_call,
                request_deserializer=cri_pb2.StatusRequest.FromString,
                response_serializer=cri_pb2.StatusResponse.SerializeToString),
        }),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait(5)

    def _version_call(self, request: cri_pb2.VersionRequest, context: Any) -> Any:
        with self._lock:
            return cri_pb2.VersionResponse(
                version=cri.KUBELET_API_VERSION, runtime_name=self._name,
                runtime_version=self._version, runtime_api_version="v1")

    def _status_call(self, request: cri_pb2.StatusRequest, context: Any) -> Any:
        with self._lock:
            # As the real runtimes: the extra info only when asked for it.
            info = self._info if request.verbose else {}
            return cri_pb2.StatusResponse(info=info)
