"""The controller's informer caches, and what one ComputeDomain's planner sees in them.

One informer per kind the planner reads, each narrowed to what is ours where it can be:
workload RCTs by the `computeDomainTarget=Workload` label (cluster-wide), daemon RCTs by
`computeDomainTarget=Daemon` in the driver namespace, DaemonSets and (driver-managed) IMEX
daemon pods by the computeDomain label in the driver namespace (upstream's carry no target
label, and are adopted), cliques in the driver namespace; Nodes cluster-wide (any node may
carry the label), slimmed to their metadata.
Indexes map every related object back to its ComputeDomain (label value = CD UID), so an event
costs a dictionary lookup, and observing one CD costs O(its own objects).

What the controller itself just wrote (create and patch answers) is kept beside the caches
until its watch event arrives (`remember`), so the next sync of the same CD plans from what it
did, not from a cache a few milliseconds behind: no duplicate writes, no conflicts with itself.
A miss is read through with one GET (never a list) only where the cache cannot be trusted: a
CD being deleted (its children must really be gone), or an object a create found already there
(`must_read`: a foreign RCT holding the name carries none of our labels).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from adapters.kube import informer
from core import errors, kinds, models, names, ports
from core.computedomain import channels, controlling

# Deletions remembered against late answers to our own writes (one per recent deletion).
_GONE_REMEMBERED = 4096
_OVERLAID_KINDS = frozenset(
    {kinds.COMPUTE_DOMAIN.kind, kinds.RESOURCE_CLAIM_TEMPLATE.kind, kinds.DAEMON_SET.kind}
)
CD_UID_INDEX = "uid"
CD_RCT_INDEX = "rct"
BY_CD_INDEX = "cd"
# Channel isolation: channel IDs held (CDs by status.channelID, claims by their configs).
CHANNEL_INDEX = "channel"
CLAIM_DOMAIN_INDEX = "claim-domain"

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Obj) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def owner_uid(obj: Obj) -> str:
    """The CD UID an object of ours carries in its computeDomain label ("" if none)."""
    value = _labels(obj).get(names.COMPUTE_DOMAIN_LABEL)
    return value if isinstance(value, str) else ""


def clique_cd_uid(obj: Obj) -> str:
    """Cliques are named `<cdUID>.<cliqueID>`."""
    uid, dot, _ = str(_meta(obj).get("name") or "").partition(".")
    return uid if dot else ""


def cd_rct_key(obj: Obj) -> str:
    """`namespace/name` of the RCT a raw ComputeDomain asks for ("" if it names none)."""
    spec = obj.get("spec")
    channel = spec.get("channel") if isinstance(spec, Mapping) else None
    template = channel.get("resourceClaimTemplate") if isinstance(channel, Mapping) else None
    name = template.get("name") if isinstance(template, Mapping) else None
    if not isinstance(name, str) or not name:
        return ""
    return f"{_meta(obj).get('namespace') or ''}/{name}"


def _is_gone(obj: Obj) -> bool:
    """A deleting object without finalizers: what the API answers as it removes it."""
    meta = _meta(obj)
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def _newer(a: Obj, b: Obj) -> bool:
    """True when `a` is a later version of the same object than `b`.

    NB: resourceVersions are opaque to clients in general, but etcd's (and the embedded
    cluster's) are increasing integers, as client-go's mutation cache also assumes; anything
    else counts as not newer, so the cache wins.
    """
    try:
        return int(str(_meta(a).get("resourceVersion"))) > int(str(_meta(b).get("resourceVersion")))
    except ValueError:
        return False


def _domain_channel_keys(obj: Obj) -> tuple[str, ...]:
    channel = channels.domain_channel_from_k8s(obj).channel_id
    return (str(channel),) if channel is not None else ()


def _channel_configs_only(obj: Obj) -> Obj:
    """A ResourceClaim slimmed to what the channel table reads (metadata, opaque configs)."""
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    configs = devices.get("config") if isinstance(devices, Mapping) else None
    return {"metadata": _meta(obj), "spec": {"devices": {"config": configs or []}}}


def _pod_node_only(obj: Obj) -> Obj:
    """A Pod slimmed to what the planner reads: its metadata and the node it is bound to."""
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {}, "spec": {"nodeName": node or ""}}


def _metadata_only(obj: Obj) -> Obj:
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {}}


class ControllerCaches:
    """Informers of every kind the planner reads; start them, wait for `synced`, then read."""

    def __init__(self, cluster: ports.Cluster, *, config: models.DriverConfig,
                 watch_timeout_s: float = 300.0) -> None:
        self._cluster = cluster
        self._config = config
        ns = config.namespace
        workload = {names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_WORKLOAD}
        daemon = {names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_DAEMON}
        # NB: upstream's DaemonSets and daemon pods carry the computeDomain label alone.
        any_cd: dict[str, str | None] = {names.COMPUTE_DOMAIN_LABEL: None}
        by_owner = {BY_CD_INDEX: lambda o: (owner_uid(o),) if owner_uid(o) else ()}

        def make(kind: str, **kw: Any) -> informer.Informer:
            return informer.Informer(cluster, kind, watch_timeout_s=watch_timeout_s, **kw)

        self.domains = make(kinds.COMPUTE_DOMAIN.kind, indexers={
            CD_UID_INDEX: lambda o: (str(_meta(o).get("uid") or ""),),
            CHANNEL_INDEX: _domain_channel_keys,
            CD_RCT_INDEX: lambda o: (cd_rct_key(o),) if cd_rct_key(o) else (),
        })
        self.workload_rcts = make(kinds.RESOURCE_CLAIM_TEMPLATE.kind, label_selector=workload,
                                  indexers=by_owner)
        self.daemon_rcts = make(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=ns,
                                label_selector=daemon, indexers=by_owner)
        self.daemonsets = make(kinds.DAEMON_SET.kind, namespace=ns, label_selector=any_cd,
                               indexers=by_owner)
        # Only nodes carrying a computeDomain label (the API server filters, so the nodes of a
        # large cluster that no CD uses never cross the wire).
        self.nodes = make(kinds.NODE.kind, label_selector={names.COMPUTE_DOMAIN_LABEL: None},
                          transform=_metadata_only, indexers=by_owner)
        self.cliques = make(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=ns, indexers={
            BY_CD_INDEX: lambda o: (clique_cd_uid(o),) if clique_cd_uid(o) else (),
        })
        # Driver-managed only: the IMEX daemon pods (their DaemonSets' template labels), slimmed
        # to metadata and node: a daemon entry whose pod is gone is dropped (see `controlling`).
        self.daemon_pods: informer.Informer | None = (
            make(kinds.POD.kind, namespace=ns, label_selector=any_cd, transform=_pod_node_only,
                 indexers=by_owner)
            if not config.host_managed else None
        )
        # Channel isolation only: the ResourceClaims made from our workload RCTs (they carry its
        # labels, see `objects.workload_rct`), their channel configs, for the rule that a
        # channel is free only once no claim of its ComputeDomain is left.
        # NB: a claim written by hand, or made from an RCT of a release before these labels,
        # is not seen here; the kubelet plugin's node-local check still refuses to prepare a
        # channel another domain's claim holds on the node.
        self.claims: informer.Informer | None = (
            make(kinds.RESOURCE_CLAIM.kind, label_selector=workload,
                 transform=_channel_configs_only, indexers={
                CHANNEL_INDEX: lambda o: tuple(
                    str(c.channel_id) for c in channels.claim_channels_from_k8s(o)),
                CLAIM_DOMAIN_INDEX: lambda o: tuple(
                    c.domain_uid for c in channels.claim_channels_from_k8s(o)),
            })
            if config.channel_isolation else None
        )
        self._lock = threading.Lock()
        # (kind, namespace, name) -> what our own create/patch answered, until the cache has it.
        self._written: dict[tuple[str, str, str], Obj] = {}
        # (kind, namespace, name) a create found already present: GET it on the next sync.
        self._must_read: set[tuple[str, str, str]] = set()
        # (kind, namespace, name) -> last state of objects seen deleted, so an answer to our
        # own write that arrives after the deletion's event cannot bring the object back.
        self._gone: collections.OrderedDict[tuple[str, str, str], Obj] = (
            collections.OrderedDict()
        )
        for each, kind in ((self.domains, kinds.COMPUTE_DOMAIN.kind),
                           (self.workload_rcts, kinds.RESOURCE_CLAIM_TEMPLATE.kind),
                           (self.daemon_rcts, kinds.RESOURCE_CLAIM_TEMPLATE.kind),
                           (self.daemonsets, kinds.DAEMON_SET.kind)):
            each.add_handler(self._caught_up(kind))

    @property
    def all(self) -> tuple[informer.Informer, ...]:
        extra = tuple(i for i in (self.claims, self.daemon_pods) if i is not None)
        return (self.domains, self.workload_rcts, self.daemon_rcts, self.daemonsets,
                self.nodes, self.cliques, *extra)

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        return [i.start(stop) for i in self.all]

    def wait_synced(self, stop: threading.Event, *, poll_s: float = 0.05) -> bool:
        """Block until every informer listed once (True) or `stop` is set (False)."""
        for each in self.all:
            while not each.synced.wait(poll_s):
                if stop.is_set():
                    return False
        return not stop.is_set()

    # ------------------------------------------------------------ reads

    def domain(self, namespace: str, name: str) -> Obj | None:
        return self._fresher(kinds.COMPUTE_DOMAIN.kind, self.domains.get(namespace, name))

    # ------------------------------------------------------------ our own writes

    def remember(self, kind: str, obj: Obj) -> None:
        """Keep what a create or patch of ours answered until the cache catches up (for the
        kinds planned from the overlay; Node and clique writes are read from the cache)."""
        if kind not in _OVERLAID_KINDS:
            return
        meta = _meta(obj)
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            self._must_read.discard(key)
            gone = self._gone.get(key)
            if _is_gone(obj) or (gone is not None and not _newer(obj, gone)):
                # The answer to removing the last finalizer, or older than a deletion seen.
                self._written.pop(key, None)
                return
            self._written[key] = obj

    def must_read(self, kind: str, namespace: str, name: str) -> None:
        """A create found `name` already there: read it on the next sync."""
        with self._lock:
            self._must_read.add((kind, namespace, name))

    def _caught_up(self, kind: str) -> informer.Handler:
        def drop(old: Obj | None, new: Obj | None) -> None:
            obj = new if new is not None else old
            if obj is None:
                return
            meta = _meta(obj)
            key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            with self._lock:
                written = self._written.get(key)
                if written is not None and (new is None or not _newer(written, new)):
                    del self._written[key]
                if new is None:
                    self._gone[key] = obj
                    self._gone.move_to_end(key)
                    while len(self._gone) > _GONE_REMEMBERED:
                        self._gone.popitem(last=False)
                else:
                    self._gone.pop(key, None)
        return drop

    def _fresher(self, kind: str, cached: Obj | None) -> Obj | None:
        if cached is None:
            return None
        meta = _meta(cached)
        with self._lock:
            written = self._written.get(
                (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            )
        return written if written is not None and _newer(written, cached) else cached

    def _child(self, cache: informer.Informer, kind: str, namespace: str, name: str, *,
               read_through: bool) -> Obj | None:
        """A child from the cache, else from our own writes, else (if allowed or required) a
        GET."""
        found = self._fresher(kind, cache.get(namespace, name))
        key = (kind, namespace, name)
        with self._lock:
            if found is None:
                found = self._written.get(key)
            required = key in self._must_read
        if found is None and (read_through or required):
            found = self._read_through(kind, namespace, name)
            if found is None or owner_uid(found):
                with self._lock:
                    self._must_read.discard(key)
            # NB: a foreign object stays must-read: no event of ours tells when it goes.
        return found

    def domain_keys_by_uid(self, uid: str) -> tuple[informer.Key, ...]:
        return tuple(informer.object_key(o) for o in self.domains.by_index(CD_UID_INDEX, uid))

    def domain_keys_by_rct(self, namespace: str, name: str) -> tuple[informer.Key, ...]:
        found = self.domains.by_index(CD_RCT_INDEX, f"{namespace}/{name}")
        return tuple(informer.object_key(o) for o in found)

    def live_domain_uids(self) -> frozenset[str]:
        return self.domains.index_values(CD_UID_INDEX)

    def observe(self, cd: models.ComputeDomain, raw: Obj) -> controlling.Observed:
        """What exists for `cd`, from the caches (with a read-through GET on a child's miss)."""
        rct_kind = kinds.RESOURCE_CLAIM_TEMPLATE.kind
        ns = self._config.namespace
        daemon_name = names.daemonset_name(cd.uid)
        rct_name = cd.spec.channel.resource_claim_template_name
        by_key: dict[tuple[str, str, str], Obj] = {}
        # NB: a deleting CD's children must really be gone before its finalizer goes.
        deleting = cd.meta.deleting
        workload = self._child(self.workload_rcts, rct_kind, cd.meta.namespace, rct_name,
                               read_through=deleting)
        if workload is None and cd.meta.namespace == ns:
            workload = self._child(self.daemon_rcts, rct_kind, ns, rct_name, read_through=False)
        if workload is not None:
            by_key[(rct_kind, cd.meta.namespace, rct_name)] = workload
        # Daemon-side children: looked up in host-managed mode too for a deletion (a CD
        # admitted under driver-managed mode before a switch is still cleaned up).
        for kind, cache in ((rct_kind, self.daemon_rcts),
                            (kinds.DAEMON_SET.kind, self.daemonsets)):
            child = self._child(cache, kind, ns, daemon_name, read_through=deleting)
            if child is not None:
                by_key[(kind, ns, daemon_name)] = child
        pods = (
            controlling.daemon_pod_nodes(self.daemon_pods.by_index(BY_CD_INDEX, cd.uid))
            if self.daemon_pods is not None else None
        )
        index = controlling.ClusterIndex(
            by_key=by_key,
            nodes_by_cd={cd.uid: self.nodes.by_index(BY_CD_INDEX, cd.uid)},
            cliques_by_cd={(ns, cd.uid): self.cliques.by_index(BY_CD_INDEX, cd.uid)},
            daemon_pod_nodes_by_cd=pods,
        )
        observed = controlling.observe(cd, objects=index, config=self._config,
                                       conditions=controlling.conditions_from_k8s(raw))
        if self.claims is None:
            return observed
        return dataclasses.replace(observed, channel_rivals=self.channel_rivals(cd, raw))

    def channel_rivals(self, cd: models.ComputeDomain, raw: Obj) -> channels.Rivals:
        """Channel isolation: the other live CDs whose status names `cd`'s channel (from the
        channel index, each as fresh as our own writes), and the channels `cd`'s claims carry.
        O(holders of one channel + claims of one CD)."""
        channel = channels.domain_channel_from_k8s(raw).channel_id
        holders: list[Obj] = []
        if channel is not None:
            for cached in self.domains.by_index(CHANNEL_INDEX, str(channel)):
                fresher = self._fresher(kinds.COMPUTE_DOMAIN.kind, cached)
                if fresher is not None:
                    holders.append(fresher)
        own = [c for o in (self.claims.by_index(CLAIM_DOMAIN_INDEX, cd.uid)
                           if self.claims is not None else ())
               for c in channels.claim_channels_from_k8s(o)]
        return channels.rivals_from_k8s(raw, holders=holders, claims=own)

    def channel_table(self, uid: str, max_channels: int) -> channels.ChannelTable:
        """The channel table as the caches show it, for assigning CD `uid` a channel.

        Read from the informers' channel indexes (no scan of every CD or claim: a few
        microseconds per thousand channels held), plus our own status writes the CD cache has
        not caught up with. Only `uid`'s own claims are looked at for its old channel.
        """
        taken = set(self.domains.index_values(CHANNEL_INDEX))
        own: list[channels.ClaimChannel] = []
        if self.claims is not None:
            taken |= self.claims.index_values(CHANNEL_INDEX)
            own = [c for o in self.claims.by_index(CLAIM_DOMAIN_INDEX, uid)
                   for c in channels.claim_channels_from_k8s(o) if c.domain_uid == uid]
        with self._lock:
            written = [o for (kind, _, _), o in self._written.items()
                       if kind == kinds.COMPUTE_DOMAIN.kind]
        held = {int(c) for c in taken}
        for obj in written:
            channel = channels.domain_channel_from_k8s(obj).channel_id
            if channel is not None:
                held.add(channel)
        return channels.table_from_taken(held, own=own, max_channels=max_channels)

    def labelled_nodes(self) -> tuple[Obj, ...]:
        """Nodes carrying a computeDomain label (any value)."""
        values = self.nodes.index_values(BY_CD_INDEX)
        return tuple(n for v in sorted(values) for n in self.nodes.by_index(BY_CD_INDEX, v))

    def _read_through(self, kind: str, namespace: str, name: str) -> Obj | None:
        """One GET of an object the cache cannot vouch for (None when it does not exist)."""
        try:
            return self._cluster.get(kind, namespace=namespace, name=name)
        except errors.NotFoundError:
            return None
