"""The controller as client-go would run it: informers -> work queue -> workers.

Informer events map to ComputeDomain keys (`(namespace, name)`; related objects through their
computeDomain label = CD UID, cliques through their name, RCTs also through the CDs naming
them); workers take a key, plan that one CD from the caches and apply. A failing key is retried
alone with exponential backoff; every other key goes on at once. No fixed interval between
passes: a change is picked up as soon as its event arrives. A periodic resync re-queues every
cached CD (level-triggered safety net) without an API call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from adapters.kube import informer, workqueue
from apps.controller import caches as controller_caches
from apps.controller import reconciler as controller_reconciler
from apps.controller import writes
from core import errors, kinds
from core.computedomain import channels

log = logging.getLogger(__name__)

Key = tuple[str, str]
Obj = Mapping[str, Any]
# Not a ComputeDomain (CDs always have a namespace): the stale node-label clean-up.
STALE_NODE_LABELS_KEY: Final[Key] = ("", "stale-node-labels")
# How long a worker blocks on an empty queue before checking `stop` again.
_IDLE_POLL_S: Final = 0.5


class Controller:
    """Owns the caches, the queue and the workers of one leadership term."""

    def __init__(
        self,
        reconciler: controller_reconciler.Reconciler,
        *,
        workers: int = 16,
        resync_s: float = 300.0,
        queue: workqueue.WorkQueue[Key] | None = None,
        watch_timeout_s: float = 300.0,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.reconciler = reconciler
        self.caches = controller_caches.ControllerCaches(
            reconciler.cluster, config=reconciler.config, watch_timeout_s=watch_timeout_s
        )
        self.queue: workqueue.WorkQueue[Key] = queue if queue is not None else workqueue.WorkQueue()
        self._writer = writes.WriteReporting(
            reconciler.cluster, on_written=self.caches.remember, on_exists=self.caches.must_read,
            may_write=may_write,
        )
        self._workers = workers
        self._resync_s = resync_s
        self.synced = threading.Event()
        self.stopped = threading.Event()
        # Channel isolation: this term's table is rebuilt from this term's caches.
        reconciler.channels.use_snapshot(self.caches.channel_table)
        self._wire_handlers()

    # ------------------------------------------------------------ running

    def run(self, stop: threading.Event) -> None:
        """Start informers, wait for their first lists, work until `stop`; returns once every
        worker has finished its current key (`stopped` is set then)."""
        try:
            self.caches.start(stop)
            if not self.caches.wait_synced(stop):
                return
            self._enqueue_all()
            self.synced.set()
            log.info("event=controller_synced domains=%d", len(self.caches.domains.object_keys()))
            threads = [
                threading.Thread(target=self._work, args=(stop,), name=f"controller-worker-{i}",
                                 daemon=True)
                for i in range(self._workers)
            ]
            for thread in threads:
                thread.start()
            while not stop.wait(self._resync_s):
                self._enqueue_all()
            self.queue.shut_down()
            for thread in threads:
                thread.join()
        finally:
            self.queue.shut_down()
            self.stopped.set()

    def _enqueue_all(self) -> None:
        for key in self.caches.domains.object_keys():
            self.queue.add(key)
        self.queue.add(STALE_NODE_LABELS_KEY)

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.get(timeout_s=_IDLE_POLL_S)
            if key is None:
                continue
            try:
                self._sync(key)
            except errors.ClusterError as exc:
                delay = self.queue.add_rate_limited(key)
                if self.reconciler.metrics is not None:
                    self.reconciler.metrics.reconcile_failures_total.inc()
                log.info("event=reconcile_backoff key=%s/%s attempt=%d delay_s=%.3f reason=%r",
                         key[0], key[1], self.queue.failures(key), delay, exc.message)
            except Exception:  # NB: a bug on one key must not kill the worker
                log.exception("event=reconcile_crashed key=%s/%s", key[0], key[1])
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
            finally:
                self.queue.done(key)

    def _sync(self, key: Key) -> None:
        if key == STALE_NODE_LABELS_KEY:
            self._sync_stale_node_labels()
            return
        raw = self.caches.domain(*key)
        if raw is None:
            return  # deleted: its handler already forgot it
        self.reconciler.sync_domain(raw, observe=self.caches.observe, writer=self._writer)

    def _sync_stale_node_labels(self) -> None:
        if self.reconciler.config.host_managed:
            return  # host-managed mode never labels nodes, nor cleans labels up
        nodes = self.caches.labelled_nodes()
        cached = self.caches.live_domain_uids()
        if not any(controller_caches.owner_uid(n) not in cached for n in nodes):
            return
        # NB: a node label may name a CD newer than the CD cache: confirm with a fresh list
        # (only here, when a label looks stale, never per event).
        live = frozenset(
            str((cd.get("metadata") or {}).get("uid") or "")
            for cd in self.reconciler.cluster.list(kinds.COMPUTE_DOMAIN.kind).items
        )
        self.reconciler.sync_stale_node_labels(nodes=nodes, live_cd_uids=live)

    # ------------------------------------------------------------ event -> key

    def _wire_handlers(self) -> None:
        c = self.caches
        c.domains.add_handler(self._on_domain)
        for owned in (c.workload_rcts, c.daemon_rcts):
            owned.add_handler(self._on_rct)
        c.daemonsets.add_handler(self._on_owned)
        c.nodes.add_handler(self._on_node)
        c.cliques.add_handler(self._on_clique)
        if c.daemon_pods is not None:
            c.daemon_pods.add_handler(self._on_daemon_pod)
        if c.claims is not None:
            c.claims.add_handler(self._on_claim)

    def _on_domain(self, old: Obj | None, new: Obj | None) -> None:
        self._enqueue_channel_rivals(old, new)
        if new is not None:
            self.queue.add(informer.object_key(new))
            return
        if old is not None:
            uid = str((old.get("metadata") or {}).get("uid") or "")
            self.reconciler.forget_domain(uid)
            self.queue.add(STALE_NODE_LABELS_KEY)
            self._enqueue_waiting_for_channel()

    def _on_claim(self, old: Obj | None, new: Obj | None) -> None:
        if new is None and old is not None:
            # A claim gone may free the channel of a deleted ComputeDomain.
            self._enqueue_waiting_for_channel()

    def _enqueue_channel_rivals(self, old: Obj | None, new: Obj | None) -> None:
        """Channel isolation: a CD whose channel changed (or that came or went) re-queues the
        other CDs naming the old or new channel. Which of two holders moves depends on both
        (`channels.duplicate_standing`), and the one that must move may have no event of its
        own: the earlier holder's status naming its channel is the only change there is."""
        if not self.reconciler.config.channel_isolation:
            return
        before = channels.domain_channel_from_k8s(old).channel_id if old else None
        after = channels.domain_channel_from_k8s(new).channel_id if new else None
        if before == after and old is not None and new is not None:
            return
        me = informer.object_key(new if new is not None else old or {})
        for channel in {before, after} - {None}:
            for raw in self.caches.domains.by_index(controller_caches.CHANNEL_INDEX,
                                                    str(channel)):
                key = informer.object_key(raw)
                if key != me:
                    self.queue.add(key)

    def _enqueue_waiting_for_channel(self) -> None:
        """Channel isolation: re-queue every CD still without a channel (a channel may be free)."""
        if not self.reconciler.config.channel_isolation:
            return
        for raw in self.caches.domains.items():
            if channels.domain_channel_from_k8s(raw).channel_id is None:
                self.queue.add(informer.object_key(raw))

    def _enqueue_owner(self, obj: Obj | None) -> None:
        if obj is None:
            return
        uid = controller_caches.owner_uid(obj)
        if uid:
            for key in self.caches.domain_keys_by_uid(uid):
                self.queue.add(key)

    def _on_owned(self, old: Obj | None, new: Obj | None) -> None:
        self._enqueue_owner(old)
        self._enqueue_owner(new)

    def _on_rct(self, old: Obj | None, new: Obj | None) -> None:
        self._on_owned(old, new)
        # Every CD naming this RCT: one refused because another held it can now be served.
        namespace, name = informer.object_key(new if new is not None else old or {})
        for key in self.caches.domain_keys_by_rct(namespace, name):
            self.queue.add(key)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if not controller_reconciler.node_label_changed(old, new):
            return
        self._on_owned(old, new)
        self.queue.add(STALE_NODE_LABELS_KEY)

    def _on_daemon_pod(self, old: Obj | None, new: Obj | None) -> None:
        """A daemon pod appeared, went, or moved to a node: its CD may drop a gone daemon."""
        if old is not None and new is not None and _pod_node(old) == _pod_node(new):
            return  # a status change: nothing the planner reads
        self._on_owned(old, new)

    def _on_clique(self, old: Obj | None, new: Obj | None) -> None:
        for obj in (old, new):
            uid = controller_caches.clique_cd_uid(obj) if obj is not None else ""
            if uid:
                for key in self.caches.domain_keys_by_uid(uid):
                    self.queue.add(key)



def _pod_node(obj: Obj) -> str:
    spec = obj.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""
