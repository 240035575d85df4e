"""The embedded cluster with a script for its watches, for the kube adapter's unit tests.

Storage, resourceVersions, preconditions, merge patches and deletion are
`adapters.memory.InMemoryCluster`'s (the semantics the port contract suite pins); this
subclass only adds what those tests need to pin informer and retry behaviour exactly: watch
sessions played from a script (events, or an exception, per session), list failures to inject,
a log of calls, and the events emitted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from adapters.memory import cluster as memory_cluster
from core import kinds, models, ports


class FakeCluster(memory_cluster.InMemoryCluster):
    def __init__(self, *, server_version: str = memory_cluster.DEFAULT_SERVER_VERSION,
                 device_taints: bool = True) -> None:
        super().__init__(server_version=server_version, device_taints=device_taints)
        self.events: list[dict[str, Any]] = []
        self.calls: list[str] = []
        # (call, label selector) of every list and watch given one.
        self.selectors: list[tuple[str, dict[str, str | None]]] = []
        # One entry per watch call: a list of WatchEvents, or an exception to raise.
        self.watch_script: list[list[ports.WatchEvent] | Exception] = []
        self.list_errors: list[Exception] = []

    @property
    def rv(self) -> int:
        return int(self.resource_version)

    @property
    def conflicts_to_inject(self) -> int:
        return self._conflicts_to_inject

    @conflicts_to_inject.setter
    def conflicts_to_inject(self, count: int) -> None:
        self.set_conflict_injection(count)

    @property
    def objects(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        """Every stored object except Events, keyed (kind, namespace, name)."""
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for kind in sorted({k.kind for k in kinds.ALL} - {kinds.EVENT.kind}):
            for obj in super().list(kind).items:
                meta = obj["metadata"]
                found[(kind, str(meta.get("namespace") or ""), str(meta["name"]))] = dict(obj)
        return found

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        self.calls.append(f"get {kind} {name}")
        return super().get(kind, namespace=namespace, name=name)

    def list(
        self, kind: str, *, namespace: str = "", label_selector: ports.LabelSelector | None = None
    ) -> ports.ListResult:
        self.calls.append(f"list {kind}")
        if label_selector:
            self.selectors.append(("list", dict(label_selector)))
        if self.list_errors:
            raise self.list_errors.pop(0)
        return super().list(kind, namespace=namespace, label_selector=label_selector)

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: ports.LabelSelector | None = None,
    ) -> Iterator[ports.WatchEvent]:
        self.calls.append(f"watch {kind} from={resource_version}")
        if label_selector:
            self.selectors.append(("watch", dict(label_selector)))
        if not self.watch_script:
            raise AssertionError("watch script exhausted")
        step = self.watch_script.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(f"create {kind}")
        return super().create(kind, obj)

    def patch(
        self,
        kind: str,
        *,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str = "",
        resource_version: str = "",
    ) -> Mapping[str, Any]:
        self.calls.append(f"patch {kind} {name}")
        return super().patch(kind, namespace=namespace, name=name, patch=patch,
                             subresource=subresource, resource_version=resource_version)

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self.calls.append(f"delete {kind} {name}")
        super().delete(kind, namespace=namespace, name=name)

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        self.events.append(
            {"involved": involved, "reason": reason, "message": message, "warning": warning}
        )


def added(name: str, rv: str) -> ports.WatchEvent:
    return ports.WatchEvent(
        type=ports.WatchEventType.ADDED,
        obj={"metadata": {"name": name, "resourceVersion": rv}},
    )
