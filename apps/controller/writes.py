"""The cluster as the controller's executor sees it: every write's answer is reported back.

`WriteReporting` delegates to the real cluster port and tells the controller's caches what each
create and patch answered (so the next sync plans from it, not from a cache a moment behind),
and turns a create that finds its object already there into a ConflictError: the cache did not
know the object, so the plan was made on a wrong observation; the key is retried, and the
object read first.

Every write first asks `may_write` (the controller: "this term still leads"): once the term is
over, a worker in the middle of a key sends nothing more (a ConflictError: the observation it
planned from belongs to a term that ended).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from core import errors, models, ports

log = logging.getLogger(__name__)


class WriteReporting:
    """A `ports.Cluster` around `inner` that reports writes (see the module docstring)."""

    def __init__(
        self,
        inner: ports.Cluster,
        *,
        on_written: Callable[[str, Mapping[str, Any]], None],
        on_exists: Callable[[str, str, str], None],
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self._inner = inner
        self._on_written = on_written
        self._on_exists = on_exists
        self._may_write = may_write

    def _fence(self, what: str) -> None:
        if not self._may_write():
            raise errors.ConflictError(
                f"not writing ({what}): this controller's leadership term is over"
            )

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        return self._inner.get(kind, namespace=namespace, name=name)

    def list(self, kind: str, *, namespace: str = "",
             label_selector: ports.LabelSelector | None = None) -> ports.ListResult:
        return self._inner.list(kind, namespace=namespace, label_selector=label_selector)

    def watch(self, kind: str, *, namespace: str = "", resource_version: str,
              timeout_s: float, label_selector: ports.LabelSelector | None = None,
              ) -> Iterator[ports.WatchEvent]:
        return self._inner.watch(kind, namespace=namespace, resource_version=resource_version,
                                 timeout_s=timeout_s, label_selector=label_selector)

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self._fence(f"create {kind}")
        try:
            created = self._inner.create(kind, obj)
        except errors.AlreadyExistsError as exc:
            meta = obj.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            self._on_exists(kind, namespace, name)
            raise errors.ConflictError(
                f"{kind} {namespace}/{name} exists but the cache has not seen it; "
                f"reading it before planning again ({exc.message})"
            ) from exc
        self._on_written(kind, created)
        return created

    def patch(self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
              subresource: str = "", resource_version: str = "") -> Mapping[str, Any]:
        self._fence(f"patch {kind} {namespace}/{name}")
        patched = self._inner.patch(kind, namespace=namespace, name=name, patch=patch,
                                    subresource=subresource, resource_version=resource_version)
        self._on_written(kind, patched)
        return patched

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self._fence(f"delete {kind} {namespace}/{name}")
        self._inner.delete(kind, namespace=namespace, name=name)

    def emit_event(self, *, involved: models.ObjectRef, reason: str, message: str,
                   warning: bool = True) -> None:
        self._fence(f"event {reason}")
        self._inner.emit_event(involved=involved, reason=reason, message=message,
                               warning=warning)
