"""The kubelet-facing gRPC servers of the plugin: DRA, registration and health probes.

Three servers, because the kubelet reaches them at three places:
- `<plugin_dir>/dra.sock` (`dra-<pod UID>.sock` per pod, `core.plugin_sockets`): `DRAPlugin`
  in packages `k8s.io.kubelet.pkg.apis.dra.v1` and `...v1beta1` (same servicer behind both),
  and, when given a device-health source, the kubelet's health stream `DRAResourceHealth` in
  v1, v1beta1 and v1alpha1 (`adapters.grpc.health_stream`); streams run on the server's event
  loop and prepares on a pool of their own (`adapters.grpc.loop_server`), so no number of
  streams delays a prepare;
- `<registry_dir>/<driver>-reg.sock` (`<driver>-<pod UID>-reg.sock` per pod):
  `pluginregistration.Registration`, which the kubelet's plugin watcher finds, asks `GetInfo` and
  answers with `NotifyRegistrationStatus`;
- TCP `<health_host>:<health_port>`: `grpc.health.v1.Health` for liveness/readiness probes.

The servicers decide nothing: they translate with `_codec`, call the `KubeletPluginService` port
and turn anything unexpected into per-claim errors, so that one bad claim, or a bug, never fails
the kubelet's whole batch or takes the server down.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import pathlib
import socket
import stat
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from adapters.grpc import _codec, health_stream, loop_server
from adapters.grpc.generated import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from core import models, names, plugin_sockets, ports

log = logging.getLogger(__name__)

DRA_SOCKET_NAME = plugin_sockets.DRA_SOCKET
REGISTRATION_SOCKET_SUFFIX = plugin_sockets.REGISTRATION_SUFFIX

Results = Mapping[names.ClaimUID, models.ClaimResult]


def registration_socket_name(driver_name: str) -> str:
    """The fixed registration socket name (no pod UID)."""
    return plugin_sockets.registration_socket_name(driver_name)


def _is_dead(path: str) -> bool:
    """Whether no process listens on the unix socket `path` (connection refused, or gone).

    NB: anything else (a timeout under load) counts as alive: a live plugin's socket must
    never be taken for dead.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return True
        except OSError:
            return False
    return False


def remove_dead_sockets(
    *, plugin_dir: str, registry_dir: str, driver_name: str, now: float,
    min_age_s: float = 60.0,
) -> tuple[str, ...]:
    """Remove the per-pod sockets of this driver that no process serves (a plugin pod killed
    before it could remove them); returns their paths.

    A dead registration socket would have the kubelet retry it for ever. Only sockets older
    than `min_age_s` go, so a plugin pod starting right now is never touched; the digest-named
    registration sockets (`dra-<digest>-reg.sock`) cannot be told apart by driver and stay.
    """
    prefix = f"{driver_name}-"
    candidates = [
        os.path.join(plugin_dir, name) for name in _listing(plugin_dir)
        if plugin_sockets.is_dra_socket_name(name) and name != plugin_sockets.DRA_SOCKET
    ] + [
        os.path.join(registry_dir, name) for name in _listing(registry_dir)
        if name.startswith(prefix) and name.endswith(REGISTRATION_SOCKET_SUFFIX)
        and name != registration_socket_name(driver_name)
    ]
    removed = []
    for path in candidates:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISSOCK(st.st_mode) or now - st.st_mtime < min_age_s or not _is_dead(path):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return tuple(removed)


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def serving_sockets(plugin_dir: str, *, besides: str) -> tuple[str, ...]:
    """The DRA sockets in `plugin_dir` other than `besides` that accept a connection now:
    other plugin pods of the driver serving beside this one (a rolling update's successor).

    A socket left by a killed plugin refuses connections and is not counted.
    """
    return tuple(
        path for path in (os.path.join(plugin_dir, name) for name in _listing(plugin_dir))
        if plugin_sockets.is_dra_socket_name(os.path.basename(path)) and path != besides
        and not _is_dead(path)
    )


