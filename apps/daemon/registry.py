"""This daemon's entry among its peers, written conflict-safely, and the peers, followed live.

The entry lives in the ComputeDomainClique `<cdUID>.<cliqueID>` (gate ComputeDomainCliques;
created here when missing, with every daemon pod that writes it among its ownerReferences, so
the garbage collector removes it with the last daemon pod) or in the ComputeDomain's
`status.nodes`. Every write is read-modify-write conditioned on the resourceVersion read,
retried on conflict, so concurrent daemons never drop each other's entries (nor owners). The
peer list comes from a list+watch of that object.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from adapters.kube import retrying
from core import errors, kinds, models, names, ports
from core.computedomain import membership

log = logging.getLogger(__name__)

# Many daemons of one clique start together and all write one object: keep retrying briefly.
_CONFLICT_ATTEMPTS = 60


class PeerRegistry:
    """Reads and writes this daemon's entry; `follow` streams the whole peer list."""

    def __init__(
        self,
        cluster: ports.Cluster,
        *,
        store: membership.Store,
        me: membership.Identity,
        domain_uid: str,
        domain_name: str,
        domain_namespace: str,
        namespace: str,
        max_nodes: int,
    ) -> None:
        self._cluster = cluster
        self.store = store
        self.me = me
        self._domain_uid = domain_uid
        self._max_nodes = max_nodes
        if store is membership.Store.CLIQUE:
            self._kind = kinds.COMPUTE_DOMAIN_CLIQUE.kind
            self._namespace = namespace
            self._name = membership.clique_object_name(domain_uid, me.clique_id)
        else:
            self._kind = kinds.COMPUTE_DOMAIN.kind
            self._namespace = domain_namespace
            self._name = domain_name

    @property
    def object_ref(self) -> str:
        return f"{self._kind} {self._namespace}/{self._name}"

    def upsert(self, status: models.DomainStatus) -> Mapping[str, Any]:
        """Make this daemon's entry current (claiming an index if new) and, in a clique, its pod
        one of the clique's owners; returns the object."""

        def change(obj: Mapping[str, Any]) -> dict[str, Any] | None:
            entries = membership.upsert_entry(
                membership.entries_of(obj, store=self.store),
                me=self.me, status=status, store=self.store, max_nodes=self._max_nodes,
            )
            owners = (
                membership.owners_with(membership.owners_of(obj), me=self.me)
                if self.store is membership.Store.CLIQUE
                else None
            )
            if entries is None and owners is None:
                return None
            patch = {} if entries is None else membership.entries_patch(entries, store=self.store)
            if owners is not None:
                patch["metadata"] = {"ownerReferences": owners}
            return patch

        return self._read_modify_write(change, create=True)

    def lacks_owner(self, obj: Mapping[str, Any] | None) -> bool:
        """True when `obj` is a clique this daemon's pod does not own yet (`upsert` fixes it)."""
        return (
            obj is not None
            and self.store is membership.Store.CLIQUE
            and membership.owners_with(membership.owners_of(obj), me=self.me) is not None
        )

    def remove(self) -> None:
        """Drop this daemon's entry (on SIGTERM); a missing object or entry is fine.

        NB: the pod's ownerReference stays (see `membership.owners_with`)."""

        def change(obj: Mapping[str, Any]) -> dict[str, Any] | None:
            entries = membership.remove_entry(
                membership.entries_of(obj, store=self.store), me=self.me, store=self.store
            )
            return None if entries is None else membership.entries_patch(entries, store=self.store)

        with contextlib.suppress(errors.NotFoundError):
            self._read_modify_write(change, create=False)

    def follow(
        self, on_object: Callable[[Mapping[str, Any] | None], None], stop: threading.Event
    ) -> threading.Thread:
        """Call `on_object` with every new version of the object (None once it is deleted)."""

        def run() -> None:
            for event in retrying.list_then_watch(
                self._cluster, self._kind, namespace=self._namespace, timeout_s=60, stop=stop
            ):
                if isinstance(event, retrying.Relist):
                    if not any(_name_of(o) == self._name for o in event.items):
                        on_object(None)
                    continue
                if _name_of(event.obj) != self._name:
                    continue
                deleted = event.type is ports.WatchEventType.DELETED
                on_object(None if deleted else event.obj)

        thread = threading.Thread(target=run, name="peer-informer", daemon=True)
        thread.start()
        return thread

    def _read_modify_write(
        self,
        change: Callable[[Mapping[str, Any]], dict[str, Any] | None],
        *,
        create: bool,
    ) -> Mapping[str, Any]:
        def attempt() -> Mapping[str, Any]:
            obj = self._get(create=create)
            patch = change(obj)
            if patch is None:
                return obj
            meta = obj.get("metadata") or {}
            return self._cluster.patch(
                self._kind,
                namespace=self._namespace,
                name=self._name,
                patch=patch,
                subresource="status" if self.store is membership.Store.STATUS else "",
                resource_version=str(meta.get("resourceVersion") or ""),
            )

        return retrying.retry_on_conflict(
            attempt,
            attempts=_CONFLICT_ATTEMPTS,
            wait=retrying.bounded_backoff(initial_s=0.01, max_s=0.25),
        )

    def _get(self, *, create: bool) -> Mapping[str, Any]:
        try:
            return self._cluster.get(self._kind, namespace=self._namespace, name=self._name)
        except errors.NotFoundError:
            if not create or self.store is membership.Store.STATUS:
                raise
        try:
            created = self._cluster.create(self._kind, self._new_clique())
            log.info("event=clique_created name=%s namespace=%s", self._name, self._namespace)
            return created
        except errors.AlreadyExistsError:
            return self._cluster.get(self._kind, namespace=self._namespace, name=self._name)

    def _new_clique(self) -> dict[str, Any]:
        """The clique as the first daemon creates it: owned by its pod, so that a clique
        created (or re-created) by a daemon never outlives the daemon pods that use it."""
        meta: dict[str, Any] = {
            "name": self._name,
            "namespace": self._namespace,
            "labels": {
                names.COMPUTE_DOMAIN_LABEL: self._domain_uid,
                CLIQUE_LABEL: self.me.clique_id,
            },
        }
        owner = membership.pod_owner_reference(self.me)
        if owner is not None:
            meta["ownerReferences"] = [owner]
        return {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
            "metadata": meta,
            "daemons": [],
        }


# Upstream's label on cliques (and daemon pods) naming the clique.
CLIQUE_LABEL = "resource.nvidia.com/computeDomain.cliqueID"


def _name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
