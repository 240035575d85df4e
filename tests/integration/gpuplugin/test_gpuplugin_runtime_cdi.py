"""`gpu-kubelet-plugin` as a process refuses prepares while the container runtime has CDI off.

The runtime is `adapters.grpc.cri_fake` on a unix socket, answering like containerd with
`enableCDI=false`; the plugin finds it through `--container-runtime-endpoint`, answers the
prepare with what is wrong and how to fix it, and logs `event=runtime_cdi_refusing`.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

from adapters.grpc import cri_fake
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not gpuplugin_env.can_make_device_nodes(),
        reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
    ),
]


def test_gpu_plugin_refuses_prepares_while_the_runtime_has_cdi_off(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpucri-", dir="/tmp"))
    runtime = cri_fake.FakeRuntime(str(root / "containerd.sock"))
    runtime.answer_like(name="containerd", version="1.7.27",
                        info=cri_fake.containerd_info(enable_cdi=False))
    runtime.start()
    gpu = GpuNode.create(root, node=app_processes.first_node())
    process = app_processes.AppProcess(
        "apps.gpuplugin",
        gpu.plugin_args(kubeconfig=kubeconfig, container_runtime_endpoint=runtime.socket_path),
        log_path=tmp_path / "plugin.log",
    )
    try:
        gpuplugin_env.wait_registered(process, gpu.registration_socket)
        ref = gpuplugin_env.gpu_claim(cluster, "cdi-off", node=gpu.node, devices=("gpu-0",))

        refused = gpuplugin_env.prepare(gpu.dra_socket, ref, version="v1")

        assert "has CDI disabled (enableCDI=false)" in refused.error, process.output()
        assert not gpu.cdi_file(ref.uid).exists()
        assert "event=runtime_cdi_refusing" in process.output()
    finally:
        process.kill()
        runtime.stop()
        server.stop()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