def remove_stale_socket(path: str) -> bool:
    """Remove whatever non-directory is at `path` (a socket left by a killed plugin).

    Returns whether something was removed. A directory there is a deployment error and raises.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            f"{path} is a directory, but the plugin needs to create its socket there; "
            "remove the directory or point the plugin at another path"
        )
    os.unlink(path)
    return True


class _ServiceCall(Protocol):
    def __call__(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Results: ...


def _call_service(
    service_call: _ServiceCall,
    refs: tuple[models.ClaimRef, ...],
    *,
    verb: str,
    context: Any,
) -> Results:
    """Run one service call; an exception becomes the same per-claim error for every claim.

    The gRPC context goes along as the kubelet's side of the call, so the service can stop
    working on a call the kubelet cancelled or gave up on.
    """
    if not refs:
        return {}
    try:
        return dict(service_call(refs, call=_CallView(context)))
    except Exception as exc:
        log.exception("kubelet %s failed inside the plugin claims=%d", verb, len(refs))
        return _codec.failed_results(
            refs,
            error=(
                f"{verb} failed inside the DRA plugin ({type(exc).__name__}: {exc}); "
                "the kubelet retries; if this persists, read the kubelet plugin's log"
            ),
        )


class _CallView:
    """The kubelet's side of a call, from the servicer context of either gRPC server.

    NB: `grpc.aio` runs our plain-function servicers with a context that has no
    `is_active()`; there, the call is over once its termination callback ran or its deadline
    passed.
    """

    def __init__(self, context: Any) -> None:
        self._context = context
        self._over = threading.Event()
        self._native = hasattr(context, "is_active")
        if not self._native:
            context.add_callback(self._over.set)

    def is_active(self) -> bool:
        if self._native:
            return bool(self._context.is_active())
        remaining = self.time_remaining()
        return not self._over.is_set() and (remaining is None or remaining > 0)

    def time_remaining(self) -> float | None:
        remaining = self._context.time_remaining()
        return None if remaining is None else float(remaining)


class _DRAServicer(dra_v1_pb2_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`."""

    def __init__(self, service: ports.KubeletPluginService) -> None:
        self._service = service

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        refs = _codec.claim_refs_from_pb(request.claims)
        results = _call_service(
            self._service.node_prepare, refs, verb="prepare", context=context
        )
        try:
            return _codec.prepare_response_to_pb(results)
        except Exception as exc:
            log.exception("cannot encode prepare results claims=%d", len(refs))
            error = f"the DRA plugin produced an invalid prepare result ({exc}); report a bug"
            return _codec.prepare_response_to_pb(_codec.failed_results(refs, error=error))

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        refs = _codec.claim_refs_from_pb(request.claims)
        results = _call_service(
            self._service.node_unprepare, refs, verb="unprepare", context=context
        )
        try:
            return _codec.unprepare_response_to_pb(results)
        except Exception as exc:
            log.exception("cannot encode unprepare results claims=%d", len(refs))
            error = f"the DRA plugin produced an invalid unprepare result ({exc}); report a bug"
            return _codec.unprepare_response_to_pb(_codec.failed_results(refs, error=error))


