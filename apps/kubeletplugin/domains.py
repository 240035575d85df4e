"""The plugin's view of ComputeDomains: an informer cache with a read-through on a miss.

Every prepare needs the claim's ComputeDomain. Listing all CDs per prepare costs O(#CDs) API
traffic on every node; the cache makes it O(1). A CD created a moment ago may not have reached
the cache yet, so a miss falls back to one fresh list before the planner can call it missing.
"""

from __future__ import annotations

import collections.abc
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from adapters.kube import retrying
from core import decoding, errors, kinds, models, names, ports

log = logging.getLogger(__name__)


def _decoded(obj: Mapping[str, Any]) -> models.ComputeDomain | None:
    try:
        return decoding.compute_domain_from_k8s(obj)
    except errors.DecodeError as exc:
        meta = obj.get("metadata") or {}
        log.warning("event=compute_domain_undecodable name=%s error=%r", meta.get("name"),
                    exc.message)
        return None


def list_domains(cluster: ports.Cluster) -> dict[names.ComputeDomainUID, models.ComputeDomain]:
    """Every decodable ComputeDomain, by UID (one list call)."""
    found = (_decoded(obj) for obj in cluster.list(kinds.COMPUTE_DOMAIN.kind).items)
    return {cd.uid: cd for cd in found if cd is not None}


class DomainCache:
    """ComputeDomains by UID, kept current by a list+watch thread (`start`)."""

    def __init__(self, cluster: ports.Cluster) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self._domains: dict[names.ComputeDomainUID, models.ComputeDomain] = {}
        self._synced = threading.Event()
        # Called (from the watch thread, outside the lock) after each change it delivers.
        self.listeners: list[collections.abc.Callable[[], None]] = []

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self._follow, args=(stop,), name="informer-ComputeDomain", daemon=True
        )
        thread.start()
        return thread

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def _follow(self, stop: threading.Event) -> None:
        kind = kinds.COMPUTE_DOMAIN.kind
        for event in retrying.list_then_watch(self._cluster, kind, stop=stop, timeout_s=60):
            with self._lock:
                if isinstance(event, retrying.Relist):
                    self._domains = {}
                    self._synced.set()
                    continue
                cd = _decoded(event.obj)
                if cd is None:
                    continue
                if event.type is ports.WatchEventType.DELETED:
                    self._domains.pop(cd.uid, None)
                else:
                    self._domains[cd.uid] = cd
            for listener in self.listeners:
                listener()

    def snapshot(self) -> dict[names.ComputeDomainUID, models.ComputeDomain]:
        """What the watch has delivered so far (no read-through)."""
        with self._lock:
            return dict(self._domains)

    def view(self) -> ReadThroughDomains:
        """A Mapping for one prepare: cached entries, and one fresh list on the first miss."""
        return ReadThroughDomains(self.snapshot(), refresh=lambda: list_domains(self._cluster))


class ReadThroughDomains(collections.abc.Mapping[names.ComputeDomainUID, models.ComputeDomain]):
    """Snapshot of the cache that re-lists once when asked for a UID it does not hold."""

    def __init__(
        self,
        snapshot: dict[names.ComputeDomainUID, models.ComputeDomain],
        *,
        refresh: collections.abc.Callable[[], dict[names.ComputeDomainUID, models.ComputeDomain]],
    ) -> None:
        self._domains = snapshot
        self._refresh = refresh
        self._refreshed = False

    def __getitem__(self, uid: names.ComputeDomainUID) -> models.ComputeDomain:
        if uid not in self._domains and not self._refreshed:
            self._domains = self._refresh()
            self._refreshed = True
        return self._domains[uid]

    def __iter__(self) -> Iterator[names.ComputeDomainUID]:
        return iter(self._domains)

    def __len__(self) -> int:
        return len(self._domains)
