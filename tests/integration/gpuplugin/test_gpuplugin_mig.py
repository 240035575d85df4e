"""The GPU plugin on a simulated A100 node in MIG mode, served in-process as `__main__` wires it.

In-process rather than as a child: a MIG device's capability nodes need the `nvidia-caps`
major from /proc/devices, and the app has no flag to read another file than the host's (which
has no NVIDIA driver on a test runner). Everything else is production wiring:
`wiring.start_gpu_plugin` with `--nvml simulated:a100-mig` settings parsed from flags, the
real `DriverRoot`, the `KubeCluster` over HTTP to the embedded API server, and the kubelet's
side through the registration and DRA sockets.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

from adapters.fs import driverroot
from adapters.kube import cluster as kube_cluster
from adapters.nvml import inventory as nvml_inventory
from adapters.nvml import simulated
from adapters.nvsmi import timeslice
from apps.gpuplugin import settings as gpu_settings
from apps.gpuplugin import wiring
from core import gates

pytestmark = pytest.mark.skipif(
    not gpuplugin_env.can_make_device_nodes(),
    reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
)

PROFILE = "a100-mig"


def is_mig(device: dict[str, Any]) -> bool:
    return bool(device["attributes"]["type"] == {"string": "mig"})


@pytest.fixture
def mig_plugin(
    served: app_processes.ServedCluster, gpu_node: GpuNode, tmp_path: pathlib.Path
) -> Iterator[wiring.Plugin]:
    settings = gpu_settings.parse(
        gpu_node.plugin_args(kubeconfig=served.kubeconfig, profile=PROFILE), {}
    )
    proc_devices = tmp_path / "devices"
    proc_devices.write_text(simulated.simulated_proc_devices(), encoding="utf-8")
    plugin = wiring.start_gpu_plugin(
        settings,
        cluster=kube_cluster.KubeCluster.from_config(str(served.kubeconfig)),
        discovery=nvml_inventory.gpu_discovery_from_spec(
            settings.nvml, node_name=settings.node_name,
            driver_root=settings.container_driver_root,
        ),
        files=driverroot.DriverRoot(
            settings.container_driver_root, host_root=settings.nvidia_driver_root,
            dev_root=settings.dev_root, proc_devices=str(proc_devices),
        ),
        gates=gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates)),
        boot_id=simulated.simulated_boot_id(settings.node_name),
        time_slicer=timeslice.NvidiaSmiTimeSlicer(str(gpu_node.smi_dir / "nvidia-smi")),
    )
    try:
        gpuplugin_env.eventually_registered(gpu_node.registration_socket)
        yield plugin
    finally:
        plugin.stop(grace_s=0)


def test_gpu_plugin_publishes_mig_devices_instead_of_their_mig_enabled_gpu(
    served: app_processes.ServedCluster, gpu_node: GpuNode, mig_plugin: wiring.Plugin
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
    served: app_processes.ServedCluster, gpu_node: GpuNode, mig_plugin: wiring.Plugin
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
