"""The core action executor and the ResourceSlice publisher, against the fake cluster port."""

from __future__ import annotations

from typing import Any

import kube_fake_cluster
import pytest

from adapters import nvml
from adapters.kube import slices
from core import errors, executing, models, names
from core.gpu import partitions

DRIVER = names.DRIVER_NAME


def _device(index: int) -> dict[str, Any]:
    return {
        "name": names.channel_device_name(index),
        "attributes": {"type": {"string": "channel"}, "id": {"int": index}},
    }


def test_executor_applies_actions_in_order() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    ref = models.ObjectRef(kind="ComputeDomain", name="cd", namespace="ns")
    executing.execute_cluster_actions(
        cluster,
        (
            models.CreateObject(kind="Lease", obj={"metadata": {"name": "x", "namespace": "ns"}}),
            models.PatchObject(kind="Lease", namespace="ns", name="x", patch={"spec": {"a": 1}}),
            models.EmitEvent(involved=ref, reason="Created", message="m", warning=False),
            models.DeleteObject(kind="Lease", namespace="ns", name="x"),
        ),
    )
    assert cluster.calls == ["create Lease", "patch Lease x", "delete Lease x"]
    assert cluster.events == [
        {"involved": ref, "reason": "Created", "message": "m", "warning": False}
    ]
    assert cluster.objects == {}


def test_executor_is_idempotent_for_create_and_delete() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    actions = (
        models.CreateObject(kind="Lease", obj={"metadata": {"name": "x", "namespace": "ns"}}),
        models.DeleteObject(kind="Lease", namespace="ns", name="gone"),
    )
    executing.execute_cluster_actions(cluster, actions)
    executing.execute_cluster_actions(cluster, actions)
    assert list(cluster.objects) == [("Lease", "ns", "x")]


def test_executor_propagates_conflicts_and_stops() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    cluster.create("Lease", {"metadata": {"name": "x", "namespace": "ns"}})
    with pytest.raises(errors.ConflictError):
        executing.execute_cluster_actions(
            cluster,
            (
                models.PatchObject(
                    kind="Lease", namespace="ns", name="x", patch={}, resource_version="1"
                ),
                models.DeleteObject(kind="Lease", namespace="ns", name="x"),
            ),
        )
    assert ("Lease", "ns", "x") in cluster.objects


def test_executor_propagates_patch_of_missing_object() -> None:
    with pytest.raises(errors.NotFoundError):
        executing.execute_cluster_actions(
            kube_fake_cluster.FakeCluster(),
            (models.PatchObject(kind="Lease", namespace="ns", name="x", patch={}),),
        )


def _pool(cluster: kube_fake_cluster.FakeCluster, node: str) -> list[dict[str, Any]]:
    return [
        obj
        for (kind, _, _), obj in sorted(cluster.objects.items())
        if kind == "ResourceSlice" and obj["spec"]["nodeName"] == node
    ]


def test_publisher_creates_the_pool_at_generation_one() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1").publish([_device(0)])
    (only,) = _pool(cluster, "node-1")
    assert only["spec"]["pool"] == {"name": "node-1", "generation": 1, "resourceSliceCount": 1}
    assert only["spec"]["devices"] == [_device(0)]


def test_publisher_is_a_no_op_when_content_is_unchanged() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1")
    publisher.publish([_device(0)])
    writes = [c for c in cluster.calls if not c.startswith(("get", "list"))]
    publisher.publish([_device(0)])
    assert [c for c in cluster.calls if not c.startswith(("get", "list"))] == writes
    assert _pool(cluster, "node-1")[0]["spec"]["pool"]["generation"] == 1


def test_publisher_bumps_generation_when_content_changes_and_splits_at_128() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1")
    publisher.publish([_device(0)])
    publisher.publish([_device(i) for i in range(130)])
    pool = _pool(cluster, "node-1")
    assert [len(s["spec"]["devices"]) for s in pool] == [128, 2]
    assert {s["spec"]["pool"]["generation"] for s in pool} == {2}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in pool} == {2}
    publisher.publish([_device(0)])
    pool = _pool(cluster, "node-1")
    assert len(pool) == 1
    assert pool[0]["spec"]["pool"]["generation"] == 3