class _DRAV1Beta1Servicer(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`: the v1 servicer behind a wire conversion."""

    def __init__(self, v1: _DRAServicer) -> None:
        self._v1 = v1

    def NodePrepareResources(
        self, request: dra_v1beta1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        v1_request = _codec.convert(request, dra_v1_pb2.NodePrepareResourcesRequest)
        v1_response = self._v1.NodePrepareResources(v1_request, context)
        return _codec.convert(v1_response, dra_v1beta1_pb2.NodePrepareResourcesResponse)

    def NodeUnprepareResources(
        self,
        request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest,
        context: grpc.ServicerContext,
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        v1_request = _codec.convert(request, dra_v1_pb2.NodeUnprepareResourcesRequest)
        v1_response = self._v1.NodeUnprepareResources(v1_request, context)
        return _codec.convert(v1_response, dra_v1beta1_pb2.NodeUnprepareResourcesResponse)


class _RegistrationServicer(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    """`pluginregistration.Registration`: who we are, and the kubelet's verdict."""

    def __init__(
        self,
        *,
        info: pluginregistration_v1_pb2.PluginInfo,
        registered: threading.Event,
        on_registered: Callable[[], None] | None,
    ):
        self._info = info
        self._registered = registered
        self._on_registered = on_registered

    def GetInfo(
        self, request: pluginregistration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return self._info

    def NotifyRegistrationStatus(
        self,
        request: pluginregistration_v1_pb2.RegistrationStatus,
        context: grpc.ServicerContext,
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet driver=%s", self._info.name)
            self._registered.set()
            if self._on_registered is not None:
                self._on_registered()
        else:
            log.error(
                "the kubelet refused the registration driver=%s error=%r",
                self._info.name,
                request.error,
            )
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class PluginServer:
    """Serves a `KubeletPluginService` to the kubelet. `start()` once, `stop()` once.

    `registered` is set when the kubelet confirms the registration. With `health_port=0` an
    ephemeral port is chosen; read it back from `health_port` after `start()`.
    """

    def __init__(
        self,
        *,
        service: ports.KubeletPluginService,
        driver_name: str,
        plugin_dir: str,
        registry_dir: str,
        health_port: int | None,
        health_host: str = "0.0.0.0",
        max_workers: int = 16,
        on_registered: Callable[[], None] | None = None,
        device_health: ports.DeviceHealthSource | None = None,
        health_resend_s: float = health_stream.DEFAULT_RESEND_S,
        pod_uid: str = "",
    ) -> None:
        """With `pod_uid`, both sockets are named after the pod (`core.plugin_sockets`), so
        a new plugin pod can register and serve beside this one (a 1.33+ kubelet)."""
        self._service = service
        self._pod_uid = pod_uid
        self._driver_name = driver_name
        self._plugin_dir = plugin_dir
        self._registry_dir = registry_dir
        self._health_port_requested = health_port
        self._health_host = health_host
        self._max_workers = max_workers
        self._health_port: int | None = None
        self._stopped = threading.Event()
        self._servers: list[Any] = []
        self._health_server: Any = None
        self._health_servicer: health.HealthServicer | None = None
        self.registered = threading.Event()
        # Called on every NotifyRegistrationStatus(registered=true), re-registrations included.
        self._on_registered = on_registered
        self._dra_server: loop_server.LoopServer | None = None
        # The kubelet's device-health stream; None: not served and not advertised.
        self.health_streams = (
            None if device_health is None
            else health_stream.HealthStreams(device_health, resend_s=health_resend_s)
        )

    @property
    def dra_socket_path(self) -> str:
        name = plugin_sockets.dra_socket_name(pod_uid=self._pod_uid, plugin_dir=self._plugin_dir)
        return os.path.join(self._plugin_dir, name)

    @property
    def registration_socket_path(self) -> str:
        return os.path.join(self._registry_dir, plugin_sockets.registration_socket_name(
            self._driver_name, pod_uid=self._pod_uid, registry_dir=self._registry_dir))

    @property
    def health_port(self) -> int | None:
        """The bound TCP port of the health server (None before start or when disabled)."""
        return self._health_port

    def start(self) -> None:
        """Listen on all endpoints; health turns SERVING once both sockets accept calls.

        With a pod UID, health turns SERVING only once the kubelet confirmed the registration:
        a rolling update stops the old plugin pod as soon as the new one is ready, and the
        kubelet must be sending its calls to the new one by then.
        """
        if self._servers or self._dra_server is not None:
            raise RuntimeError("PluginServer.start() called twice")
        for directory in (self._plugin_dir, self._registry_dir):
            pathlib.Path(directory).mkdir(parents=True, exist_ok=True)

        v1 = _DRAServicer(self._service)
        streams = self.health_streams

        def setup(dra: Any) -> None:
            dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(v1, dra)  # type: ignore[no-untyped-call]
            dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAV1Beta1Servicer(v1), dra)  # type: ignore[no-untyped-call]
            if streams is not None:
                health_stream.add_to_server(streams, dra)

        if remove_stale_socket(self.dra_socket_path):
            log.info("removed stale socket path=%s", self.dra_socket_path)
        # NB: DRA before registration: the kubelet may call the DRA socket as soon as it has
        # seen the registration socket.
        dra = loop_server.LoopServer(max_workers=self._max_workers, name="kubelet-grpc")
        dra.start(setup=setup, address=f"unix://{self.dra_socket_path}")
        self._dra_server = dra
        if streams is not None and dra.loop is not None:
            streams.bind(dra.loop)

        registration = self._new_server()
        versions: tuple[str, ...] = _codec.SUPPORTED_VERSIONS
        if streams is not None:
            versions = (*versions, *_codec.HEALTH_VERSIONS)
        info = _codec.plugin_info_to_pb(
            driver_name=self._driver_name, endpoint=self.dra_socket_path,
            supported_versions=versions,
        )
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            _RegistrationServicer(
                info=info, registered=self.registered, on_registered=self._confirmed
            ),
            registration
        )
        self._listen_unix(registration, self.registration_socket_path)

        if self._health_port_requested is not None:
            self._start_health()
        registration.start()
        self._servers.append(registration)
        if self._health_servicer is not None and not self._pod_uid:
            self._health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "kubelet plugin serving driver=%s dra=%s registration=%s health_port=%s",
            self._driver_name,
            self.dra_socket_path,
            self.registration_socket_path,
            self._health_port,
        )

    def _confirmed(self) -> None:
        """The kubelet confirmed the registration (again)."""
        if self._health_servicer is not None and self._pod_uid:
            # NB: a no-op once stop() began (the servicer's graceful shutdown).
            self._health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        if self._on_registered is not None:
            self._on_registered()

    def stop(self, grace: float) -> None:
        """Report NOT_SERVING, let in-flight calls finish for up to `grace` s, remove sockets.

        The DRA server drains first, the registration goes last: the kubelet closes its
        connection to a plugin once its registration socket is gone, which would fail the
        calls still running. Refused new calls make the kubelet's connection to us end, so
        it sends them to another registered plugin pod of the driver (a rolling update's
        successor) while ours finish.
        """
        if self._health_servicer is not None:
            self._health_servicer.enter_graceful_shutdown()
        if self._dra_server is not None:
            if self.health_streams is not None:
                self.health_streams.close()
            self._dra_server.stop(grace)
        log.info("event=plugin_drained driver=%s dra=%s", self._driver_name,
                 self.dra_socket_path)
        done = [server.stop(grace) for server in self._servers]
        for event in done:
            event.wait()
        # NB: gRPC core usually unlinks its unix sockets at shutdown; we make sure of it, so a
        # kubelet never finds a registration socket of a plugin that is gone.
        for path in (self.registration_socket_path, self.dra_socket_path):
            remove_stale_socket(path)
        if self._health_server is not None:
            self._health_server.stop(grace).wait()
        self._stopped.set()
        log.info("kubelet plugin stopped driver=%s", self._driver_name)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until `stop()` completed (or `timeout` passed); return whether it did."""
        return self._stopped.wait(timeout)

    def _new_server(self) -> Any:
        return grpc.server(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix="kubelet-grpc"
            )
        )

    def _listen_unix(self, server: Any, path: str) -> None:
        if remove_stale_socket(path):
            log.info("removed stale socket path=%s", path)
        server.add_insecure_port(f"unix://{path}")

    def _start_health(self) -> None:
        servicer = health.HealthServicer()
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port(f"{self._health_host}:{self._health_port_requested}")
        server.start()
        self._health_server = server
        self._health_servicer = servicer
        self._health_port = int(port)
