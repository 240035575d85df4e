"""When the controller loop has nothing left to do, for whoever changes the cluster and then wants
the controller's answer before going on: the embedded demo and tests. The controller itself
never waits for this.

Settled means three things at once:
- every informer has handled (all its handlers returned) exactly what a fresh list of its
  selection holds, each object at the same resourceVersion: every key the cluster's state calls
  for has been queued;
- the work queue has nothing queued, waiting out a backoff, or in flight: every queued key has
  been synced;
- the cluster did not change while this was checked: those syncs wrote nothing more.

NB: one check lists every kind the controller follows; cheap on the embedded cluster, and not
something a production controller does. An object created and deleted again before its
informer saw either is not waited for: the controller's answer to a vanished object it never
saw is to forget it, which changes nothing in the cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from adapters.kube import informer
from apps.controller import running
from core import errors

# Pause between checks while the controller is busy.
_POLL_S: Final = 0.002

_Versions = dict[informer.Key, str]


def _versions(objects: Iterable[Mapping[str, Any]]) -> _Versions:
    return {
        informer.object_key(obj): str((obj.get("metadata") or {}).get("resourceVersion") or "")
        for obj in objects
    }


class Settling:
    """Tells when `controller` has settled (see the module docstring).

    Create it before the controller runs: it adds a handler to every informer, after the
    controller's own, so an object counts as handled only once those returned.
    """

    def __init__(self, controller: running.Controller) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._informers = controller.caches.all
        self._handled: list[_Versions] = [{} for _ in self._informers]
        for index, each in enumerate(self._informers):
            each.add_handler(self._follower(index))

    def _follower(self, index: int) -> informer.Handler:
        def handled(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            with self._lock:
                if new is not None:
                    self._handled[index].update(_versions((new,)))
                elif old is not None:
                    self._handled[index].pop(informer.object_key(old), None)
        return handled

    def is_settled(self) -> bool:
        """One check of the three conditions; True when all held."""
        queue = self._controller.queue
        if not queue.is_idle():
            return False  # the cheap answer first: no list while workers are busy
        cluster = self._controller.reconciler.cluster
        version = ""
        for index, each in enumerate(self._informers):
            listed = cluster.list(each.kind, namespace=each.namespace,
                                  label_selector=each.label_selector or None)
            version = version or listed.resource_version
            with self._lock:
                handled = dict(self._handled[index])
            if handled != _versions(listed.items):
                return False
        if not queue.is_idle():
            return False
        first = self._informers[0]
        return cluster.list(first.kind, namespace=first.namespace,
                            label_selector=first.label_selector or None
                            ).resource_version == version

    def wait(self, *, timeout_s: float = 30.0) -> None:
        """Return once settled; RetryableError after `timeout_s` (naming what is left)."""
        deadline = time.monotonic() + timeout_s
        while not self.is_settled():
            if time.monotonic() > deadline:
                raise errors.RetryableError(
                    f"the controller did not settle within {timeout_s:g}s: "
                    f"{len(self._controller.queue)} key(s) still queued or backing off"
                )
            time.sleep(_POLL_S)
