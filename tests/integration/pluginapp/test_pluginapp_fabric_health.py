"""A node whose NVLink fabric degrades taints its devices and turns them Unhealthy (issue 22).

The ComputeDomain plugin judges the node's fabric at start and at every clique refresh (here
every 50 ms): a GPU whose fabric registration is incomplete or failed taints every published
device `compute-domain.nvidia.com/fabric-degraded=<reason>:NoSchedule` in the ResourceSlice
(the embedded scheduler then refuses it, naming the taint), reports it Unhealthy in the
kubelet's health stream (v1, over the plugin's DRA socket), logs and records a Node Event;
recovery lifts all of it. A read that fails keeps the last judgment. The simulated driver
root's fabric state file stands in for NVML (`simulated.degrade_simulated_fabric`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from pluginapp_env import NAMESPACE, node

from adapters.grpc import client
from adapters.grpc.generated import dra_health_v1_pb2, dra_health_v1_pb2_grpc
from adapters.memory import allocator as memory_allocator
from adapters.nvml import simulated
from apps.cli import embedded
from apps.kubeletplugin import fabric_watch
from core import kinds, models, names

# Far above what any wait here needs: a guard against a hang, not a timing assertion.
GUARD_S = 30.0
INTERVAL_S = 0.05
KEY = "compute-domain.nvidia.com/fabric-degraded"
HEALTHY, UNHEALTHY = dra_health_v1_pb2.HEALTHY, dra_health_v1_pb2.UNHEALTHY


@pytest.fixture
def rack() -> Iterator[embedded.Embedded]:
    """One GB200 node, driver-managed (it publishes `channel-0` and `daemon-0`)."""
    with embedded.running(workdir="", mode="driverManaged", profile="gb200-nvl72",
                          node_limit=1, clique_refresh_interval_s=INTERVAL_S) as env:
        yield env


def _fabric_file(env: embedded.Embedded) -> str:
    return embedded.fabric_state_file(env.workdir, node(env).name)


def _taints(env: embedded.Embedded) -> dict[str, list[Any]]:
    return {
        d["name"]: d.get("taints") or []
        for s in env.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"]["nodeName"] == node(env).name and s["spec"]["driver"] == names.DRIVER_NAME
        for d in s["spec"].get("devices") or ()
    }


def _wait_taints(env: embedded.Embedded, want: list[Any]) -> None:
    embedded.wait_until(
        lambda: (found := _taints(env)) and all(t == want for t in found.values()),
        timeout_s=GUARD_S, what=f"every published device with taints {want}")


def _events(env: embedded.Embedded, reason: str) -> list[str]:
    return [e["message"] for e in env.cluster.list(kinds.EVENT.kind, namespace="default").items
            if e["reason"] == reason]


def _health_stream(env: embedded.Embedded) -> Iterator[dict[str, int]]:
    """Each list the plugin streams (v1), as device -> state."""
    socket = node(env).plugin.server.dra_socket_path
    with grpc.insecure_channel(client.unix_target(socket)) as channel:
        stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=GUARD_S)
        try:
            for message in stream:
                yield {d.device.device_name: d.health for d in message.devices}
        finally:
            stream.cancel()


def _until(stream: Iterator[dict[str, int]], state: int) -> dict[str, int]:
    """The next list in which every device (there is at least one) is in `state`."""
    while not ((seen := next(stream)) and set(seen.values()) == {state}):
        pass
    return seen


def _schedule_channel_pod(env: embedded.Embedded, name: str) -> memory_allocator.ScheduledPod:
    env.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    return env.allocator.schedule_pod({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-pod",
                                                        "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"claims": [{"name": "channel"}]}}],
                 "resourceClaims": [{"name": "channel", "resourceClaimName": name}]},
    })


def test_a_degraded_fabric_taints_the_devices_and_turns_them_unhealthy_until_it_recovers(
    rack: embedded.Embedded, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=fabric_watch.__name__)
    assert _taints(rack) == {"channel-0": [], "daemon-0": []}
    stream = _health_stream(rack)
    assert _until(stream, HEALTHY) == {"channel-0": HEALTHY, "daemon-0": HEALTHY}
    gpu = simulated.SimulatedInventory(profile="gb200-nvl72", node_name=node(rack).name)
    sick = gpu.fabric_records()[2].gpu_uuid

    simulated.degrade_simulated_fabric(_fabric_file(rack), gpu_uuid=sick,
                                       state=models.FabricState.IN_PROGRESS, status_ok=True)

    _wait_taints(rack, [{"key": KEY, "value": "InProgress", "effect": "NoSchedule"}])
    assert _until(stream, UNHEALTHY) == {"channel-0": UNHEALTHY, "daemon-0": UNHEALTHY}
    (message,) = _events(rack, fabric_watch.DEGRADED_REASON)
    assert sick in message and "nvidia-smi -q | grep -A5 Fabric" in message
    assert f"event=fabric_degraded node={node(rack).name} reason=InProgress" in caplog.text
    with pytest.raises(memory_allocator.AllocationError, match=f"{KEY}=InProgress:NoSchedule"):
        _schedule_channel_pod(rack, "while-degraded")

    simulated.restore_simulated_fabric(_fabric_file(rack))

    _wait_taints(rack, [])
    assert _until(stream, HEALTHY) == {"channel-0": HEALTHY, "daemon-0": HEALTHY}
    assert _events(rack, fabric_watch.RECOVERED_REASON)
    assert f"event=fabric_recovered node={node(rack).name}" in caplog.text
    scheduled = _schedule_channel_pod(rack, "after-recovery")
    assert scheduled.claims[0]["status"]["allocation"]["devices"]["results"][0]["device"] == (
        "channel-0")


def test_a_worse_failure_replaces_the_taints_reason(rack: embedded.Embedded) -> None:
    simulated.degrade_simulated_fabric(_fabric_file(rack), state=models.FabricState.IN_PROGRESS)
    _wait_taints(rack, [{"key": KEY, "value": "InProgress", "effect": "NoSchedule"}])

    simulated.degrade_simulated_fabric(_fabric_file(rack))  # COMPLETED, error status

    _wait_taints(rack, [{"key": KEY, "value": "Failed", "effect": "NoSchedule"}])
    assert len(_events(rack, fabric_watch.DEGRADED_REASON)) == 2


def test_a_fabric_read_that_fails_keeps_the_last_judgment(
    rack: embedded.Embedded, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger=fabric_watch.__name__)
    path = _fabric_file(rack)
    simulated.degrade_simulated_fabric(path)
    _wait_taints(rack, [{"key": KEY, "value": "Failed", "effect": "NoSchedule"}])

    with open(path, "w", encoding="utf-8") as f:
        f.write("{not json")  # the read now fails, as a crashed NVML probe would
    embedded.wait_until(lambda: "event=fabric_check_failed" in caplog.text, timeout_s=GUARD_S,
                        what="a failed fabric read")

    assert _taints(rack) == {d: [{"key": KEY, "value": "Failed", "effect": "NoSchedule"}]
                             for d in ("channel-0", "daemon-0")}
    assert "action=keeping_last healthy=False" in caplog.text
    assert not _events(rack, fabric_watch.RECOVERED_REASON)


@pytest.fixture
def lenient_rack() -> Iterator[embedded.Embedded]:
    """As `rack`, with gate CrashOnNVLinkFabricErrors off: a plugin starts on a degraded node."""
    with embedded.running(workdir="", mode="driverManaged", profile="gb200-nvl72",
                          node_limit=1, feature_gates="CrashOnNVLinkFabricErrors=false",
                          clique_refresh_interval_s=INTERVAL_S) as env:
        yield env


def test_a_node_degraded_before_the_plugin_starts_is_tainted_from_its_first_publish(
    lenient_rack: embedded.Embedded,
) -> None:
    current = node(lenient_rack)
    current.kubelet.close()
    current.plugin.stop(grace_s=0)
    sick = simulated.SimulatedInventory(
        profile="gb200-nvl72", node_name=current.name).fabric_records()[0].gpu_uuid
    simulated.degrade_simulated_fabric(_fabric_file(lenient_rack), gpu_uuid=sick,
                                       state=models.FabricState.NOT_STARTED)

    restarted = embedded.start_node(lenient_rack, current.name, profile="gb200-nvl72",
                                    retry_budget_s=0.2, clique_refresh_interval_s=3600)

    # The clique comes from the other GPUs (the gate skips the sick one); the first publish,
    # long before any refresh, already carries the taint.
    assert restarted.plugin.node.clique_id
    assert _taints(lenient_rack) == {
        d: [{"key": KEY, "value": "NotStarted", "effect": "NoSchedule"}]
        for d in ("channel-0", "daemon-0")}
