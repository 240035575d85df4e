"""The `gpu-kubelet-plugin` process with gate NVMLDeviceHealthCheck on a simulated A100 node.

Health events are raised as the simulated NVML raises them (a line appended to the simulated
driver root's events file, read by the plugin's real watch child). A fatal XID taints the
GPU and its MIG devices in the published slice and turns them Unhealthy in the kubelet's
health stream; an informational XID only informs; a restart keeps the taints, a reboot (a
new boot id) forgets them; bad `--additional-xids-to-ignore` stops the start with exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import app_processes
import gpuplugin_env
import grpc
import pytest
from gpuplugin_env import GpuNode

from adapters.grpc import client
from adapters.grpc.generated import dra_health_v1_pb2, dra_health_v1_pb2_grpc
from adapters.nvml import health_events
from core.gpu import health

pytestmark = pytest.mark.skipif(
    not gpuplugin_env.can_make_device_nodes(),
    reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
)

PROFILE = "a100-mig"
GATES = "NVMLDeviceHealthCheck=true"
GUARD_S = 30.0


def _launch(gpu_node: GpuNode, served: app_processes.ServedCluster,
            launch: app_processes.Launch, *extra: str) -> app_processes.AppProcess:
    process = launch("apps.gpuplugin", [
        *gpu_node.plugin_args(kubeconfig=served.kubeconfig, profile=PROFILE,
                              feature_gates=GATES), *extra])
    gpuplugin_env.wait_registered(process, gpu_node.registration_socket)
    app_processes.eventually(lambda: "event=gpu_health_watch_ready" in process.output()
                             or None, what="the health watch to be ready")
    return process


@pytest.fixture
def plugin(served: app_processes.ServedCluster, gpu_node: GpuNode,
           launch: app_processes.Launch) -> app_processes.AppProcess:
    return _launch(gpu_node, served, launch)


def _taints(served: app_processes.ServedCluster, gpu_node: GpuNode) -> dict[str, list[Any]]:
    return {name: device.get("taints", []) for name, device in
            gpuplugin_env.wait_slice_devices(served.cluster, node=gpu_node.node).items()}


def _raise(gpu_node: GpuNode, event: health.HealthEvent) -> None:
    health_events.raise_simulated_event(str(gpu_node.driver_root), event)


def _whole_and_mig(gpu_node: GpuNode) -> tuple[str, str, list[str]]:
    """A GPU not in MIG mode (uuid, name), and the MIG devices of one in MIG mode."""
    inventory = gpu_node.inventory(PROFILE)
    parents = {m.parent_minor for m in inventory.migs}
    whole = next(g for g in inventory.gpus if g.minor not in parents)
    return whole.uuid, whole.name, sorted(m.name for m in inventory.migs)


def _wait_taints(served: app_processes.ServedCluster, gpu_node: GpuNode,
                 want: dict[str, list[dict[str, str]]]) -> dict[str, list[Any]]:
    def probe() -> dict[str, list[Any]] | None:
        found = _taints(served, gpu_node)
        return found if all(found.get(d) == t for d, t in want.items()) else None
    return app_processes.eventually(probe, what=f"taints {want}", timeout_s=GUARD_S)


def _health_stream(gpu_node: GpuNode) -> Iterator[dict[str, int]]:
    with grpc.insecure_channel(client.unix_target(str(gpu_node.dra_socket))) as channel:
        stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=GUARD_S)
        try:
            for message in stream:
                yield {d.device.device_name: d.health for d in message.devices}
        finally:
            stream.cancel()


def _state_of(stream: Iterator[dict[str, int]], device: str) -> int:
    """The device's state in the next list that names it (the first lists may come before
    the first publish)."""
    while device not in (seen := next(stream)):
        pass
    return seen[device]


def test_a_fatal_xid_taints_the_gpu_and_turns_it_unhealthy_in_the_health_stream(
    served: app_processes.ServedCluster, gpu_node: GpuNode, plugin: app_processes.AppProcess,
) -> None:
    uuid, name, _ = _whole_and_mig(gpu_node)
    stream = _health_stream(gpu_node)
    assert _state_of(stream, name) == dra_health_v1_pb2.HEALTHY
    _raise(gpu_node, health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=uuid, xid=79))
    found = _wait_taints(served, gpu_node, {name: [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]})
    assert sum(1 for t in found.values() if t) == 1, "only that GPU is tainted"
    while _state_of(stream, name) != dra_health_v1_pb2.UNHEALTHY:
        pass
    assert "event=gpu_device_tainted kind=xid" in plugin.output()


def test_an_informational_xid_is_published_with_effect_none_and_stays_healthy(
    served: app_processes.ServedCluster, gpu_node: GpuNode, plugin: app_processes.AppProcess,
) -> None:
    uuid, name, _ = _whole_and_mig(gpu_node)
    _raise(gpu_node, health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=uuid, xid=13))
    # The embedded API server reports a version that knows effect None.
    _wait_taints(served, gpu_node, {name: [
        {"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]})
    assert _state_of(_health_stream(gpu_node), name) == dra_health_v1_pb2.HEALTHY


def test_gpu_lost_taints_every_device_mig_devices_included(
    served: app_processes.ServedCluster, gpu_node: GpuNode, plugin: app_processes.AppProcess,
) -> None:
    _, _, migs = _whole_and_mig(gpu_node)
    _raise(gpu_node, health.HealthEvent(kind=health.HealthEventKind.GPU_LOST))
    lost = [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]
    found = _wait_taints(served, gpu_node, {m: lost for m in migs})
    assert all(t == lost for t in found.values())


def test_a_restart_keeps_the_taints_and_a_reboot_forgets_them(
    served: app_processes.ServedCluster, gpu_node: GpuNode, plugin: app_processes.AppProcess,
    launch: app_processes.Launch,
) -> None:
    uuid, name, _ = _whole_and_mig(gpu_node)
    _raise(gpu_node, health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=uuid, xid=48))
    fatal = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}]
    _wait_taints(served, gpu_node, {name: fatal})
    plugin.kill()
    again = _launch(gpu_node, served, launch)
    assert "event=gpu_health_state_kept devices=1" in again.output()
    _wait_taints(served, gpu_node, {name: fatal})
    again.kill()
    gpu_node.boot_id.write_text("00000000-0000-0000-0000-00000000b007\n")
    rebooted = _launch(gpu_node, served, launch)
    _wait_taints(served, gpu_node, {name: []})
    assert "gpu_health_state_kept" not in rebooted.output()


def test_bad_additional_xids_stop_the_start_with_exit_2_naming_the_flag(
    served: app_processes.ServedCluster, gpu_node: GpuNode, launch: app_processes.Launch,
) -> None:
    process = launch("apps.gpuplugin", [
        *gpu_node.plugin_args(kubeconfig=served.kubeconfig, profile=PROFILE,
                              feature_gates=GATES), "--additional-xids-to-ignore", "48,x"])
    assert process.wait() == 2
    assert "--additional-xids-to-ignore (ADDITIONAL_XIDS_TO_IGNORE) has 'x'" in process.output()
