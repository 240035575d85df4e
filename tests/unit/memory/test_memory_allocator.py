"""The embedded DRA scheduler: claims from templates, CEL device selection, one claim per device."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.memory import allocator as memory_allocator
from adapters.memory import cluster as memory_cluster
from core import names

DRIVER = names.DRIVER_NAME
NS = "team"
CHANNEL_SELECTOR = (
    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'channel'"
    f" && device.attributes['{DRIVER}'].id == 0"
)
CLASS_CONFIG = {"opaque": {"driver": DRIVER, "parameters": {"kind": "FromTheClass"}}}
CLAIM_CONFIG = {
    "requests": ["channel"],
    "opaque": {"driver": DRIVER, "parameters": {"kind": names.KIND_CHANNEL_CONFIG}},
}


def _slice(node: str, devices: list[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{DRIVER}-{generation}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


def _device(name: str, kind: str, ident: int) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": kind}, "id": {"int": ident}}}


def _template(name: str, *, mode: str = "ExactCount", count: int = 1,
              selectors: tuple[str, ...] = (CHANNEL_SELECTOR,)) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": names.CHANNEL_DEVICE_CLASS,
        "allocationMode": mode,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }
    if mode == "ExactCount":
        exactly["count"] = count
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: "cd-uid"}},
            "spec": {
                "devices": {
                    "requests": [{"name": "channel", "exactly": exactly}],
                    "config": [CLAIM_CONFIG],
                }
            },
        },
    }


def _pod(name: str, *templates: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x"}],
        "resourceClaims": [
            {"name": f"claim{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": NS}, "spec": spec}


@pytest.fixture
def cluster() -> memory_cluster.InMemoryCluster:
    cluster = memory_cluster.InMemoryCluster(seed=7)
    cluster.create(
        "DeviceClass",
        {
            "metadata": {"name": names.CHANNEL_DEVICE_CLASS},
            "spec": {
                "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
                "config": [CLASS_CONFIG],
            },
        },
    )
    for node in ("node-b", "node-a"):
        cluster.create(
            "ResourceSlice",
            _slice(node, [_device("daemon-0", "daemon", 0), _device("channel-0", "channel", 0)]),
        )
    cluster.create("ResourceClaimTemplate", _template("rct"))
    return cluster


@pytest.fixture
def allocator(cluster: memory_cluster.InMemoryCluster) -> memory_allocator.Allocator:
    return memory_allocator.Allocator(cluster)


def test_device_cel_value_puts_unqualified_attributes_in_the_driver_domain() -> None:
    value = memory_allocator.device_cel_value(
        driver=DRIVER,
        device={
            "name": "gpu-0",
            "attributes": {
                "type": {"string": "gpu"},
                "gpu.nvidia.com/index": {"int": 3},
                "driverVersion": {"version": "1.2.3"},
                "fabric": {"bool": True},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        },
    )

    assert value["attributes"][DRIVER]["type"] == "gpu"
    assert value["attributes"][DRIVER]["driverVersion"] == "1.2.3"
    assert value["attributes"][DRIVER]["fabric"] is not False
    assert value["attributes"]["gpu.nvidia.com"]["index"] == 3
    assert value["capacity"][DRIVER]["memory"] == "80Gi"


def test_channel_selector_selects_channel_0_and_not_daemon_0(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    scheduled = allocator.schedule_pod(_pod("worker", "rct"))

    (claim,) = scheduled.claims
    results = claim["status"]["allocation"]["devices"]["results"]
    assert results == [
        {"request": "channel", "driver": DRIVER, "pool": "node-a", "device": "channel-0"}
    ]


def test_schedule_pod_creates_the_claim_from_the_template_like_the_claim_controller(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    scheduled = allocator.schedule_pod(_pod("worker", "rct"))

    (claim,) = scheduled.claims
    meta = claim["metadata"]
    assert meta["name"].startswith("worker-claim0-")
    assert meta["annotations"][memory_allocator.POD_CLAIM_NAME_ANNOTATION] == "claim0"
    assert meta["labels"] == {names.COMPUTE_DOMAIN_LABEL: "cd-uid"}
    (owner,) = meta["ownerReferences"]
    assert owner["kind"] == "Pod"
    assert owner["uid"] == scheduled.pod["metadata"]["uid"]
    assert claim["spec"]["devices"]["requests"][0]["name"] == "channel"
    pod = cluster.get("Pod", namespace=NS, name="worker")
    assert pod["status"]["resourceClaimStatuses"] == [
        {"name": "claim0", "resourceClaimName": meta["name"]}
    ]


def test_schedule_pod_binds_the_pod_and_reserves_the_claim_on_the_first_node_that_fits(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    scheduled = allocator.schedule_pod(_pod("worker", "rct"))

    assert scheduled.node_name == "node-a"
    assert cluster.get("Pod", namespace=NS, name="worker")["spec"]["nodeName"] == "node-a"
    (claim,) = scheduled.claims
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "worker", "uid": scheduled.pod["metadata"]["uid"]}
    ]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    ]


def test_allocation_copies_class_config_then_claim_config_with_their_sources(
    allocator: memory_allocator.Allocator,
) -> None:
    (claim,) = allocator.schedule_pod(_pod("worker", "rct")).claims

    assert claim["status"]["allocation"]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["channel"], **CLASS_CONFIG},
        {"source": "FromClaim", **CLAIM_CONFIG},
    ]


def test_a_device_allocated_to_one_claim_is_not_given_to_another(
    allocator: memory_allocator.Allocator,
) -> None:
    first = allocator.schedule_pod(_pod("w1", "rct"))
    second = allocator.schedule_pod(_pod("w2", "rct"))

    assert (first.node_name, second.node_name) == ("node-a", "node-b")


def test_no_free_device_fails_with_a_message_saying_all_matching_devices_are_taken(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    allocator.schedule_pod(_pod("w1", "rct", node="node-a"))

    with pytest.raises(memory_allocator.AllocationError) as raised:
        allocator.schedule_pod(_pod("w2", "rct", node="node-a"))

    message = raised.value.message
    assert "request 'channel'" in message
    assert "only 0 are free" in message
    assert "node 'node-a'" in message
    events = cluster.list("Event", namespace=NS).items
    assert [e["reason"] for e in events] == ["FailedScheduling"]
    assert events[0]["involvedObject"]["name"] == "w2"


def test_no_matching_device_fails_naming_the_class_and_the_selectors(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create(
        "ResourceClaimTemplate",
        _template("rct-7", selectors=(f"device.attributes['{DRIVER}'].id == 7",)),
    )

    with pytest.raises(memory_allocator.AllocationError) as raised:
        allocator.schedule_pod(_pod("worker", "rct-7"))

    message = raised.value.message
    assert f"DeviceClass {names.CHANNEL_DEVICE_CLASS!r}" in message
    assert "id == 7" in message
    assert "no device" in message


def test_both_class_and_request_selectors_must_hold(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.patch(
        "DeviceClass",
        namespace="",
        name=names.CHANNEL_DEVICE_CLASS,
        patch={"spec": {"selectors": [{"cel": {"expression": "device.driver == 'other'"}}]}},
    )

    with pytest.raises(memory_allocator.AllocationError, match=r"device\.driver == 'other'"):
        allocator.schedule_pod(_pod("worker", "rct"))


def test_a_missing_device_class_is_reported(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.delete("DeviceClass", namespace="", name=names.CHANNEL_DEVICE_CLASS)

    with pytest.raises(memory_allocator.AllocationError, match="does not exist"):
        allocator.schedule_pod(_pod("worker", "rct"))


def test_a_missing_template_is_reported(allocator: memory_allocator.Allocator) -> None:
    with pytest.raises(memory_allocator.AllocationError, match="'absent' not found"):
        allocator.schedule_pod(_pod("worker", "absent"))


def test_a_pinned_pod_is_allocated_on_its_node(allocator: memory_allocator.Allocator) -> None:
    scheduled = allocator.schedule_pod(_pod("worker", "rct", node="node-b"))

    assert scheduled.node_name == "node-b"
    (claim,) = scheduled.claims
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-b"


def test_all_claims_of_a_pod_land_on_one_node(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create("ResourceClaimTemplate", _template("rct-any", selectors=()))

    scheduled = allocator.schedule_pod(_pod("worker", "rct", "rct-any"))

    pools = {
        r["pool"]
        for c in scheduled.claims
        for r in c["status"]["allocation"]["devices"]["results"]
    }
    devices = sorted(
        r["device"]
        for c in scheduled.claims
        for r in c["status"]["allocation"]["devices"]["results"]
    )
    assert pools == {"node-a"}
    assert devices == ["channel-0", "daemon-0"]


def test_allocation_mode_all_takes_every_matching_device(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create("ResourceClaimTemplate", _template("rct-all", mode="All", selectors=()))

    (claim,) = allocator.schedule_pod(_pod("worker", "rct-all")).claims

    devices = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
    assert devices == ["daemon-0", "channel-0"]


def test_allocation_mode_all_fails_when_a_matching_device_is_taken(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create("ResourceClaimTemplate", _template("rct-all", mode="All", selectors=()))
    allocator.schedule_pod(_pod("w1", "rct", node="node-a"))

    with pytest.raises(memory_allocator.AllocationError, match="allocationMode All"):
        allocator.schedule_pod(_pod("w2", "rct-all", node="node-a"))


def test_only_the_newest_pool_generation_is_used(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create("ResourceSlice", _slice("node-a", [_device("daemon-0", "daemon", 0)], 2))

    scheduled = allocator.schedule_pod(_pod("worker", "rct"))

    assert scheduled.node_name == "node-b"


def test_an_uncompilable_selector_is_reported(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create("ResourceClaimTemplate", _template("rct-bad", selectors=("device.(",)))

    with pytest.raises(memory_allocator.AllocationError, match="does not compile"):
        allocator.schedule_pod(_pod("worker", "rct-bad"))


def test_schedule_pod_is_idempotent(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    first = allocator.schedule_pod(_pod("worker", "rct"))
    again = allocator.schedule_pod(_pod("worker", "rct"))

    assert again.node_name == first.node_name
    assert [c["metadata"]["name"] for c in again.claims] == [
        c["metadata"]["name"] for c in first.claims
    ]
    assert len(cluster.list("ResourceClaim", namespace=NS).items) == 1


def test_release_pod_deletes_generated_claims_and_frees_their_devices(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    first = allocator.schedule_pod(_pod("w1", "rct", node="node-a"))

    allocator.release_pod(first.pod)

    assert cluster.list("ResourceClaim", namespace=NS).items == ()
    second = allocator.schedule_pod(_pod("w2", "rct", node="node-a"))
    assert second.node_name == "node-a"


def test_release_pod_unreserves_but_keeps_a_shared_claim(
    cluster: memory_cluster.InMemoryCluster, allocator: memory_allocator.Allocator
) -> None:
    cluster.create(
        "ResourceClaim",
        {"metadata": {"name": "shared", "namespace": NS},
         "spec": _template("unused")["spec"]["spec"]},
    )
    pod = _pod("worker")
    pod["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "shared"}]
    scheduled = allocator.schedule_pod(pod)
    other = _pod("other")
    other["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "shared"}]
    allocator.schedule_pod(other)

    allocator.release_pod(scheduled.pod)

    claim = cluster.get("ResourceClaim", namespace=NS, name="shared")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["other"]
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "channel-0"
