"""A daemon's entry among its peers: where it lives, which index it claims, how it changes.

Each `compute-domain-daemon` owns one entry (`nodeName`/`name`, `ipAddress`, `cliqueID`,
`index`, `status`) in the `daemons` list of its ComputeDomainClique (gate ComputeDomainCliques)
or in its ComputeDomain's `status.nodes` (gate off). Writers read the object, compute the new
list here and write it back conditioned on the resourceVersion they read, so two daemons writing
at once never lose an entry: the loser re-reads and re-plans (upstream bug #1050 lost entries).

Only this daemon's own entry is ever rewritten; every other entry is passed through as the raw
JSON it was, so fields a newer writer added survive.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from core import errors, models

# Upstream's default: one NVL72 rack holds 18 compute trays.
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN = 18


class Store(enum.Enum):
    """Where the entries live; each store names the node field differently."""

    CLIQUE = "clique"  # ComputeDomainClique `daemons[]`, key `nodeName`
    STATUS = "status"  # ComputeDomain `status.nodes[]`, key `name`

    @property
    def node_key(self) -> str:
        return "nodeName" if self is Store.CLIQUE else "name"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Identity:
    """Who this daemon is: its node, the pod IP peers reach it at, and its NVLink clique."""

    node_name: str
    ip_address: str
    clique_id: str
    # The daemon's own pod (POD_NAME/POD_UID from its DaemonSet; "" when not given): an owner
    # of the ComputeDomainClique, so that the garbage collector deletes the clique together
    # with the last daemon pod that wrote to it.
    pod_name: str = ""
    pod_uid: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Peer:
    """One daemon's entry as peers see it."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int
    status: models.DomainStatus


def clique_object_name(cd_uid: str, clique_id: str) -> str:
    """`<cdUID>.<cliqueID>`: the ComputeDomainClique of one clique of one domain."""
    return f"{cd_uid}.{clique_id}"


def entries_of(obj: Mapping[str, Any], *, store: Store) -> list[Mapping[str, Any]]:
    """The raw entry list of a clique (`daemons`) or a ComputeDomain (`status.nodes`)."""
    raw = obj.get("daemons") if store is Store.CLIQUE else (obj.get("status") or {}).get("nodes")
    return [item for item in raw or () if isinstance(item, Mapping)]


def peers_of(entries: Sequence[Mapping[str, Any]], *, store: Store) -> tuple[Peer, ...]:
    """Decoded entries, sorted by (clique, index, node); malformed ones are skipped."""
    peers: list[Peer] = []
    for item in entries:
        node = item.get(store.node_key)
        index = item.get("index", 0)
        if not isinstance(node, str) or not node or isinstance(index, bool):
            continue
        if not isinstance(index, int):
            continue
        try:
            status = models.DomainStatus(item.get("status") or models.DomainStatus.NOT_READY)
        except ValueError:
            status = models.DomainStatus.NOT_READY
        peers.append(
            Peer(
                node_name=node,
                ip_address=str(item.get("ipAddress") or ""),
                clique_id=str(item.get("cliqueID") or ""),
                index=index,
                status=status,
            )
        )
    return tuple(sorted(peers, key=lambda p: (p.clique_id, p.index, p.node_name)))


def same_clique(peers: Sequence[Peer], clique_id: str) -> tuple[Peer, ...]:
    """The peers an IMEX daemon of `clique_id` talks to (other cliques have no NVLink to us)."""
    return tuple(p for p in peers if p.clique_id == clique_id)


def next_free_index(used: set[int], *, max_nodes: int) -> int:
    """The lowest index not in `used`; filling gaps keeps every other daemon's DNS name stable.

    Raises PermanentError when all `max_nodes` indexes are taken.
    """
    index = 0
    while index in used:
        index += 1
    if index >= max_nodes:
        raise errors.PermanentError(
            f"all {max_nodes} IMEX daemon indexes of this clique are taken; a clique holds at "
            "most MAX_NODES_PER_IMEX_DOMAIN daemons: raise that setting (chart value "
            "maxNodesPerIMEXDomain) if this clique really has more nodes"
        )
    return index


