"""A tiny scriptable `core.ports.Cluster` for the kube adapter's unit tests.

Stores objects with a global resourceVersion, enforces resourceVersion preconditions and
name uniqueness like the API server, and plays watch sessions from a script (events or an
exception per session) so informer behaviour can be pinned exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from core import errors, models, ports


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeCluster:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 100
        self.events: list[dict[str, Any]] = []
        self.calls: list[str] = []
        # One entry per watch call: a list of WatchEvents, or an exception to raise.
        self.watch_script: list[list[ports.WatchEvent] | Exception] = []
        self.list_errors: list[Exception] = []
        self.conflicts_to_inject = 0

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        self.calls.append(f"get {kind} {name}")
        try:
            return copy.deepcopy(self.objects[(kind, namespace, name)])
        except KeyError:
            raise errors.NotFoundError(f"{kind} {namespace}/{name} not found") from None

    def list(
        self, kind: str, *, namespace: str = "", label_selector: Mapping[str, str] | None = None
    ) -> ports.ListResult:
        self.calls.append(f"list {kind}")
        if self.list_errors:
            raise self.list_errors.pop(0)
        items = tuple(
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind and (not namespace or ns == namespace)
        )
        return ports.ListResult(items=items, resource_version=str(self.rv))

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float
    ) -> Iterator[ports.WatchEvent]:
        self.calls.append(f"watch {kind} from={resource_version}")
        if not self.watch_script:
            raise AssertionError("watch script exhausted")
        step = self.watch_script.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(f"create {kind}")
        meta = obj.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta["name"]))
        if key in self.objects:
            raise errors.AlreadyExistsError(f"{kind} {key[2]} already exists")
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        self.objects[key] = stored
        return copy.deepcopy(stored)

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
        key = (kind, namespace, name)
        if key not in self.objects:
            raise errors.NotFoundError(f"{kind} {namespace}/{name} not found")
        if self.conflicts_to_inject:
            self.conflicts_to_inject -= 1
            raise errors.ConflictError(f"{kind} {name}: injected conflict")
        current = self.objects[key]
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise errors.ConflictError(f"{kind} {name}: stale resourceVersion {resource_version}")
        updated = _merge(copy.deepcopy(current), patch)
        updated["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[key] = updated
        return copy.deepcopy(updated)

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self.calls.append(f"delete {kind} {name}")
        if self.objects.pop((kind, namespace, name), None) is None:
            raise errors.NotFoundError(f"{kind} {namespace}/{name} not found")

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
