"""Index claiming and entry edits of `core.computedomain.membership` (pure).

Covers: the lowest free index per clique, gap filling, a restarted daemon keeping its index,
a clashing index re-claimed, no-op detection, other entries passed through untouched, removal,
both stores' shapes, the clear error when a clique is full, the daemon pod's ownerReference
merged into the clique's owners, and (hypothesis) that any
interleaving of joins and leaves keeps indexes unique within a clique and stable per node.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import errors, models
from core.computedomain import membership

CLIQUE = membership.Store.CLIQUE
STATUS = membership.Store.STATUS
READY = models.DomainStatus.READY
NOT_READY = models.DomainStatus.NOT_READY


def _me(node: str, ip: str = "10.0.0.1", clique: str = "c.1") -> membership.Identity:
    return membership.Identity(node_name=node, ip_address=ip, clique_id=clique)


def _entry(node: str, index: int, clique: str = "c.1", **extra: Any) -> dict[str, Any]:
    return {"nodeName": node, "ipAddress": f"10.1.0.{index}", "cliqueID": clique,
            "index": index, "status": "NotReady", **extra}


def _upsert(entries: list[dict[str, Any]], me: membership.Identity, *,
            status: models.DomainStatus = NOT_READY, max_nodes: int = 18,
            store: membership.Store = CLIQUE) -> list[dict[str, Any]] | None:
    return membership.upsert_entry(entries, me=me, status=status, store=store,
                                   max_nodes=max_nodes)


def test_first_daemon_takes_index_zero() -> None:
    assert _upsert([], _me("n1")) == [
        {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0,
         "status": "NotReady"}
    ]


def test_a_new_daemon_fills_the_lowest_gap() -> None:
    result = _upsert([_entry("a", 0), _entry("b", 2)], _me("n"))
    assert result is not None
    assert [e["index"] for e in result] == [0, 2, 1]


def test_indexes_are_counted_per_clique() -> None:
    status_entries = [{"name": "a", "ipAddress": "x", "cliqueID": "c.2", "index": 0}]
    result = _upsert(status_entries, _me("n"), store=STATUS)
    assert result is not None
    assert result[-1] == {"name": "n", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0,
                          "status": "NotReady"}


def test_a_restarted_daemon_keeps_its_index_and_only_its_ip_and_status_change() -> None:
    entries = [_entry("a", 0), _entry("n", 5), _entry("b", 1)]
    result = _upsert(entries, _me("n", ip="10.9.9.9"), status=READY)
    assert result is not None
    assert result[1] == {"nodeName": "n", "ipAddress": "10.9.9.9", "cliqueID": "c.1",
                         "index": 5, "status": "Ready"}
    assert result[0] == entries[0] and result[2] == entries[2]


def test_an_entry_already_current_needs_no_write() -> None:
    entries = [{"nodeName": "n", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 3,
                "status": "Ready"}]
    assert _upsert(entries, _me("n"), status=READY) is None


def test_a_clashing_index_is_reclaimed_so_no_two_daemons_share_a_name() -> None:
    result = _upsert([_entry("a", 0), _entry("n", 0)], _me("n"))
    assert result is not None
    assert sorted(e["index"] for e in result) == [0, 1]


def test_fields_a_newer_writer_added_survive() -> None:
    entries = [_entry("a", 0, future="kept"), _entry("n", 1, alsoFuture=1)]
    result = _upsert(entries, _me("n"), status=READY)
    assert result is not None
    assert result[0]["future"] == "kept"
    assert result[1]["alsoFuture"] == 1


def test_a_full_clique_is_a_permanent_error_naming_the_setting() -> None:
    entries = [_entry(f"n{i}", i) for i in range(2)]
    with pytest.raises(errors.PermanentError, match="MAX_NODES_PER_IMEX_DOMAIN"):
        _upsert(entries, _me("new"), max_nodes=2)


def test_remove_drops_only_this_daemon_and_is_a_no_op_when_absent() -> None:
    entries = [_entry("a", 0), _entry("n", 1)]
    me = _me("n", ip="10.1.0.1")
    assert membership.remove_entry(entries, me=me, store=CLIQUE) == [_entry("a", 0)]
    assert membership.remove_entry([_entry("a", 0)], me=me, store=CLIQUE) is None


def test_a_terminating_old_pod_leaves_the_entry_its_replacement_took_over() -> None:
    # The replacement on node n rewrote the entry with its own IP before the old pod stopped.
    entries = [_entry("n", 1)]  # ipAddress 10.1.0.1: the replacement's
    old_pod = _me("n", ip="10.9.9.9")
    assert membership.remove_entry(entries, me=old_pod, store=CLIQUE) is None


def test_patches_replace_the_list_where_each_store_keeps_it() -> None:
    assert membership.entries_patch([_entry("a", 0)], store=CLIQUE) == {
        "daemons": [_entry("a", 0)]}
    assert membership.entries_patch([], store=STATUS) == {"status": {"nodes": []}}


def test_peers_decode_both_stores_and_skip_malformed_entries() -> None:
    clique = {"daemons": [_entry("b", 1), {"index": 2}, _entry("a", 0), "junk",
                          {"nodeName": "x", "index": True}]}
    assert [p.node_name for p in membership.peers_of(
        membership.entries_of(clique, store=CLIQUE), store=CLIQUE)] == ["a", "b"]
    cd = {"status": {"nodes": [{"name": "n", "ipAddress": "1.2.3.4", "cliqueID": "c",
                                "index": 0, "status": "Ready"}]}}
    (peer,) = membership.peers_of(membership.entries_of(cd, store=STATUS), store=STATUS)
    assert peer == membership.Peer(node_name="n", ip_address="1.2.3.4", clique_id="c", index=0,
                                   status=READY)


def test_clique_object_name_is_cd_uid_dot_clique_id() -> None:
    assert membership.clique_object_name("uid-1", "abc.7") == "uid-1.abc.7"


_ops = st.lists(
    st.tuples(st.sampled_from(["join", "leave"]), st.integers(0, 7), st.sampled_from(["c.1",
                                                                                      "c.2"])),
    max_size=40,
)


@given(_ops)
def test_any_interleaving_keeps_indexes_unique_per_clique_and_stable_per_node(ops) -> None:
    entries: list[dict[str, Any]] = []
    held: dict[str, int] = {}
    for op, n, clique in ops:
        node = f"{clique}-n{n}"
        if op == "join":
            result = _upsert(entries, _me(node, clique=clique))
            entries = entries if result is None else result
            index = next(e["index"] for e in entries if e["nodeName"] == node)
            if node in held:
                assert index == held[node]  # rejoining while present keeps the index
            held[node] = index
        else:
            result = membership.remove_entry(entries, me=_me(node, clique=clique), store=CLIQUE)
            entries = entries if result is None else result
            held.pop(node, None)
        for c in ("c.1", "c.2"):
            indexes = [e["index"] for e in entries if e["cliqueID"] == c]
            assert len(indexes) == len(set(indexes))


def _pod_me(uid: str = "pod-uid-1", name: str = "imex-n1") -> membership.Identity:
    return membership.Identity(node_name="n1", ip_address="10.0.0.1", clique_id="c.1",
                               pod_name=name, pod_uid=uid)


def test_the_daemon_pod_is_added_to_the_clique_owners_keeping_every_other_owner() -> None:
    other = {"apiVersion": "v1", "kind": "Pod", "name": "imex-n2", "uid": "pod-uid-2",
             "extra": "kept"}
    assert membership.owners_with([other], me=_pod_me()) == [
        other, {"apiVersion": "v1", "kind": "Pod", "name": "imex-n1", "uid": "pod-uid-1"}]


def test_an_owner_already_listed_by_uid_needs_no_write_and_an_unknown_pod_adds_none() -> None:
    listed = [{"apiVersion": "v1", "kind": "Pod", "name": "renamed", "uid": "pod-uid-1"}]
    assert membership.owners_with(listed, me=_pod_me()) is None
    assert membership.owners_with([], me=_me("n1")) is None
    assert membership.pod_owner_reference(_me("n1")) is None


def test_the_owner_reference_is_upstreams_plain_pod_reference() -> None:
    ref = membership.pod_owner_reference(_pod_me())
    assert ref == {"apiVersion": "v1", "kind": "Pod", "name": "imex-n1", "uid": "pod-uid-1"}


def test_owners_of_reads_the_raw_list_tolerantly() -> None:
    assert membership.owners_of({}) == []
    assert membership.owners_of({"metadata": {"ownerReferences": "junk"}}) == []
    refs = [{"uid": "a"}]
    assert membership.owners_of({"metadata": {"ownerReferences": refs}}) == refs