def test_publisher_leaves_other_nodes_and_drivers_alone() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-2").publish([_device(0)])
    slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1").publish(
        [_device(0)]
    )
    slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1").publish([_device(1)])
    assert len([k for k in cluster.objects if k[0] == "ResourceSlice"]) == 3
    assert _pool(cluster, "node-2")[0]["spec"]["devices"] == [_device(0)]


def test_publisher_retries_after_a_conflict() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1")
    publisher.publish([_device(0)])
    cluster.conflicts_to_inject = 1
    publisher.publish([_device(0), _device(1)])
    assert len(_pool(cluster, "node-1")[0]["spec"]["devices"]) == 2


def _node(cluster: kube_fake_cluster.FakeCluster, name: str) -> str:
    created = cluster.create("Node", {"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": name}})
    return str(created["metadata"]["uid"])


def _owner_uids(cluster: kube_fake_cluster.FakeCluster, node: str) -> list[list[str]]:
    return [[ref["uid"] for ref in s["metadata"].get("ownerReferences") or ()]
            for s in _pool(cluster, node)]


def test_published_slices_are_owned_by_the_node_and_go_with_it() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    uid = _node(cluster, "node-1")
    publisher = slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1")
    publisher.publish([_device(i) for i in range(130)])
    assert _owner_uids(cluster, "node-1") == [[uid], [uid]]
    (ref,) = _pool(cluster, "node-1")[0]["metadata"]["ownerReferences"]
    assert ref == {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": uid,
                   "controller": True}

    cluster.delete("Node", namespace="", name="node-1")
    assert _pool(cluster, "node-1") == [], "the garbage collector deletes them with the Node"

    # The node registers again (a new UID): the next publish makes slices it owns.
    again = _node(cluster, "node-1")
    publisher.publish([_device(0)])
    assert _owner_uids(cluster, "node-1") == [[again]]


def test_slices_published_before_the_node_existed_get_their_owner_on_the_next_publish() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = slices.SlicePublisher(cluster, driver=DRIVER, node_name="node-1")
    publisher.publish([_device(0)])
    assert _owner_uids(cluster, "node-1") == [[]]
    uid = _node(cluster, "node-1")
    publisher.publish([_device(0)])
    assert _owner_uids(cluster, "node-1") == [[uid]]
    (only,) = _pool(cluster, "node-1")
    assert only["spec"]["devices"] == [_device(0)]


def _partitioned(layout: partitions.SliceLayout) -> slices.SliceBuilder:
    contents = partitions.plan_partitioned_slices(
        nvml.simulated_gpus("hgx-h100").gpu_inventory(), layout=layout
    )
    return lambda generation, node_uid: partitions.build_partitioned_slices(
        contents, node_name="node-1", generation=generation, node_uid=node_uid
    )


def test_publisher_publishes_a_counters_only_slice_without_devices() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    publisher.publish_built(_partitioned(partitions.SliceLayout.SPLIT))
    pool = _pool(cluster, "node-1")
    assert len(pool) == 9  # the counter sets, then one slice per GPU
    first = pool[0]["spec"]
    assert "devices" not in first and len(first["sharedCounters"]) == 8
    assert all("sharedCounters" not in s["spec"] for s in pool[1:])
    assert {s["spec"]["pool"]["generation"] for s in pool} == {1}
    publisher.publish_built(_partitioned(partitions.SliceLayout.SPLIT))
    assert {s["spec"]["pool"]["generation"] for s in _pool(cluster, "node-1")} == {1}


def test_publisher_publishes_counters_beside_their_devices_for_1_34() -> None:
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.34.4")
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    publisher.publish_built(_partitioned(partitions.SliceLayout.COMBINED))
    pool = _pool(cluster, "node-1")
    assert len(pool) == 8
    assert all(len(s["spec"]["sharedCounters"]) == 1 and s["spec"]["devices"] for s in pool)


def test_a_1_35_cluster_refuses_counters_beside_devices_as_the_real_one_does() -> None:
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.35.2")
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    with pytest.raises(errors.ClusterError, match=r"may not be set together with spec\.devices"):
        publisher.publish_built(_partitioned(partitions.SliceLayout.COMBINED))
    publisher.publish_built(_partitioned(partitions.SliceLayout.SPLIT))
    (counters, *_) = _pool(cluster, "node-1")
    with pytest.raises(errors.ClusterError, match="may not be set together"):
        cluster.patch(
            "ResourceSlice", namespace="", name=counters["metadata"]["name"],
            patch={"spec": {"devices": [_device(0)]}},
        )