def upsert_entry(
    entries: Sequence[Mapping[str, Any]],
    *,
    me: Identity,
    status: models.DomainStatus,
    store: Store,
    max_nodes: int,
) -> list[dict[str, Any]] | None:
    """The entry list with this daemon's entry present and current, or None if it already is.

    An existing entry of this node keeps its index (a restarted daemon keeps its DNS name);
    a new one takes the lowest index free among daemons of the same clique. Duplicate entries
    of this node (a torn earlier write) collapse into the first.
    """
    key = store.node_key
    mine = [item for item in entries if item.get(key) == me.node_name]
    others = [dict(item) for item in entries if item.get(key) != me.node_name]
    used = {
        index
        for index in (_index_of(o) for o in others if str(o.get("cliqueID") or "") == me.clique_id)
        if index is not None
    }
    index = _index_of(mine[0]) if mine else None
    if index is None or index in used:
        # NB: a clashing index would give two live daemons one DNS name; take a free one.
        index = next_free_index(used, max_nodes=max_nodes)
    wanted = {
        **(dict(mine[0]) if mine else {}),
        key: me.node_name,
        "ipAddress": me.ip_address,
        "cliqueID": me.clique_id,
        "index": index,
        "status": status.value,
    }
    if len(mine) == 1 and dict(mine[0]) == wanted:
        return None
    if mine:
        position = next(i for i, item in enumerate(entries) if item.get(key) == me.node_name)
        others.insert(min(position, len(others)), wanted)
        return others
    return [*others, wanted]


def remove_entry(
    entries: Sequence[Mapping[str, Any]], *, me: Identity, store: Store
) -> list[dict[str, Any]] | None:
    """The entry list without this daemon's entry, or None when it holds none.

    NB: only an entry with this daemon's IP: when a replacement pod on the same node already
    took the entry over, the old pod's SIGTERM must not remove it.
    """
    key = store.node_key

    def mine(item: Mapping[str, Any]) -> bool:
        return item.get(key) == me.node_name and item.get("ipAddress") == me.ip_address

    if not any(mine(item) for item in entries):
        return None
    return [dict(item) for item in entries if not mine(item)]


def pod_owner_reference(me: Identity) -> dict[str, Any] | None:
    """This daemon's pod as an ownerReference of its clique, or None when the pod is unknown.

    As upstream: apiVersion v1, kind Pod, name and uid; not the controller of the clique and
    no blockOwnerDeletion (deleting a pod must never wait for its clique).
    """
    if not (me.pod_name and me.pod_uid):
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": me.pod_name, "uid": me.pod_uid}


def owners_with(owners: Sequence[Any], *, me: Identity) -> list[Any] | None:
    """The clique's `metadata.ownerReferences` with this daemon's pod added, or None when no
    write is needed (already listed by uid, or the pod is unknown).

    Every other owner (the other daemons' pods) is kept as it was: a merge patch replaces the
    whole list, so the caller writes it conditioned on the resourceVersion it read.

    NB: a daemon never removes its own reference. Left with no owners at all, the clique would
    never be collected; the garbage collector drops a reference to a pod that is gone (or, with
    the last one gone, deletes the clique).
    """
    mine = pod_owner_reference(me)
    if mine is None:
        return None
    if any(isinstance(ref, Mapping) and ref.get("uid") == me.pod_uid for ref in owners):
        return None
    return [*(dict(ref) if isinstance(ref, Mapping) else ref for ref in owners), mine]


def owners_of(obj: Mapping[str, Any]) -> list[Any]:
    """The raw `metadata.ownerReferences` of an object (empty when absent or malformed)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return list(refs) if isinstance(refs, list) else []


def entries_patch(entries: Sequence[Mapping[str, Any]], *, store: Store) -> dict[str, Any]:
    """The JSON merge patch that replaces the whole entry list (lists merge as a whole)."""
    body = [dict(item) for item in entries]
    if store is Store.CLIQUE:
        return {"daemons": body}
    return {"status": {"nodes": body}}


def _index_of(item: Mapping[str, Any]) -> int | None:
    index = item.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        return None
    return index
