"""An informer as client-go has it: list + watch one kind into a local cache, with handlers.

The cache answers reads without API calls (`get`, `by_index`, `items`); every change calls the
handlers with the object before and after (None for added / deleted), so a controller maps
events to work-queue keys. Built on `retrying.list_then_watch` (relist on 410, jittered
reconnect), so it speaks only `core.ports.Cluster` and runs on any cluster implementation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from adapters.kube import retrying
from core import ports

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
Obj = Mapping[str, Any]
Handler = Callable[[Obj | None, Obj | None], None]
Indexer = Callable[[Obj], Iterable[str]]


def object_key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """Keeps every object of one kind (in a namespace, with a label selector) in memory.

    `transform` slims objects before they are stored (e.g. Nodes: metadata only); `indexers`
    name functions from an object to index values, queried with `by_index`. Handlers run on
    the informer's thread, in event order; they must be quick (enqueue a key, nothing more).
    """

    def __init__(
        self,
        cluster: ports.Cluster,
        kind: str,
        *,
        namespace: str = "",
        label_selector: ports.LabelSelector | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        watch_timeout_s: float = 300.0,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.label_selector = dict(label_selector or {})
        self._cluster = cluster
        self._transform = transform
        self._indexers = dict(indexers or {})
        self._watch_timeout_s = watch_timeout_s
        self._lock = threading.Lock()
        self._store: dict[Key, Obj] = {}
        self._indices: dict[str, dict[str, set[Key]]] = {name: {} for name in self._indexers}
        self._handlers: list[Handler] = []
        self.synced = threading.Event()

    def add_handler(self, handler: Handler) -> None:
        """Call `handler(old, new)` on every change; add handlers before `start`."""
        self._handlers.append(handler)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), name=f"informer-{self.kind}", daemon=True
        )
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        """List, then follow the watch until `stop`; relists replace the cache wholesale."""
        replaying = 0
        for event in retrying.list_then_watch(
            self._cluster, self.kind, namespace=self.namespace,
            label_selector=self.label_selector or None, timeout_s=self._watch_timeout_s,
            stop=stop,
        ):
            if isinstance(event, retrying.Relist):
                self._replace(event.items)
                # list_then_watch replays the listed items as ADDED: already applied.
                replaying = len(event.items)
                self.synced.set()
                continue
            if replaying:
                replaying -= 1
                continue
            if event.type is ports.WatchEventType.DELETED:
                # Handlers see the object's final state (as client-go's OnDelete does), except
                # for an object that left the selection (e.g. a Node whose label went): its
                # final state no longer says what it belonged to, its last selected state does.
                final = None if self._left_selection(event.obj) else self._slim(event.obj)
                self._change(object_key(event.obj), None, final=final)
            else:
                self._change(object_key(event.obj), self._slim(event.obj))

    def _left_selection(self, obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return any(
            key not in labels or (value is not None and labels[key] != value)
            for key, value in self.label_selector.items()
        )

    # ------------------------------------------------------------ reads

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._store.get((namespace, name))

    def by_index(self, index: str, value: str) -> tuple[Obj, ...]:
        with self._lock:
            keys = sorted(self._indices[index].get(value, ()))
            return tuple(self._store[k] for k in keys)

    def index_values(self, index: str) -> frozenset[str]:
        with self._lock:
            return frozenset(v for v, keys in self._indices[index].items() if keys)

    def object_keys(self) -> tuple[Key, ...]:
        with self._lock:
            return tuple(sorted(self._store))

    def items(self) -> tuple[Obj, ...]:
        with self._lock:
            return tuple(self._store[k] for k in sorted(self._store))

    # ------------------------------------------------------------ writes (informer thread)

    def _slim(self, obj: Obj) -> Obj:
        return self._transform(obj) if self._transform is not None else obj

    def _replace(self, items: Iterable[Obj]) -> None:
        fresh = {object_key(o): self._slim(o) for o in items}
        with self._lock:
            gone = [k for k in self._store if k not in fresh]
        for key in gone:
            self._change(key, None)
        for key, obj in fresh.items():
            self._change(key, obj)

    def _change(self, key: Key, new: Obj | None, *, final: Obj | None = None) -> None:
        with self._lock:
            old = self._store.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            if new is not None:
                self._store[key] = new
                for name, indexer in self._indexers.items():
                    for value in indexer(new):
                        self._indices[name].setdefault(value, set()).add(key)
        if old is None and new is None:
            # Never cached (e.g. a MODIFIED event of an object outside the selection): no
            # handler hears of a delete of something it never saw added.
            return
        if new is None and final is not None:
            old = final
        for handler in self._handlers:
            try:
                handler(old, new)
            except Exception:  # NB: a handler bug must not stop the cache from following
                log.exception("informer handler failed kind=%s key=%s", self.kind, key)

    def _unindex(self, key: Key, obj: Obj) -> None:
        for name, indexer in self._indexers.items():
            for value in indexer(obj):
                keys = self._indices[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indices[name][value]
