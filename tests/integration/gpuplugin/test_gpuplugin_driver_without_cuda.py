"""`gpu-kubelet-plugin` on a driver root without libcuda (NVIDIA's mock NVML on a CPU-only CI host).

Upstream's plugin needs only libnvidia-ml.so.1 there: the container toolkit it builds CDI specs
with takes the driver's library directory and version from libcuda.so.<version>, else from
libnvidia-ml.so.<version>. Ours starts, registers and prepares likewise, mounting no libcuda.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import app_processes
import gpuplugin_env
import pytest
from gpuplugin_env import GpuNode

from adapters.fs import simulated_driverroot
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not gpuplugin_env.can_make_device_nodes(),
        reason="the plugin needs a character /dev/nvidiactl under its dev root: mknod needs root",
    ),
]


def test_gpu_plugin_without_libcuda_starts_and_mounts_the_nvml_driver_files(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpuapp-", dir="/tmp"))
    gpu = GpuNode.create(root, node=app_processes.first_node())
    lib = gpu.driver_root / simulated_driverroot.LIBRARY_DIR.lstrip("/")
    for name in ("libcuda.so.1", f"libcuda.so.{simulated_driverroot.DRIVER_VERSION}"):
        (lib / name).unlink()
    process = app_processes.AppProcess(
        "apps.gpuplugin", gpu.plugin_args(kubeconfig=kubeconfig), log_path=tmp_path / "plugin.log"
    )
    try:
        gpuplugin_env.wait_registered(process, gpu.registration_socket)
        ref = gpuplugin_env.gpu_claim(cluster, "no-cuda", node=gpu.node, devices=("gpu-0",))

        prepared = gpuplugin_env.prepare(gpu.dra_socket, ref, version="v1")

        assert prepared.error == "", process.output()
        mounts = gpuplugin_env.spec_mounts(gpuplugin_env.read_spec(gpu.cdi_file(ref.uid)))
        containers = {m["containerPath"] for m in mounts}
        assert f"{simulated_driverroot.LIBRARY_DIR}/libnvidia-ml.so.1" in containers
        assert not any(os.path.basename(p).startswith("libcuda.so") for p in containers)
    finally:
        process.kill()
        server.stop()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
