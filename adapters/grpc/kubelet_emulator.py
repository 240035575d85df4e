"""A stand-in for the kubelet's plugin manager, speaking the real gRPC protocol.

The embedded cluster, the demo and the bench have no kubelet, yet the plugin must be exercised
through exactly the path a kubelet takes: find `<driver>-reg.sock` in the registry directory, ask
`GetInfo`, check the plugin type, pick an API version the plugin advertises, confirm with
`NotifyRegistrationStatus`, then call `NodePrepareResources`/`NodeUnprepareResources` on the
advertised endpoint with the kubelet's 45 s deadline.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import pathlib
import select
import threading
import time
from collections.abc import Iterable

from adapters.grpc import _codec, client, server
from core import models, names

log = logging.getLogger(__name__)

# Versions this emulator speaks, in order of preference (as the kubelet: newest first).
SPOKEN_VERSIONS = (_codec.VERSION_V1, _codec.VERSION_V1BETA1)
_POLL_S = 0.05
# A socket that exists but did not answer (bound, not serving yet) is tried again this soon.
_RETRY_S = 0.002


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegisteredPlugin:
    driver: str
    registration_socket: str
    endpoint: str
    version: client.DRAVersion
    # Identity of the socket file registered; a new file at that path is a restarted plugin.
    socket_identity: tuple[int, int, int] = (0, 0, 0)


def _identity(path: str) -> tuple[int, int, int]:
    """Device, inode and change time: tells a new socket file from an old one at one path."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _dra_version(advertised: str) -> client.DRAVersion:
    return "v1beta1" if advertised.split(".", 1)[0] == "v1beta1" else "v1"


