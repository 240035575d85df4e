"""ResourceSlice devices per IMEX mode, slice building and the slice sync planner."""

from __future__ import annotations

import dataclasses
from typing import Any

import plugin_factories as f

from core import models, names, slices
from core.computedomain import slice_devices


def _names(devices: tuple[dict[str, Any], ...]) -> list[str]:
    return [d["name"] for d in devices]


def test_host_managed_slice_publishes_channel_zero_only() -> None:
    assert _names(slice_devices.plan_slice_devices(f.HOST)) == ["channel-0"]


def test_driver_managed_slice_publishes_channel_and_daemon() -> None:
    assert _names(slice_devices.plan_slice_devices(f.DRIVER)) == ["channel-0", "daemon-0"]


def test_slice_device_attributes_match_the_device_class_selectors() -> None:
    channel, daemon = slice_devices.plan_slice_devices(f.DRIVER)
    assert channel == {
        "name": "channel-0",
        "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
    }
    assert daemon["attributes"] == {"type": {"string": "daemon"}, "id": {"int": 0}}


def test_slice_pool_is_named_after_the_node() -> None:
    (obj,) = slices.build_resource_slices(
        node_name="node-a", driver=names.DRIVER_NAME,
        devices=slice_devices.plan_slice_devices(f.HOST), generation=3,
    )
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    assert obj["kind"] == "ResourceSlice"
    assert obj["metadata"]["name"] == "node-a-compute-domain.nvidia.com-0"
    assert obj["spec"]["nodeName"] == "node-a"
    assert obj["spec"]["driver"] == names.DRIVER_NAME
    assert obj["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}


def test_slices_hold_at_most_128_devices_and_count_the_pool() -> None:
    devices = [{"name": f"channel-{i}", "attributes": {}} for i in range(300)]
    objs = slices.build_resource_slices(
        node_name="n", driver=names.DRIVER_NAME, devices=devices, generation=1
    )
    assert [len(o["spec"]["devices"]) for o in objs] == [128, 128, 44]
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in objs} == {3}
    assert [o["metadata"]["name"] for o in objs] == [
        f"n-compute-domain.nvidia.com-{i}" for i in range(3)
    ]


def test_slice_name_of_a_very_long_node_stays_a_valid_object_name() -> None:
    long_a = "a" * 250 + "x"
    long_b = "a" * 250 + "y"
    name_a = slices.slice_name(node_name=long_a, driver=names.DRIVER_NAME, index=0)
    name_b = slices.slice_name(node_name=long_b, driver=names.DRIVER_NAME, index=0)
    assert len(name_a) <= 253
    assert name_a != name_b


def _desired(
    config: models.DriverConfig = f.HOST, generation: int = 1
) -> tuple[dict[str, Any], ...]:
    return slices.build_resource_slices(
        node_name="node-a", driver=names.DRIVER_NAME,
        devices=slice_devices.plan_slice_devices(config), generation=generation,
    )


def test_slice_sync_creates_missing_slices() -> None:
    desired = _desired()
    assert slices.plan_slice_sync(desired=desired, existing=()) == (
        models.CreateObject(kind="ResourceSlice", obj=desired[0]),
    )


def test_slice_sync_is_quiet_when_slices_agree_even_with_server_fields() -> None:
    desired = _desired()
    stored = {
        **desired[0],
        "metadata": {**desired[0]["metadata"], "resourceVersion": "7", "uid": "u"},
    }
    assert slices.plan_slice_sync(desired=desired, existing=(stored,)) == ()


def test_slice_sync_patches_a_changed_slice_with_its_resource_version() -> None:
    old = {**_desired(f.DRIVER)[0]}
    old["metadata"] = {**old["metadata"], "resourceVersion": "42"}
    new = _desired(f.HOST)
    (action,) = slices.plan_slice_sync(desired=new, existing=(old,))
    assert action == models.PatchObject(
        kind="ResourceSlice", namespace="", name=new[0]["metadata"]["name"],
        patch={"spec": new[0]["spec"]}, resource_version="42",
    )


def _with_taint(slice_: dict[str, Any], **taint: str) -> dict[str, Any]:
    spec = slice_["spec"]
    devices = [{**spec["devices"][0], "taints": [taint]}, *spec["devices"][1:]]
    return {**slice_, "spec": {**spec, "devices": devices}}


