"""A `core.ports.Cluster` whose client is built beside the plugin's start, not before it.

Importing and configuring the official `kubernetes` client takes about a quarter of a
second; the kubelet needs the plugin's sockets first. The client is built in a thread
while the plugin recovers its checkpoint, serves and registers; a call that arrives
before it is ready (a prepare, the ResourceSlice publish) waits for it rather than fail.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from core import errors, models, ports

log = logging.getLogger(__name__)


class DeferredCluster:
    """Builds the real cluster port in a thread (`start`); every call waits until it exists."""

    def __init__(self, build: Callable[[], ports.Cluster], *, wait_s: float = 60.0) -> None:
        self._build = build
        self._wait_s = wait_s
        self._ready = threading.Event()
        self._cluster: ports.Cluster | None = None
        self._error: errors.DriverError | None = None

    def start(self) -> DeferredCluster:
        threading.Thread(target=self._run, name="kube-client", daemon=True).start()
        return self

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._cluster = self._build()
        except errors.DriverError as exc:
            self._error = exc
        except Exception as exc:  # reported to every caller, and by `wait` to the main thread
            self._error = errors.ClusterError(f"the Kubernetes API client failed to start: {exc}")
        finally:
            self._ready.set()
        log.debug("event=api_client_ready seconds=%.3f", time.perf_counter() - started)

    def wait(self, timeout_s: float | None = None) -> errors.DriverError | None:
        """Block until the client is built; returns the error that stopped it, if any."""
        if not self._ready.wait(self._wait_s if timeout_s is None else timeout_s):
            return errors.ClusterError(
                f"the Kubernetes API client was not ready within {self._wait_s:g}s"
            )
        return self._error

    def _client(self) -> ports.Cluster:
        problem = self.wait()
        if problem is not None:
            raise errors.ClusterError(problem.message)
        assert self._cluster is not None
        return self._cluster

    def server_version(self) -> str:
        """`ports.ServerVersion` of the built client; ClusterError where it cannot tell."""
        client = self._client()
        if not isinstance(client, ports.ServerVersion):
            raise errors.ClusterError(
                f"the API client {type(client).__name__} cannot tell the server's version"
            )
        return client.server_version()

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        return self._client().get(kind, namespace=namespace, name=name)

    def list(
        self, kind: str, *, namespace: str = "", label_selector: ports.LabelSelector | None = None
    ) -> ports.ListResult:
        return self._client().list(kind, namespace=namespace, label_selector=label_selector)

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: ports.LabelSelector | None = None,
    ) -> Iterator[ports.WatchEvent]:
        return self._client().watch(
            kind, namespace=namespace, resource_version=resource_version, timeout_s=timeout_s,
            label_selector=label_selector,
        )

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._client().create(kind, obj)

    def patch(
        self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
        subresource: str = "", resource_version: str = "",
    ) -> Mapping[str, Any]:
        return self._client().patch(
            kind, namespace=namespace, name=name, patch=patch, subresource=subresource,
            resource_version=resource_version,
        )

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self._client().delete(kind, namespace=namespace, name=name)

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        self._client().emit_event(
            involved=involved, reason=reason, message=message, warning=warning
        )