class KubeletEmulator:
    """Registers DRA plugins found in `registry_dir` and calls them like a kubelet. Thread-safe."""

    def __init__(
        self, *, registry_dir: str, timeout_s: float = names.KUBELET_CALL_TIMEOUT_S
    ) -> None:
        self._registry_dir = registry_dir
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._plugins: dict[str, RegisteredPlugin] = {}
        self._refused: dict[str, str] = {}
        self._refused_sockets: set[str] = set()
        self._clients: dict[str, tuple[RegisteredPlugin, client.DRAClient]] = {}

    @property
    def plugins(self) -> dict[str, RegisteredPlugin]:
        """Registered plugins by driver name (a copy)."""
        with self._lock:
            return dict(self._plugins)

    def discover(self) -> tuple[str, ...]:
        """Register every not-yet-registered plugin socket; return the drivers registered now.

        A socket whose plugin does not answer is skipped (retried on the next call); a plugin
        of the wrong type or with no version we speak is told so and not registered. A socket
        file replaced since its registration (the plugin restarted) is registered again, as the
        kubelet's plugin watcher does on the new file.
        """
        directory = pathlib.Path(self._registry_dir)
        if not directory.is_dir():
            return ()
        known = {(p.registration_socket, p.socket_identity) for p in self.plugins.values()}
        added: list[str] = []
        for path in sorted(directory.glob(f"*{server.REGISTRATION_SOCKET_SUFFIX}")):
            if (str(path), _identity(str(path))) in known:
                continue
            plugin = self._register(str(path))
            if plugin is not None:
                added.append(plugin.driver)
        return tuple(added)

    def wait_for_plugin(self, driver: str, timeout_s: float) -> RegisteredPlugin:
        """Register `driver` as soon as its socket appears; TimeoutError after `timeout_s`.

        Like the kubelet's plugin watcher, woken by the registry directory's inotify events
        (a socket created or moved in), not by a poll; where inotify is unavailable, or a
        socket exists but does not answer yet (bound, not yet serving), it looks again soon.
        """
        deadline = time.monotonic() + timeout_s
        os.makedirs(self._registry_dir, exist_ok=True)
        with _DirectoryWatch(self._registry_dir) as watch:
            while True:
                plugin = self.plugins.get(driver)
                if plugin is not None:
                    return plugin
                self.discover()
                plugin = self.plugins.get(driver)
                if plugin is not None:
                    return plugin
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    refused = self._refused.get(driver)
                    why = f": {refused}" if refused else ""
                    raise TimeoutError(
                        f"no DRA plugin {driver!r} registered in {self._registry_dir} within "
                        f"{timeout_s:g}s{why}; is the kubelet plugin running with that registry "
                        "dir?"
                    )
                known = {p.registration_socket for p in self.plugins.values()}
                pending = any(
                    str(path) not in known and path.name not in self._refused_sockets
                    for path in pathlib.Path(self._registry_dir).glob(
                        f"*{server.REGISTRATION_SOCKET_SUFFIX}"
                    )
                )
                watch.wait(min(remaining, _RETRY_S if pending or not watch.active else _POLL_S))

    def prepare(
        self, driver: str, refs: Iterable[models.ClaimRef]
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        """NodePrepareResources on the driver's endpoint; raises `client.PluginCallError`."""
        return self._dra_client(driver).prepare(tuple(refs))

    def unprepare(
        self, driver: str, refs: Iterable[models.ClaimRef]
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        """NodeUnprepareResources on the driver's endpoint; raises `client.PluginCallError`."""
        return self._dra_client(driver).unprepare(tuple(refs))

    def liveness_check(self, driver: str) -> bool:
        """GetInfo on the registration socket, as the kubelet does periodically."""
        plugin = self._plugin(driver)
        try:
            with client.RegistrationClient(
                plugin.registration_socket, timeout_s=self._timeout_s
            ) as reg:
                info = reg.get_info()
        except client.PluginCallError as exc:
            log.warning("plugin liveness check failed driver=%s error=%s", driver, exc)
            return False
        return info.name == driver and info.type == _codec.PLUGIN_TYPE_DRA

    def close(self) -> None:
        """Close the connections kept to registered plugins."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for _plugin, dra in clients:
            dra.close()

    def forget(self, driver: str) -> None:
        """Drop a registration (as the kubelet does when the socket disappears)."""
        with self._lock:
            self._plugins.pop(driver, None)
            cached = self._clients.pop(driver, None)
        if cached is not None:
            cached[1].close()

    def _plugin(self, driver: str) -> RegisteredPlugin:
        plugin = self.plugins.get(driver)
        if plugin is None:
            raise client.PluginCallError(
                f"DRA driver {driver!r} is not registered with this kubelet; "
                "start its kubelet plugin and wait for registration"
            )
        return plugin

    def _dra_client(self, driver: str) -> client.DRAClient:
        # Like the kubelet, keep one connection per registered plugin instead of dialling the
        # socket for every call (dialling would dominate the latency we measure).
        plugin = self._plugin(driver)
        with self._lock:
            cached = self._clients.get(driver)
            if cached is not None and cached[0] == plugin:
                return cached[1]
            dra = client.DRAClient(
                plugin.endpoint, version=plugin.version, timeout_s=self._timeout_s
            )
            if cached is not None:
                cached[1].close()
            self._clients[driver] = (plugin, dra)
            return dra

    def _register(self, socket_path: str) -> RegisteredPlugin | None:
        identity = _identity(socket_path)
        try:
            with client.RegistrationClient(socket_path, timeout_s=self._timeout_s) as reg:
                info = reg.get_info()
                refusal = self._refusal(info)
                if refusal:
                    log.warning("refusing plugin socket=%s reason=%s", socket_path, refusal)
                    with self._lock:
                        self._refused[info.name] = refusal
                        self._refused_sockets.add(os.path.basename(socket_path))
                    reg.notify(False, refusal)
                    return None
                version = _codec.choose_version(info.supported_versions, spoken=SPOKEN_VERSIONS)
                assert version is not None  # checked by _refusal
                plugin = RegisteredPlugin(
                    driver=info.name,
                    registration_socket=socket_path,
                    endpoint=info.endpoint,
                    version=_dra_version(version),
                    socket_identity=identity,
                )
                with self._lock:
                    self._plugins[info.name] = plugin
                    self._refused.pop(info.name, None)
                reg.notify(True)
        except client.PluginCallError as exc:
            log.debug("plugin socket not answering yet socket=%s error=%s", socket_path, exc)
            return None
        log.info(
            "registered DRA plugin driver=%s endpoint=%s version=%s",
            plugin.driver,
            plugin.endpoint,
            plugin.version,
        )
        return plugin

    @staticmethod
    def _refusal(info: client.PluginInfo) -> str:
        if info.type != _codec.PLUGIN_TYPE_DRA:
            return f"plugin type {info.type!r} is not {_codec.PLUGIN_TYPE_DRA!r}"
        if not info.name or not info.endpoint:
            return "GetInfo returned an empty name or endpoint"
        if _codec.choose_version(info.supported_versions, spoken=SPOKEN_VERSIONS) is None:
            return (
                f"none of the supported versions {list(info.supported_versions)} is one this "
                f"kubelet speaks ({list(SPOKEN_VERSIONS)})"
            )
        return ""


class _DirectoryWatch:
    """inotify on one directory (Linux, via libc): `wait` returns at the next entry created.

    Inactive (every `wait` just sleeps its timeout) where inotify cannot be set up.
    """

    _EVENTS = 0x100 | 0x80  # IN_CREATE | IN_MOVED_TO

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._fd = -1

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def __enter__(self) -> _DirectoryWatch:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0 and libc.inotify_add_watch(
                fd, os.fsencode(self._directory), self._EVENTS
            ) < 0:
                os.close(fd)
                fd = -1
        except (OSError, AttributeError):
            fd = -1
        self._fd = fd
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def wait(self, timeout_s: float) -> None:
        if self._fd < 0:
            time.sleep(timeout_s)
            return
        ready, _, _ = select.select([self._fd], [], [], timeout_s)
        if ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 65536)  # drain; which entry changed is read by discover()