def test_slice_sync_lifts_a_taint_the_desired_device_no_longer_has() -> None:
    """An extra field is normally the API server's default, but a taint left would keep a
    healthy device refused."""
    desired = _desired()
    stored = _with_taint(desired[0], key="gpu.nvidia.com/xid", value="79", effect="NoSchedule",
                         timeAdded="2026-11-26T08:00:00Z")
    (action,) = slices.plan_slice_sync(desired=desired, existing=(stored,))
    assert isinstance(action, models.PatchObject)
    assert action.patch == {"spec": desired[0]["spec"]}


def test_slice_sync_is_quiet_when_taints_agree_but_the_server_added_their_time() -> None:
    desired = (_with_taint(_desired()[0], key="gpu.nvidia.com/gpu-lost", effect="NoSchedule"),)
    stored = _with_taint(_desired()[0], key="gpu.nvidia.com/gpu-lost", effect="NoSchedule",
                         timeAdded="2026-11-26T08:00:00Z")
    assert slices.plan_slice_sync(desired=desired, existing=(stored,)) == ()


def test_slice_sync_deletes_slices_no_longer_wanted() -> None:
    stale = {"metadata": {"name": "node-a-compute-domain.nvidia.com-1"}, "spec": {}}
    actions = slices.plan_slice_sync(desired=_desired(), existing=(_desired()[0], stale))
    assert actions == (
        models.DeleteObject(
            kind="ResourceSlice", namespace="", name="node-a-compute-domain.nvidia.com-1"
        ),
    )


def _owned(node_uid: str, generation: int = 1) -> tuple[dict[str, Any], ...]:
    return slices.build_resource_slices(
        node_name="node-a", driver=names.DRIVER_NAME,
        devices=slice_devices.plan_slice_devices(f.HOST), generation=generation, node_uid=node_uid,
    )


def _stored(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": "9", **meta}}


def test_slices_are_owned_by_their_node_as_upstreams_plugins_set_it() -> None:
    """Without an owner, a deleted Node's slices stayed forever (seen on a real cluster)."""
    many = slices.build_resource_slices(
        node_name="node-a", driver=names.DRIVER_NAME, generation=1, node_uid="node-uid-1",
        devices=[{"name": f"channel-{i}", "attributes": {}} for i in range(130)],
    )
    assert [o["metadata"]["ownerReferences"] for o in many] == [[
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-uid-1",
         "controller": True},
    ]] * 2


def test_slices_of_a_node_whose_uid_is_unknown_carry_no_owner() -> None:
    assert "ownerReferences" not in _desired()[0]["metadata"]


def test_slice_sync_adds_the_node_owner_to_a_slice_published_without_one() -> None:
    desired = _owned("node-uid-1")
    (action,) = slices.plan_slice_sync(desired=desired, existing=(_stored(_desired()[0]),))
    assert action == models.PatchObject(
        kind="ResourceSlice", namespace="", name=desired[0]["metadata"]["name"],
        patch={"metadata": {"ownerReferences": desired[0]["metadata"]["ownerReferences"]}},
        resource_version="9",
    )


def test_slice_sync_replaces_an_owner_naming_an_earlier_node_of_the_same_name() -> None:
    old = _stored(_owned("node-uid-1")[0])
    desired = _owned("node-uid-2")
    (action,) = slices.plan_slice_sync(desired=desired, existing=(old,))
    assert isinstance(action, models.PatchObject)
    assert action.patch == {"metadata": {"ownerReferences": [slices.node_owner_reference(
        node_name="node-a", node_uid="node-uid-2")]}}
    assert slices.plan_slice_sync(desired=desired, existing=(_stored(desired[0]),)) == ()


def test_slice_sync_keeps_existing_owners_when_the_node_uid_is_unknown() -> None:
    owned = _stored(_owned("node-uid-1")[0])
    assert slices.plan_slice_sync(desired=_desired(), existing=(owned,)) == ()


def test_host_managed_node_without_an_nvlink_clique_publishes_no_channel() -> None:
    lonely = dataclasses.replace(f.NODE, clique_id="")
    assert slice_devices.plan_slice_devices(f.HOST, node=lonely) == ()
    assert _names(slice_devices.plan_slice_devices(f.HOST, node=f.NODE)) == ["channel-0"]


def test_driver_managed_devices_do_not_depend_on_the_clique() -> None:
    lonely = dataclasses.replace(f.NODE, clique_id="")
    devices = slice_devices.plan_slice_devices(f.DRIVER, node=lonely)
    assert _names(devices) == ["channel-0", "daemon-0"]