def test_a_layout_change_removes_what_the_new_slices_do_not_hold() -> None:
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.35.2")
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    publisher.publish([_device(0)])  # the gate off: devices in slice 0
    publisher.publish_built(_partitioned(partitions.SliceLayout.SPLIT))
    first = _pool(cluster, "node-1")[0]["spec"]
    assert "devices" not in first and first["sharedCounters"]
    publisher.publish([_device(0)])  # the gate off again
    (only,) = _pool(cluster, "node-1")
    assert "sharedCounters" not in only["spec"]
    assert only["spec"]["devices"] == [_device(0)]


XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


def _gpu(name: str, *taints: dict[str, str]) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": {"type": {"string": "gpu"}}}
    if taints:
        device["taints"] = list(taints)
    return device


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def _writes(cluster: kube_fake_cluster.FakeCluster) -> list[str]:
    return [c for c in cluster.calls if not c.startswith(("get", "list"))]


def test_published_taints_are_not_written_again_for_the_time_the_server_added() -> None:
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.34.4")
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1")])
    (stored,) = _pool(cluster, "node-1")
    # What kube-apiserver adds to a taint (the embedded one does not).
    devices = stored["spec"]["devices"]
    devices[0]["taints"] = [{**XID, "timeAdded": "2026-11-26T08:18:35Z"}]
    cluster.patch("ResourceSlice", namespace="", name=stored["metadata"]["name"],
                  patch={"spec": {"devices": devices}})
    writes = _writes(cluster)
    publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1")])
    assert _writes(cluster) == writes


def test_taints_the_server_drops_are_reported_and_not_rewritten_every_resync(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server without gate DRADeviceTaints (off by default in Kubernetes 1.34 and 1.35)
    drops `devices[].taints`: said once as an error naming the gate, as upstream's slice
    controller does (DroppedFieldsError), and not patched again (with a new pool generation)
    at every resync while the taints stay the same; new taints are tried again."""
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.34.4", device_taints=False)
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    with caplog.at_level("ERROR"):
        publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1")])
    (dropped,) = _errors(caplog)
    assert "event=resource_slice_taints_dropped" in dropped
    assert "devices=gpu-0" in dropped and "DRADeviceTaints" in dropped
    writes = _writes(cluster)
    caplog.clear()
    for _ in range(3):  # resyncs
        publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1")])
    assert _writes(cluster) == writes
    assert _pool(cluster, "node-1")[0]["spec"]["pool"]["generation"] == 1
    assert not _errors(caplog)
    lost = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    with caplog.at_level("ERROR"):
        publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1", lost)])
    assert len(_writes(cluster)) == len(writes) + 1
    (again,) = _errors(caplog)
    assert "devices=gpu-0,gpu-1" in again
    # A change besides the taints is still published (without them, and without a new error).
    caplog.clear()
    with caplog.at_level("ERROR"):
        publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1", lost), _gpu("gpu-2")])
    assert [d["name"] for d in _pool(cluster, "node-1")[0]["spec"]["devices"]] == [
        "gpu-0", "gpu-1", "gpu-2"]
    assert not _errors(caplog)
    # Taints lifted, then back: tried (and reported) again.
    publisher.publish([_gpu("gpu-0"), _gpu("gpu-1"), _gpu("gpu-2")])
    writes = _writes(cluster)
    with caplog.at_level("ERROR"):
        publisher.publish([_gpu("gpu-0", XID), _gpu("gpu-1"), _gpu("gpu-2")])
    assert len(_writes(cluster)) == len(writes) + 1
    (third,) = _errors(caplog)
    assert "devices=gpu-0 " in third


def test_taints_the_server_keeps_log_no_error(caplog: pytest.LogCaptureFixture) -> None:
    cluster = kube_fake_cluster.FakeCluster(server_version="v1.34.4")
    publisher = slices.SlicePublisher(cluster, driver="gpu.nvidia.com", node_name="node-1")
    with caplog.at_level("ERROR"):
        publisher.publish([_gpu("gpu-0", XID)])
    assert not _errors(caplog)
    assert _pool(cluster, "node-1")[0]["spec"]["devices"][0]["taints"][0]["key"] == XID["key"]
