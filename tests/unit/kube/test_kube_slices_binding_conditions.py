"""Publishing binding conditions to a server that drops them (gate DRADeviceBindingConditions
off, as the embedded cluster and Kubernetes 1.34/1.35 by default): said once, then the pool
goes out without them at every resync (no rewrite, no new generation), so claims get none
and prepares wait for the IMEX daemon as before."""

from __future__ import annotations

from typing import Any

import kube_fake_cluster
import pytest

from adapters.kube import slices as kube_slices
from core import names, slices
from core.computedomain import binding

DEVICES = (
    binding.with_binding_conditions({"name": "channel-0", "attributes": {
        "type": {"string": "channel"}, "id": {"int": 0}}}),
    {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
)


def _pool(cluster: kube_fake_cluster.FakeCluster) -> list[dict[str, Any]]:
    return [obj for (kind, _, _), obj in sorted(cluster.objects.items())
            if kind == "ResourceSlice"]


def _node(cluster: kube_fake_cluster.FakeCluster) -> None:
    cluster.create("Node", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})


def _writes(cluster: kube_fake_cluster.FakeCluster) -> list[str]:
    return [c for c in cluster.calls if not c.startswith(("get", "list"))]


def test_dropped_binding_conditions_fall_back_to_a_pool_without_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = kube_fake_cluster.FakeCluster()
    _node(cluster)
    publisher = kube_slices.SlicePublisher(cluster, driver=names.DRIVER_NAME,
                                           node_name="node-1")
    with caplog.at_level("WARNING"):
        publisher.publish(DEVICES)
    (said,) = [r.getMessage() for r in caplog.records]
    assert "event=resource_slice_binding_conditions_dropped" in said
    assert "devices=channel-0" in said and "DRADeviceBindingConditions" in said
    assert publisher.binding_conditions_dropped
    writes = _writes(cluster)
    caplog.clear()
    for _ in range(3):  # resyncs
        publisher.publish(DEVICES)
    assert _writes(cluster) == writes
    (stored,) = _pool(cluster)
    assert stored["spec"]["pool"]["generation"] == 1
    assert "bindingConditions" not in stored["spec"]["devices"][0]
    assert not caplog.records


def test_a_pool_without_binding_conditions_is_never_reported() -> None:
    cluster = kube_fake_cluster.FakeCluster()
    publisher = kube_slices.SlicePublisher(cluster, driver=names.DRIVER_NAME,
                                           node_name="node-1")
    publisher.publish(slices.without_binding_conditions(
        [{"spec": {"devices": list(DEVICES)}}])[0]["spec"]["devices"])
    assert not publisher.binding_conditions_dropped


def test_dropped_binding_conditions_name_only_devices_stored_without_them() -> None:
    desired = [{"spec": {"devices": list(DEVICES)}}]
    assert slices.devices_with_binding_conditions(desired) == ("channel-0",)
    assert slices.dropped_binding_conditions(desired, desired) == ()
    assert slices.dropped_binding_conditions(
        desired, slices.without_binding_conditions(desired)) == ("channel-0",)
    assert slices.dropped_binding_conditions(desired, []) == ()  # not written yet


def test_binding_conditions_no_longer_wanted_are_removed_from_the_pool() -> None:
    """Gate ComputeDomainBindingConditions turned off: the channel must lose them, or the
    scheduler would wait for conditions nobody sets any more (containment would keep them)."""
    with_them = slices.build_resource_slices(node_name="node-1", driver=names.DRIVER_NAME,
                                             devices=DEVICES, generation=1)
    without = slices.without_binding_conditions(with_them)
    (patch,) = slices.plan_slice_sync(desired=without, existing=with_them)
    assert "bindingConditions" not in str(patch)
    assert slices.plan_slice_sync(desired=with_them, existing=with_them) == ()
    assert slices.plan_slice_sync(desired=without, existing=without) == ()
