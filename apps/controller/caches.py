"""The controller's informer caches, and what one ComputeDomain's planner sees in them.

One informer per kind the planner reads, each narrowed to what is ours where it can be:
workload RCTs by the `computeDomainTarget=Workload` label (cluster-wide), daemon RCTs and
DaemonSets by `computeDomainTarget=Daemon` in the driver namespace, cliques in the driver
namespace; Nodes cluster-wide (any node may carry the label), slimmed to their metadata.
Indexes map every related object back to its ComputeDomain (label value = CD UID), so an event
costs a dictionary lookup, and observing one CD costs O(its own objects).

A miss for a child the planner is about to create or retire is read through with one GET
(a foreign object holding the RCT name carries none of our labels, and a just-created child
may not have reached the cache yet): never a list.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from adapters.kube import informer
from core import controlling, errors, kinds, models, names, ports

CD_UID_INDEX = "uid"
CD_RCT_INDEX = "rct"
BY_CD_INDEX = "cd"

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
        by_owner = {BY_CD_INDEX: lambda o: (owner_uid(o),) if owner_uid(o) else ()}

        def make(kind: str, **kw: Any) -> informer.Informer:
            return informer.Informer(cluster, kind, watch_timeout_s=watch_timeout_s, **kw)

        self.domains = make(kinds.COMPUTE_DOMAIN.kind, indexers={
            CD_UID_INDEX: lambda o: (str(_meta(o).get("uid") or ""),),
            CD_RCT_INDEX: lambda o: (cd_rct_key(o),) if cd_rct_key(o) else (),
        })
        self.workload_rcts = make(kinds.RESOURCE_CLAIM_TEMPLATE.kind, label_selector=workload,
                                  indexers=by_owner)
        self.daemon_rcts = make(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=ns,
                                label_selector=daemon, indexers=by_owner)
        self.daemonsets = make(kinds.DAEMON_SET.kind, namespace=ns, label_selector=daemon,
                               indexers=by_owner)
        self.nodes = make(kinds.NODE.kind, transform=_metadata_only, indexers=by_owner)
        self.cliques = make(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=ns, indexers={
            BY_CD_INDEX: lambda o: (clique_cd_uid(o),) if clique_cd_uid(o) else (),
        })

    @property
    def all(self) -> tuple[informer.Informer, ...]:
        return (self.domains, self.workload_rcts, self.daemon_rcts, self.daemonsets,
                self.nodes, self.cliques)

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
        return self.domains.get(namespace, name)

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
        workload = (self.workload_rcts.get(cd.meta.namespace, rct_name)
                    or self.daemon_rcts.get(cd.meta.namespace, rct_name))
        if workload is None and controlling.is_dns1123_subdomain(rct_name):
            workload = self._read_through(rct_kind, cd.meta.namespace, rct_name)
        if workload is not None:
            by_key[(rct_kind, cd.meta.namespace, rct_name)] = workload
        # Daemon-side children: looked up in host-managed mode only for a deletion (a CD
        # admitted under driver-managed mode before a switch is still cleaned up).
        daemon_side = not self._config.host_managed or cd.meta.deleting
        for kind, cache in ((rct_kind, self.daemon_rcts), (kinds.DAEMON_SET.kind,
                                                           self.daemonsets)):
            child = cache.get(ns, daemon_name)
            if child is None and daemon_side:
                child = self._read_through(kind, ns, daemon_name)
            if child is not None:
                by_key[(kind, ns, daemon_name)] = child
        index = controlling.ClusterIndex(
            by_key=by_key,
            nodes_by_cd={cd.uid: self.nodes.by_index(BY_CD_INDEX, cd.uid)},
            cliques_by_cd={(ns, cd.uid): self.cliques.by_index(BY_CD_INDEX, cd.uid)},
        )
        return controlling.observe(cd, objects=index, config=self._config,
                                   conditions=controlling.conditions_from_k8s(raw))

    def labelled_nodes(self) -> tuple[Obj, ...]:
        """Nodes carrying a computeDomain label (any value)."""
        values = self.nodes.index_values(BY_CD_INDEX)
        return tuple(n for v in sorted(values) for n in self.nodes.by_index(BY_CD_INDEX, v))

    def _read_through(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return self._cluster.get(kind, namespace=namespace, name=name)
        except errors.NotFoundError:
            return None
