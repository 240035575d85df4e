"""The Cluster port contract: what every implementation (embedded or real) must do alike.

Parametrized over the `cluster` fixture (see conftest.py) so the embedded cluster cannot drift
from the real API server. Assertions avoid details a real server adds (CRD defaults, managed
fields) and poll where a real server is asynchronous (events).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

from core import errors, models, names, ports

CD = names.KIND_COMPUTE_DOMAIN
CLIQUE = names.KIND_COMPUTE_DOMAIN_CLIQUE
MakeCD = Callable[..., dict[str, Any]]


def _eventually(check: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.05)


def _clique(name: str, namespace: str, daemons: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": CLIQUE,
        "metadata": {"name": name, "namespace": namespace},
        "daemons": daemons,
    }


def _daemon(node: str, ip: str) -> dict[str, Any]:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": "c1", "status": "NotReady"}


def test_create_assigns_uid_resource_version_and_creation_timestamp(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    created = cluster.create(CD, make_compute_domain("cd-a", namespace))

    meta = created["metadata"]
    assert meta["uid"]
    assert int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert meta["namespace"] == namespace


def test_get_returns_the_created_object(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    created = cluster.create(CD, make_compute_domain("cd-a", namespace, labels={"team": "x"}))

    got = cluster.get(CD, namespace=namespace, name="cd-a")

    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["labels"] == {"team": "x"}
    assert got["spec"]["channel"]["resourceClaimTemplate"]["name"] == "cd-a-rct"


def test_get_of_missing_object_raises_not_found(cluster: ports.Cluster, namespace: str) -> None:
    with pytest.raises(errors.NotFoundError):
        cluster.get(CD, namespace=namespace, name="absent")


def test_create_of_existing_name_raises_already_exists(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("cd-a", namespace))

    with pytest.raises(errors.AlreadyExistsError):
        cluster.create(CD, make_compute_domain("cd-a", namespace))


def test_returned_objects_are_copies_callers_cannot_mutate_storage(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    created = cluster.create(CD, make_compute_domain("cd-a", namespace))
    created["metadata"]["labels"] = {"mutated": "yes"}
    got = cluster.get(CD, namespace=namespace, name="cd-a")
    got["spec"]["numNodes"] = 99

    again = cluster.get(CD, namespace=namespace, name="cd-a")

    assert "labels" not in again["metadata"] or "mutated" not in again["metadata"]["labels"]
    assert again["spec"]["numNodes"] == 0


def test_list_filters_by_namespace_and_equality_label_selector(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    other = f"{namespace}-other"
    cluster.create(CD, make_compute_domain("a", namespace, labels={"app": "x", "tier": "1"}))
    cluster.create(CD, make_compute_domain("b", namespace, labels={"app": "x", "tier": "2"}))
    cluster.create(CD, make_compute_domain("c", namespace, labels={"app": "y"}))
    cluster.create(CD, make_compute_domain("d", other, labels={"app": "x"}))

    in_namespace = cluster.list(CD, namespace=namespace)
    app_x = cluster.list(CD, namespace=namespace, label_selector={"app": "x"})
    app_x_tier_2 = cluster.list(CD, namespace=namespace, label_selector={"app": "x", "tier": "2"})

    def names_of(result: ports.ListResult) -> list[str]:
        return sorted(o["metadata"]["name"] for o in result.items)

    assert names_of(in_namespace) == ["a", "b", "c"]
    assert names_of(app_x) == ["a", "b"]
    assert names_of(app_x_tier_2) == ["b"]


def test_list_resource_version_is_not_older_than_the_last_write(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    created = cluster.create(CD, make_compute_domain("a", namespace))

    listed = cluster.list(CD, namespace=namespace)

    assert int(listed.resource_version) >= int(created["metadata"]["resourceVersion"])


def test_merge_patch_merges_maps_removes_nulls_and_replaces_lists(
    cluster: ports.Cluster, namespace: str
) -> None:
    cluster.create(
        CLIQUE,
        {
            **_clique("cl", namespace, [_daemon("n1", "10.0.0.1"), _daemon("n2", "10.0.0.2")]),
            "metadata": {
                "name": "cl",
                "namespace": namespace,
                "labels": {"keep": "1", "drop": "1"},
            },
        },
    )

    patched = cluster.patch(
        CLIQUE,
        namespace=namespace,
        name="cl",
        patch={
            "metadata": {"labels": {"drop": None, "add": "2"}},
            "daemons": [_daemon("n3", "10.0.0.3")],
        },
    )

    assert patched["metadata"]["labels"] == {"keep": "1", "add": "2"}
    assert [d["nodeName"] for d in patched["daemons"]] == ["n3"]
    assert cluster.get(CLIQUE, namespace=namespace, name="cl")["daemons"] == patched["daemons"]


def test_patch_bumps_resource_version(cluster: ports.Cluster, namespace: str) -> None:
    created = cluster.create(CLIQUE, _clique("cl", namespace, []))

    patched = cluster.patch(
        CLIQUE, namespace=namespace, name="cl", patch={"metadata": {"labels": {"a": "b"}}}
    )

    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


def test_patch_with_stale_resource_version_raises_conflict(
    cluster: ports.Cluster, namespace: str
) -> None:
    created = cluster.create(CLIQUE, _clique("cl", namespace, []))
    stale = created["metadata"]["resourceVersion"]
    cluster.patch(
        CLIQUE, namespace=namespace, name="cl", patch={"metadata": {"labels": {"a": "1"}}}
    )

    with pytest.raises(errors.ConflictError):
        cluster.patch(
            CLIQUE,
            namespace=namespace,
            name="cl",
            patch={"metadata": {"labels": {"a": "2"}}},
            resource_version=stale,
        )
    assert cluster.get(CLIQUE, namespace=namespace, name="cl")["metadata"]["labels"] == {"a": "1"}


def test_patch_with_current_resource_version_succeeds(
    cluster: ports.Cluster, namespace: str
) -> None:
    created = cluster.create(CLIQUE, _clique("cl", namespace, []))

    patched = cluster.patch(
        CLIQUE,
        namespace=namespace,
        name="cl",
        patch={"metadata": {"labels": {"a": "2"}}},
        resource_version=created["metadata"]["resourceVersion"],
    )

    assert patched["metadata"]["labels"] == {"a": "2"}


def test_patch_of_missing_object_raises_not_found(cluster: ports.Cluster, namespace: str) -> None:
    with pytest.raises(errors.NotFoundError):
        cluster.patch(CLIQUE, namespace=namespace, name="absent", patch={"daemons": []})


def test_delete_without_finalizers_removes_the_object(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("a", namespace))

    cluster.delete(CD, namespace=namespace, name="a")

    with pytest.raises(errors.NotFoundError):
        cluster.get(CD, namespace=namespace, name="a")


def test_delete_of_missing_object_raises_not_found(cluster: ports.Cluster, namespace: str) -> None:
    with pytest.raises(errors.NotFoundError):
        cluster.delete(CD, namespace=namespace, name="absent")


def test_delete_with_finalizer_sets_deletion_timestamp_and_keeps_the_object(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(
        CD, make_compute_domain("a", namespace, finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    )

    cluster.delete(CD, namespace=namespace, name="a")
    first = cluster.get(CD, namespace=namespace, name="a")
    cluster.delete(CD, namespace=namespace, name="a")
    second = cluster.get(CD, namespace=namespace, name="a")

    assert first["metadata"]["deletionTimestamp"]
    assert second["metadata"]["deletionTimestamp"] == first["metadata"]["deletionTimestamp"]
    assert first["metadata"]["finalizers"] == [names.COMPUTE_DOMAIN_FINALIZER]


def test_removing_the_last_finalizer_of_a_deleting_object_removes_it(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(
        CD, make_compute_domain("a", namespace, finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    )
    cluster.delete(CD, namespace=namespace, name="a")

    cluster.patch(CD, namespace=namespace, name="a", patch={"metadata": {"finalizers": None}})

    with pytest.raises(errors.NotFoundError):
        cluster.get(CD, namespace=namespace, name="a")


def test_removing_a_finalizer_of_a_live_object_keeps_it(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(
        CD, make_compute_domain("a", namespace, finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    )

    cluster.patch(CD, namespace=namespace, name="a", patch={"metadata": {"finalizers": None}})

    assert not cluster.get(CD, namespace=namespace, name="a")["metadata"].get("finalizers")


def test_status_subresource_patch_changes_only_status(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("a", namespace))

    patched = cluster.patch(
        CD,
        namespace=namespace,
        name="a",
        patch={"status": {"status": "Ready"}, "metadata": {"labels": {"sneaky": "1"}}},
        subresource="status",
    )

    assert patched["status"]["status"] == "Ready"
    assert "sneaky" not in (patched["metadata"].get("labels") or {})
    assert cluster.get(CD, namespace=namespace, name="a")["status"]["status"] == "Ready"


def test_main_resource_patch_cannot_change_status(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("a", namespace))
    cluster.patch(
        CD, namespace=namespace, name="a", patch={"status": {"status": "NotReady"}},
        subresource="status",
    )

    patched = cluster.patch(
        CD,
        namespace=namespace,
        name="a",
        patch={"status": {"status": "Ready"}, "metadata": {"labels": {"seen": "1"}}},
    )

    assert patched["status"]["status"] == "NotReady"
    assert patched["metadata"]["labels"] == {"seen": "1"}


def test_metadata_patch_keeps_generation_status_patch_too(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("a", namespace))

    cluster.patch(CD, namespace=namespace, name="a", patch={"metadata": {"labels": {"x": "1"}}})
    cluster.patch(
        CD, namespace=namespace, name="a", patch={"status": {"status": "Ready"}},
        subresource="status",
    )

    assert cluster.get(CD, namespace=namespace, name="a")["metadata"]["generation"] == 1


def test_watch_reports_added_modified_deleted_in_order(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    start = cluster.list(CD, namespace=namespace).resource_version
    cluster.create(CD, make_compute_domain("a", namespace))
    cluster.patch(CD, namespace=namespace, name="a", patch={"metadata": {"labels": {"x": "1"}}})
    cluster.delete(CD, namespace=namespace, name="a")

    events = list(
        itertools.islice(
            cluster.watch(CD, namespace=namespace, resource_version=start, timeout_s=10), 3
        )
    )

    assert [e.type for e in events] == [
        ports.WatchEventType.ADDED,
        ports.WatchEventType.MODIFIED,
        ports.WatchEventType.DELETED,
    ]
    assert all(e.obj["metadata"]["name"] == "a" for e in events)
    assert events[1].obj["metadata"]["labels"] == {"x": "1"}
    versions = [int(e.obj["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)


def test_watch_only_reports_the_requested_kind_and_namespace(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    start = cluster.list(CD, namespace=namespace).resource_version
    cluster.create(CD, make_compute_domain("elsewhere", f"{namespace}-other"))
    cluster.create(CLIQUE, _clique("cl", namespace, []))
    cluster.create(CD, make_compute_domain("here", namespace))

    first = next(iter(cluster.watch(CD, namespace=namespace, resource_version=start, timeout_s=10)))

    assert first.type == ports.WatchEventType.ADDED
    assert first.obj["metadata"]["name"] == "here"


def test_list_with_an_exists_selector_needs_only_the_key(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("a", namespace, labels={"owner": "1"}))
    cluster.create(CD, make_compute_domain("b", namespace, labels={"owner": "2", "tier": "x"}))
    cluster.create(CD, make_compute_domain("c", namespace, labels={"tier": "x"}))

    owned = cluster.list(CD, namespace=namespace, label_selector={"owner": None})
    owned_x = cluster.list(CD, namespace=namespace, label_selector={"owner": None, "tier": "x"})

    assert sorted(o["metadata"]["name"] for o in owned.items) == ["a", "b"]
    assert [o["metadata"]["name"] for o in owned_x.items] == ["b"]


def test_watch_with_a_label_selector_streams_only_what_matches(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    # As the API server: an object entering the selection comes as ADDED, one leaving it as
    # DELETED (with its new labels), and nothing of objects that never match.
    start = cluster.list(CD, namespace=namespace).resource_version
    cluster.create(CD, make_compute_domain("foreign", namespace, labels={"app": "y"}))
    cluster.create(CD, make_compute_domain("ours", namespace, labels={"app": "x"}))
    cluster.patch(CD, namespace=namespace, name="foreign", patch={"spec": {"numNodes": 1}})
    cluster.patch(CD, namespace=namespace, name="ours", patch={"metadata": {"labels": {"n": "1"}}})
    cluster.patch(CD, namespace=namespace, name="ours",
                  patch={"metadata": {"labels": {"app": "z"}}})
    cluster.patch(CD, namespace=namespace, name="foreign",
                  patch={"metadata": {"labels": {"app": "x"}}})
    cluster.delete(CD, namespace=namespace, name="foreign")

    events = list(itertools.islice(cluster.watch(
        CD, namespace=namespace, resource_version=start, timeout_s=10,
        label_selector={"app": "x"},
    ), 5))

    assert [(e.type.value, e.obj["metadata"]["name"]) for e in events] == [
        ("ADDED", "ours"), ("MODIFIED", "ours"), ("DELETED", "ours"),
        ("ADDED", "foreign"), ("DELETED", "foreign"),
    ]
    assert events[2].obj["metadata"]["labels"]["app"] == "z"


def test_watch_from_the_start_with_a_selector_lists_only_what_matches(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    cluster.create(CD, make_compute_domain("foreign", namespace))
    cluster.create(CD, make_compute_domain("ours", namespace, labels={"owner": "me"}))

    first = next(iter(cluster.watch(CD, namespace=namespace, resource_version="", timeout_s=10,
                                    label_selector={"owner": None})))

    assert (first.type, first.obj["metadata"]["name"]) == (ports.WatchEventType.ADDED, "ours")


def test_watch_from_an_expired_resource_version_raises_gone(
    harness: Any, cluster: ports.Cluster, namespace: str
) -> None:
    expired = harness.expired_resource_version()

    with pytest.raises(errors.GoneError):
        list(cluster.watch("Lease", namespace=namespace, resource_version=expired, timeout_s=2))


def test_emit_event_records_an_event_about_the_object(
    cluster: ports.Cluster, namespace: str, make_compute_domain: MakeCD
) -> None:
    created = cluster.create(CD, make_compute_domain("a", namespace))
    involved = models.ObjectRef(
        kind=CD,
        name="a",
        namespace=namespace,
        uid=created["metadata"]["uid"],
        api_version=names.GROUP_VERSION,
    )

    cluster.emit_event(
        involved=involved, reason="InvalidMode", message="mode X is not supported", warning=True
    )

    def recorded() -> list[Any]:
        return [
            e
            for e in cluster.list("Event", namespace=namespace).items
            if e.get("reason") == "InvalidMode"
        ]

    _eventually(lambda: bool(recorded()))
    event = recorded()[0]
    assert event["type"] == "Warning"
    assert event["message"] == "mode X is not supported"
    assert event["involvedObject"]["name"] == "a"
    assert event["involvedObject"]["kind"] == CD
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
