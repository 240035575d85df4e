"""The `gpu-kubelet-plugin` process on a simulated A100 node in MIG mode.

A MIG device's capability nodes need the `nvidia-caps` major, read from the node's
`/proc/devices` (`--proc-devices`, here the simulated node's file): a test runner's own has no
NVIDIA driver.
"""

from __future__ import annotations

from typing import Any

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

pytestmark = pytest.mark.skipif(
    not gpuplugin_env.can_make_device_nodes(),
    reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
)

PROFILE = "a100-mig"


def is_mig(device: dict[str, Any]) -> bool:
    return bool(device["attributes"]["type"] == {"string": "mig"})


@pytest.fixture
def mig_plugin(
    served: app_processes.ServedCluster, gpu_node: GpuNode, launch: app_processes.Launch
) -> app_processes.AppProcess:
    process = launch(
        "apps.gpuplugin", gpu_node.plugin_args(kubeconfig=served.kubeconfig, profile=PROFILE)
    )
    gpuplugin_env.wait_registered(process, gpu_node.registration_socket)
    return process


def test_gpu_plugin_publishes_mig_devices_instead_of_their_mig_enabled_gpu(
    served: app_processes.ServedCluster, gpu_node: GpuNode, mig_plugin: app_processes.AppProcess
) -> None:
    inventory = gpu_node.inventory(PROFILE)
    mig_parents = {m.parent_minor for m in inventory.migs}

    published = gpuplugin_env.wait_slice_devices(served.cluster, node=gpu_node.node)

    assert mig_parents, "the a100-mig profile has MIG devices"
    for minor in mig_parents:
        assert f"gpu-{minor}" not in published
    migs = {name: d for name, d in published.items() if is_mig(d)}
    assert len(migs) == len(inventory.migs)
    for device in migs.values():
        assert {"profile", "parentUUID"} <= set(device["attributes"])
    # The GPUs not in MIG mode are still there whole.
    whole = {g.minor for g in inventory.gpus} - mig_parents
    assert {f"gpu-{minor}" for minor in whole} <= set(published)


def test_gpu_plugin_prepares_a_mig_device_with_its_parent_and_capability_nodes(
    served: app_processes.ServedCluster, gpu_node: GpuNode, mig_plugin: app_processes.AppProcess
) -> None:
    published = gpuplugin_env.wait_slice_devices(served.cluster, node=gpu_node.node)
    name = sorted(n for n, d in published.items() if is_mig(d))[0]
    (mig,) = (
        m for m in gpu_node.inventory(PROFILE).migs
        if published[name]["attributes"]["uuid"] == {"string": m.uuid}
    )
    ref = gpuplugin_env.gpu_claim(
        served.cluster, "slice", node=gpu_node.node, devices=(name,),
        device_class=gpuplugin_env.MIG_CLASS,
    )

    prepared = gpuplugin_env.prepare(gpu_node.dra_socket, ref)

    assert prepared.error == ""
    assert gpuplugin_env.cdi_ids(prepared) == (f"k8s.gpu.nvidia.com/claim={ref.uid}-{name}",)
    spec = gpuplugin_env.read_spec(gpu_node.cdi_file(ref.uid))
    nodes = gpuplugin_env.spec_node_paths(spec)
    assert f"/dev/nvidia{mig.parent_minor}" in nodes
    assert f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}" in nodes
    assert f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}" in nodes
    caps = [n for e in gpuplugin_env.spec_edits(spec) for n in e.get("deviceNodes", ())
            if n["path"].startswith("/dev/nvidia-caps/")]
    assert {n["major"] for n in caps} == {511}  # nvidia-caps in /proc/devices

    assert gpuplugin_env.unprepare(gpu_node.dra_socket, ref).error == ""
    assert not gpu_node.cdi_file(ref.uid).exists()
