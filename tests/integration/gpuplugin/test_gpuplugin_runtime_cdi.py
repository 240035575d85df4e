"""`gpu-kubelet-plugin` as a process refuses prepares while the container runtime has CDI off.

The runtime is `adapters.grpc.cri_fake` on a unix socket, answering like containerd with
`enableCDI=false`; the plugin finds it through `--container-runtime-endpoint`, answers the
prepare with what is wrong and how to fix it, and logs `event=runtime_cdi_refusing`.
"""

from __future__ import annotations

from collections.abc import Iterator

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

from adapters.grpc import cri_fake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not gpuplugin_env.can_make_device_nodes(),
        reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
    ),
]


@pytest.fixture
def cdi_off(gpu_node: GpuNode) -> Iterator[cri_fake.FakeRuntime]:
    """A stand-in containerd 1.7 with CDI disabled, on a socket beside the node's files."""
    runtime = cri_fake.FakeRuntime(str(gpu_node.root / "containerd.sock"))
    runtime.answer_like(name="containerd", version="1.7.27",
                        info=cri_fake.containerd_info(enable_cdi=False))
    runtime.start()
    yield runtime
    runtime.stop()


def test_gpu_plugin_refuses_prepares_while_the_runtime_has_cdi_off(
    served: app_processes.ServedCluster, gpu_node: GpuNode, launch: app_processes.Launch,
    cdi_off: cri_fake.FakeRuntime,
) -> None:
    process = launch("apps.gpuplugin", gpu_node.plugin_args(
        kubeconfig=served.kubeconfig, container_runtime_endpoint=cdi_off.socket_path))
    gpuplugin_env.wait_registered(process, gpu_node.registration_socket)
    ref = gpuplugin_env.gpu_claim(served.cluster, "cdi-off", node=gpu_node.node,
                                  devices=("gpu-0",))

    refused = gpuplugin_env.prepare(gpu_node.dra_socket, ref, version="v1")

    assert "has CDI disabled (enableCDI=false)" in refused.error, process.output()
    assert not gpu_node.cdi_file(ref.uid).exists()
    assert "event=runtime_cdi_refusing" in process.output()
