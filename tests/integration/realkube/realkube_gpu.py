"""The GPU half on a real kube-apiserver: the chart with `resources.gpus.enabled=true`, and the
`gpu-kubelet-plugin` run as the chart's second DaemonSet container would run it.

The plugin gets the env the rendered DaemonSet gives the `gpu-kubelet-plugin` container; only
node-local paths (plugin, registry and CDI dirs, driver and dev roots, boot id), the ports and
the simulated NVML are overridden for the test. Its kubeconfig carries a token of the DaemonSet's
ServiceAccount bound to a Pod on its node, so the chart's RBAC and slice admission policy are
all it has.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import realkube_driver
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, AppProcess, Driver
from realkube_server import RealKube, wait_for

from adapters.grpc import client as grpc_client
from apps.cli import gpu_demo
from core import kinds, models, names, plugin_sockets
from core.gpu import cdi as gpu_cdi

DRIVER = "gpu.nvidia.com"
GPU_CONTAINER = "gpu-kubelet-plugin"
PROFILE = "hgx-h100"
GPU_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")
# The ComputeDomain half in its default mode, the GPU half switched on (off by default).
GPU_VALUES: dict[str, Any] = {"resources": {"gpus": {"enabled": True}}}


def can_make_device_nodes() -> bool:
    """Whether this process may mknod (the plugin refuses a dev root without /dev/nvidiactl)."""
    return os.geteuid() == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuPluginNode:
    """One GPU node's files under `root` (short: unix socket paths are at most 107 bytes)."""

    name: str
    root: pathlib.Path

    @property
    def driver_root(self) -> pathlib.Path:
        return self.root / "driver"

    @property
    def dev_root(self) -> pathlib.Path:
        return self.root / "devroot"

    @property
    def boot_id(self) -> pathlib.Path:
        return self.root / "proc" / "boot_id"

    @property
    def proc_devices(self) -> pathlib.Path:
        return self.root / "proc" / "devices"

    @property
    def plugin_dir(self) -> pathlib.Path:
        return self.root / "plugin"

    @property
    def registry_dir(self) -> pathlib.Path:
        return self.root / "registry"

    @property
    def cdi_root(self) -> pathlib.Path:
        return self.root / "cdi"

    @property
    def pod_uid(self) -> str:
        """The UID the chart's downward API gives the GPU plugin pod (per-pod socket names)."""
        return f"uid-gpu-plugin-{self.name}"

    @property
    def dra_socket(self) -> pathlib.Path:
        return self.plugin_dir / plugin_sockets.dra_socket_name(
            pod_uid=self.pod_uid, plugin_dir=str(self.plugin_dir))

    @property
    def registration_socket(self) -> pathlib.Path:
        return self.registry_dir / plugin_sockets.registration_socket_name(
            DRIVER, pod_uid=self.pod_uid, registry_dir=str(self.registry_dir))

    def cdi_file(self, claim_uid: str) -> pathlib.Path:
        return self.cdi_root / gpu_cdi.spec_file_name(claim_uid)

    def lay_out(self) -> GpuPluginNode:
        """What the plugin reads on a host: a driver root, control nodes (root only), boot id."""
        gpu_demo.lay_out_node_files(str(self.root), profile=PROFILE, node_name=self.name)
        return self


class GpuDriver(Driver):
    """`Driver` with the chart rendered for GPUs; starts the GPU plugin as the chart would."""

    def __init__(self, kube: RealKube, *, workdir: pathlib.Path) -> None:
        super().__init__(kube, mode="driverManaged", workdir=workdir)
        self.rendered = realkube_driver.render(GPU_VALUES)

    def gpu_container_env(self, node: str) -> dict[str, str]:
        return realkube_driver.container_env(
            self.rendered, kind="DaemonSet", container=GPU_CONTAINER,
            field_refs={"metadata.namespace": NAMESPACE, "spec.nodeName": node,
                        "metadata.uid": f"uid-gpu-plugin-{node}"},  # GpuPluginNode.pod_uid
        )

    def gpu_plugin_node(self, node: str) -> GpuPluginNode:
        return GpuPluginNode(name=node, root=self.plugin_node(node).root).lay_out()

    def start_gpu_plugin(self, node: GpuPluginNode) -> AppProcess:
        """`gpu-kubelet-plugin` on `node` with the chart's env, paths and ports overridden."""
        env = self.gpu_container_env(node.name)
        env.update({
            "KUBECONFIG": str(self.plugin_credentials(node.name).kubeconfig),
            "HEALTH_PORT": "0", "METRICS_PORT": "0",
            "NVML": f"simulated:{PROFILE}",
            "CDI_ROOT": str(node.cdi_root),
            "PLUGIN_DIR": str(node.plugin_dir),
            "REGISTRY_DIR": str(node.registry_dir),
            # No runtime here: the CDI check judges "unknown" whatever runtime this machine runs
            # (and writes its Node condition, under the chart's RBAC).
            "CONTAINER_RUNTIME_ENDPOINT": str(node.root / "no-runtime.sock"),
            # The chart mounts the host's driver root at CONTAINER_DRIVER_ROOT; here both are one.
            "NVIDIA_DRIVER_ROOT": str(node.driver_root),
            "CONTAINER_DRIVER_ROOT": str(node.driver_root),
            "DEV_ROOT": str(node.dev_root),
            "BOOT_ID_PATH": str(node.boot_id),
            "PROC_DEVICES": str(node.proc_devices),
            "RETRY_BUDGET_SECONDS": "5",
            # A timing, not a path: a stale-claim round within the module (chart: 30 s).
            "STALE_CLAIM_CLEANUP_INTERVAL_SECONDS": "1",
            # Library debug lines: urllib3 logs each API request, which the RBAC test reads
            # (the chart's default, 4, keeps them quiet).
            "LOG_VERBOSITY": "7",
        })
        return self.launch("apps.gpuplugin", [], env)


def wait_gpu_registered(process: AppProcess, node: GpuPluginNode) -> grpc_client.PluginInfo:
    """GetInfo on the GPU plugin's registration socket, as the kubelet's plugin watcher does."""

    def probe() -> grpc_client.PluginInfo | None:
        if not process.running:
            raise AssertionError(f"gpu plugin exited before registering:\n{process.output()}")
        return grpc_client.try_register(str(node.registration_socket))

    return wait_for(
        probe, what="the GPU plugin to register", timeout_s=realkube_driver.START_TIMEOUT_S
    )


def allocated_gpu_claim(
    admin: Any, *, name: str, node: str, pod: Mapping[str, Any],
    devices: Sequence[str] = ("gpu-0",), device_class: str = "gpu.nvidia.com",
) -> models.ClaimRef:
    """A claim for `devices` on `node`, allocated and reserved for `pod` as the scheduler would."""
    request = "gpu"
    created = admin.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": device_class, "allocationMode": "ExactCount",
            "count": len(devices)}}]}},
    })
    admin.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=WORKLOAD_NAMESPACE, name=name, subresource="status",
        patch={"status": {
            "allocation": {"devices": {"results": [
                {"request": request, "driver": DRIVER, "pool": node, "device": device}
                for device in devices
            ]}},
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                             "uid": pod["metadata"]["uid"]}],
        }},
    )
    return models.ClaimRef(
        uid=names.ClaimUID(created["metadata"]["uid"]), namespace=WORKLOAD_NAMESPACE, name=name
    )
