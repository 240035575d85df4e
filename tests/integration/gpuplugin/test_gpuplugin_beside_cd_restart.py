"""Both halves on one node: a GPU plugin killed (-9) and restarted beside the ComputeDomain plugin.

The two plugins run as real processes on the same node, sharing the CDI root and the kubelet's
registry dir as the chart's DaemonSet has them, each with its own plugin dir (socket and
checkpoint). Once per IMEX mode of the ComputeDomain half, each prepares a claim; both are
killed -9 and restarted (the ComputeDomain plugin first, so its start-up orphan-spec pass runs
while the GPU claim's spec is there). Pinned: the GPU claim is still prepared (its re-prepare
answers the same CDI ids and spec), neither plugin deletes or records the other's claim, and
unpreparing the GPU claim leaves the ComputeDomain spec alone.
"""

from __future__ import annotations

import pathlib

import app_processes
import gpuplugin_env
import pytest
from app_processes import PluginPaths
from gpuplugin_env import GpuNode

from adapters.grpc import client as grpc_client
from core import kinds, models
from core.computedomain import checkpoint_records as cd_records
from core.gpu import cdi as gpu_cdi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not gpuplugin_env.can_make_device_nodes(),
        reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
    ),
]

MODES = {
    "driverManaged": ["--imex-mode", "driverManaged"],
    "hostManaged": app_processes.host_managed_flags(),
}


def _prepare_cd(paths: PluginPaths, ref: models.ClaimRef) -> tuple[str, ...]:
    with grpc_client.DRAClient(str(paths.dra_socket)) as dra:
        result = dra.prepare([ref])[ref.uid]
    assert result.error == "", result.error
    return gpuplugin_env.cdi_ids(result)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_gpu_claim_survives_kill_and_restart_of_both_halves_untouched_by_the_other(
    mode: str,
    served: app_processes.ServedCluster,
    short_root: pathlib.Path,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    cd_paths = PluginPaths(root=short_root / "cd")
    cd_paths.write_node_files(node)
    gpu = GpuNode.create(short_root / "gpu", node=node)
    cd_args = app_processes.plugin_args(
        cd_paths, node=node, kubeconfig=served.kubeconfig, mode_flags=MODES[mode]
    )
    gpu_args = gpu.plugin_args(
        kubeconfig=served.kubeconfig, cdi_root=cd_paths.cdi_root,
        registry_dir=cd_paths.registry_dir,
    )

    def start_both() -> None:
        cd = launch("apps.kubeletplugin", cd_args)
        gpuplugin_env.wait_registered(cd, cd_paths.registration_socket)
        gp = launch("apps.gpuplugin", gpu_args)
        gpuplugin_env.wait_registered(
            gp, gpuplugin_env.registration_socket(cd_paths.registry_dir)
        )
        processes.extend((cd, gp))

    # driverManaged labels the node with its domain: the Node object must exist, as it would.
    served.cluster.create(
        kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    )
    processes: list[app_processes.AppProcess] = []
    start_both()
    cd_uid = str(app_processes.compute_domain(served.cluster, "cd")["metadata"]["uid"])
    # What the IMEX daemon reports once up (driverManaged prepares wait for it).
    served.cluster.patch(
        kinds.COMPUTE_DOMAIN.kind, namespace=app_processes.NAMESPACE, name="cd",
        subresource="status", patch={"status": {"status": "Ready", "nodes": [{
            "name": node, "ipAddress": "10.0.0.1", "cliqueID": "", "index": 0,
            "status": "Ready",
        }]}},
    )
    channel = app_processes.resource_claim(served.cluster, "channel", node=node, cd_uid=cd_uid)
    gpu_ref = gpuplugin_env.gpu_claim(served.cluster, "train", node=node)
    gpu_spec_file = cd_paths.cdi_root / gpu_cdi.spec_file_name(gpu_ref.uid)
    channel_ids = _prepare_cd(cd_paths, channel)
    prepared = gpuplugin_env.prepare(gpu.dra_socket, gpu_ref)
    assert prepared.error == ""
    gpu_spec = gpuplugin_env.read_spec(gpu_spec_file)
    cd_spec_file = cd_paths.cdi_file(channel.uid)
    assert cd_spec_file.exists()

    for process in processes:
        process.kill()
    processes.clear()
    start_both()

    # The CD plugin's orphan pass ran before the GPU plugin came back: the GPU spec is there.
    assert {p.name for p in cd_paths.cdi_root.iterdir()} == {
        gpu_spec_file.name, cd_spec_file.name
    }
    assert gpuplugin_env.checkpoint_uids(gpu.checkpoint) == {str(gpu_ref.uid)}
    cd_held = gpuplugin_env.checkpoint_uids(cd_paths.checkpoint, cd_records.CODEC)
    assert cd_held == {str(channel.uid)}
    again = gpuplugin_env.prepare(gpu.dra_socket, gpu_ref)
    assert again == prepared
    assert gpuplugin_env.read_spec(gpu_spec_file) == gpu_spec
    assert _prepare_cd(cd_paths, channel) == channel_ids

    assert gpuplugin_env.unprepare(gpu.dra_socket, gpu_ref).error == ""

    assert not gpu_spec_file.exists()
    assert cd_spec_file.exists()
    cd_held = gpuplugin_env.checkpoint_uids(cd_paths.checkpoint, cd_records.CODEC)
    assert cd_held == {str(channel.uid)}
