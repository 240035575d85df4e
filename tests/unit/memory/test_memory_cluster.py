"""Embedded-cluster behaviour beyond the shared port contract: hooks, GC, history, events."""

from __future__ import annotations

import datetime
import itertools

import pytest

from adapters.memory import cluster as memory_cluster
from core import errors, models, names, ports

NOW = datetime.datetime(2025, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _cluster(**kwargs: object) -> memory_cluster.InMemoryCluster:
    return memory_cluster.InMemoryCluster(clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


def _lease(name: str, namespace: str = "ns", **meta: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace, **meta}}


def test_in_memory_cluster_implements_the_cluster_port() -> None:
    port: ports.Cluster = memory_cluster.InMemoryCluster()

    assert port.list("Lease").items == ()


def test_create_uses_the_injected_clock_and_uid_factory() -> None:
    uids = iter(["uid-1", "uid-2"])
    cluster = _cluster(uid_factory=lambda: next(uids))

    created = cluster.create("Lease", _lease("a"))

    assert created["metadata"]["uid"] == "uid-1"
    assert created["metadata"]["creationTimestamp"] == "2025-06-01T12:00:00Z"
    assert created["apiVersion"] == "coordination.k8s.io/v1"
    assert created["kind"] == "Lease"


def test_create_rejects_an_object_carrying_a_resource_version() -> None:
    cluster = _cluster()

    with pytest.raises(errors.ClusterError, match="resourceVersion must not be set"):
        cluster.create("Lease", _lease("a", resourceVersion="5"))


def test_create_with_generate_name_appends_a_random_suffix() -> None:
    cluster = _cluster(seed=1)

    first = cluster.create("Lease", {"metadata": {"generateName": "pod-ch-", "namespace": "ns"}})
    second = cluster.create("Lease", {"metadata": {"generateName": "pod-ch-", "namespace": "ns"}})

    assert first["metadata"]["name"].startswith("pod-ch-")
    assert len(first["metadata"]["name"]) == len("pod-ch-") + 5
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_create_without_namespace_defaults_to_default_and_cluster_scoped_kinds_have_none() -> None:
    cluster = _cluster()

    pod = cluster.create("Pod", {"metadata": {"name": "p"}})
    node = cluster.create("Node", {"metadata": {"name": "n1", "namespace": "ignored"}})

    assert pod["metadata"]["namespace"] == "default"
    assert "namespace" not in node["metadata"]
    assert cluster.get("Node", namespace="anything", name="n1")["metadata"]["name"] == "n1"


def test_create_discards_status_of_kinds_with_a_status_subresource() -> None:
    cluster = _cluster()

    claim = cluster.create(
        "ResourceClaim", {"metadata": {"name": "c", "namespace": "ns"}, "status": {"x": 1}}
    )
    pod = cluster.create("Pod", {"metadata": {"name": "p"}, "status": {"phase": "Running"}})
    clique = cluster.create(
        names.KIND_COMPUTE_DOMAIN_CLIQUE, {"metadata": {"name": "q", "namespace": "ns"}}
    )

    assert "status" not in claim
    assert pod["status"] == {"phase": "Pending"}
    assert "status" not in clique


def test_status_patch_on_a_kind_without_status_subresource_is_not_found() -> None:
    cluster = _cluster()
    cluster.create("Lease", _lease("a"))

    with pytest.raises(errors.NotFoundError, match="no status subresource"):
        cluster.patch("Lease", namespace="ns", name="a", patch={"status": {}}, subresource="status")


def test_injected_conflicts_fail_the_next_patches_then_stop() -> None:
    cluster = _cluster()
    cluster.create("Lease", _lease("a"))
    cluster.set_conflict_injection(2)
    patch = {"spec": {"holderIdentity": "me"}}

    for _ in range(2):
        with pytest.raises(errors.ConflictError, match="injected"):
            cluster.patch("Lease", namespace="ns", name="a", patch=patch)
    patched = cluster.patch("Lease", namespace="ns", name="a", patch=patch)

    assert patched["spec"] == {"holderIdentity": "me"}


def test_resource_version_in_the_patch_body_is_a_precondition() -> None:
    cluster = _cluster()
    created = cluster.create("Lease", _lease("a"))
    cluster.patch("Lease", namespace="ns", name="a", patch={"spec": {"holderIdentity": "x"}})

    with pytest.raises(errors.ConflictError):
        cluster.patch(
            "Lease",
            namespace="ns",
            name="a",
            patch={"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}},
        )


def test_a_patch_that_changes_nothing_keeps_the_resource_version() -> None:
    cluster = _cluster()
    created = cluster.create("Lease", _lease("a", labels={"x": "1"}))

    patched = cluster.patch(
        "Lease", namespace="ns", name="a", patch={"metadata": {"labels": {"x": "1"}}}
    )

    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_patch_cannot_change_identity_fields() -> None:
    cluster = _cluster()
    created = cluster.create("Lease", _lease("a"))

    patched = cluster.patch(
        "Lease",
        namespace="ns",
        name="a",
        patch={
            "metadata": {"uid": "other", "name": "b", "deletionTimestamp": "2020-01-01T00:00:00Z"}
        },
    )

    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    assert patched["metadata"]["name"] == "a"
    assert "deletionTimestamp" not in patched["metadata"]


def test_spec_change_bumps_generation() -> None:
    cluster = _cluster()
    cluster.create("Lease", _lease("a"))

    patched = cluster.patch("Lease", namespace="ns", name="a", patch={"spec": {"x": 1}})

    assert patched["metadata"]["generation"] == 2


def test_a_deleting_object_accepts_no_new_finalizers() -> None:
    cluster = _cluster()
    cluster.create("Lease", _lease("a", finalizers=["f1"]))
    cluster.delete("Lease", namespace="ns", name="a")

    with pytest.raises(errors.ClusterError, match="no new finalizers"):
        cluster.patch(
            "Lease", namespace="ns", name="a", patch={"metadata": {"finalizers": ["f1", "f2"]}}
        )


def test_deleting_an_owner_garbage_collects_its_dependents() -> None:
    cluster = _cluster()
    owner = cluster.create("Pod", {"metadata": {"name": "p", "namespace": "ns"}})
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner["metadata"]["uid"]}
    cluster.create("ResourceClaim", {"metadata": {"name": "c", "namespace": "ns",
                                                  "ownerReferences": [ref]}})
    cluster.create("Lease", _lease("guarded", ownerReferences=[ref], finalizers=["keep"]))

    cluster.delete("Pod", namespace="ns", name="p")

    with pytest.raises(errors.NotFoundError):
        cluster.get("ResourceClaim", namespace="ns", name="c")
    guarded = cluster.get("Lease", namespace="ns", name="guarded")
    assert guarded["metadata"]["deletionTimestamp"] == "2025-06-01T12:00:00Z"


def test_a_dependent_with_a_surviving_owner_is_kept() -> None:
    cluster = _cluster()
    a = cluster.create("Lease", _lease("a"))
    b = cluster.create("Lease", _lease("b"))
    refs = [{"uid": a["metadata"]["uid"]}, {"uid": b["metadata"]["uid"]}]
    cluster.create("Lease", _lease("dep", ownerReferences=refs))

    cluster.delete("Lease", namespace="ns", name="a")

    assert cluster.get("Lease", namespace="ns", name="dep")


def test_watch_from_zero_starts_with_synthetic_added_events_for_existing_objects() -> None:
    cluster = _cluster()
    cluster.create("Lease", _lease("b"))
    cluster.create("Lease", _lease("a"))

    events = list(cluster.watch("Lease", resource_version="0", timeout_s=0))

    assert [(e.type, e.obj["metadata"]["name"]) for e in events] == [
        (ports.WatchEventType.ADDED, "a"),
        (ports.WatchEventType.ADDED, "b"),
    ]


def test_watch_ends_when_the_timeout_passes_without_events() -> None:
    cluster = _cluster()
    start = cluster.list("Lease").resource_version

    assert list(cluster.watch("Lease", resource_version=start, timeout_s=0.05)) == []


def test_watch_raises_gone_when_it_falls_behind_the_history() -> None:
    cluster = _cluster(history_size=3)
    start = cluster.list("Lease").resource_version
    cluster.create("Lease", _lease("a"))
    stream = cluster.watch("Lease", resource_version=start, timeout_s=1)
    first = next(stream)
    for i in range(5):
        cluster.patch("Lease", namespace="ns", name="a", patch={"spec": {"n": i}})
    # the stream buffered nothing beyond the first event; the rest was evicted meanwhile
    assert first.type == ports.WatchEventType.ADDED

    with pytest.raises(errors.GoneError, match="list again"):
        list(itertools.islice(stream, 10))


def test_watch_rejects_a_malformed_resource_version() -> None:
    cluster = _cluster()

    with pytest.raises(errors.ClusterError, match="not valid"):
        cluster.watch("Lease", resource_version="abc", timeout_s=0)


def test_close_ends_open_watches() -> None:
    cluster = _cluster()
    start = cluster.list("Lease").resource_version
    cluster.close()

    assert list(cluster.watch("Lease", resource_version=start, timeout_s=30)) == []


def test_repeated_events_are_aggregated_with_a_count() -> None:
    cluster = _cluster()
    ref = models.ObjectRef(kind="ResourceClaim", name="c", namespace="ns", uid="u")

    cluster.emit_event(involved=ref, reason="PrepareFailed", message="boom")
    cluster.emit_event(involved=ref, reason="PrepareFailed", message="boom")
    cluster.emit_event(involved=ref, reason="Prepared", message="ok", warning=False)

    events = {e["reason"]: e for e in cluster.list("Event", namespace="ns").items}
    assert events["PrepareFailed"]["count"] == 2
    assert events["PrepareFailed"]["type"] == "Warning"
    assert events["Prepared"]["type"] == "Normal"
    assert events["Prepared"]["involvedObject"]["apiVersion"] == "resource.k8s.io/v1"


def test_events_about_cluster_scoped_objects_go_to_the_default_namespace() -> None:
    cluster = _cluster()

    cluster.emit_event(involved=models.ObjectRef(kind="Node", name="n1"), reason="R", message="m")

    assert [e["reason"] for e in cluster.list("Event", namespace="default").items] == ["R"]


def test_compact_ends_open_watches_and_refuses_older_versions_but_not_a_fresh_list() -> None:
    cluster = _cluster()
    before = cluster.list("Lease").resource_version
    cluster.create("Lease", _lease("a"))
    open_watch = cluster.watch("Lease", resource_version=before, timeout_s=5)

    cluster.compact()

    with pytest.raises(errors.GoneError, match="compacted"):
        next(open_watch)
    with pytest.raises(errors.GoneError, match="too old"):
        cluster.watch("Lease", resource_version=before, timeout_s=0)
    fresh = cluster.list("Lease").resource_version
    cluster.create("Lease", _lease("b"))
    events = cluster.watch("Lease", resource_version=fresh, timeout_s=5)
    assert next(events).obj["metadata"]["name"] == "b"


def test_update_replaces_the_object_but_not_its_identity_or_status() -> None:
    cluster = _cluster()
    created = cluster.create("Pod", {"metadata": {"name": "p", "namespace": "ns",
                                                  "labels": {"old": "1"}}, "spec": {"a": 1}})
    cluster.patch("Pod", namespace="ns", name="p", subresource="status",
                  patch={"status": {"phase": "Running"}})

    updated = cluster.update("Pod", namespace="ns", name="p", obj={
        "metadata": {"name": "p", "labels": {"new": "1"}, "uid": "forged"},
        "spec": {"b": 2}, "status": {"phase": "Failed"}})

    assert updated["metadata"]["labels"] == {"new": "1"}
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["spec"] == {"b": 2}
    assert updated["status"] == {"phase": "Running"}
    assert (updated["kind"], updated["metadata"]["generation"]) == ("Pod", 2)


def test_update_with_a_stale_resource_version_is_a_conflict() -> None:
    cluster = _cluster()
    created = cluster.create("Lease", _lease("a"))
    cluster.patch("Lease", namespace="ns", name="a", patch={"spec": {"n": 1}})

    with pytest.raises(errors.ConflictError):
        cluster.update("Lease", namespace="ns", name="a", obj=created)
    with pytest.raises(errors.NotFoundError):
        cluster.update("Lease", namespace="ns", name="gone", obj=_lease("gone"))


@pytest.mark.parametrize("kind", sorted(memory_cluster.IMMUTABLE_SPEC_KINDS))
def test_the_spec_of_claims_and_templates_cannot_change(kind: str) -> None:
    cluster = _cluster()
    cluster.create(kind, {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"a": 1}})

    labelled = cluster.patch(kind, namespace="ns", name="c",
                             patch={"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(errors.ClusterError, match="field is immutable"):
        cluster.patch(kind, namespace="ns", name="c", patch={"spec": {"a": 2}})
    with pytest.raises(errors.ClusterError, match="field is immutable"):
        cluster.update(kind, namespace="ns", name="c", obj={**labelled, "spec": {}})
    assert labelled["metadata"]["labels"] == {"x": "y"}
