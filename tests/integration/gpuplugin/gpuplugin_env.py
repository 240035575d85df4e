"""One simulated GPU node for the `gpu-kubelet-plugin` app tests, and the claims put to it.

`GpuNode` lays out what the plugin reads on a real host: a driver root (real ELF stubs and
ld cache from `adapters.fs.simulated_driverroot`) whose `usr/bin/nvidia-smi` is the stand-in
that records its calls, a dev root with real control nodes (root only), a boot id; and the
plugin's own directories. `gpu_claim` creates a claim as the scheduler leaves it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import app_processes
from app_processes import NAMESPACE, eventually

from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import client as grpc_client
from adapters.grpc import server as grpc_server
from adapters.memory import cluster as memory_cluster
from adapters.nvml import inventory as nvml_inventory
from adapters.nvsmi import simulated as nvsmi_simulated
from apps.cli import gpu_demo
from apps.gpuplugin import settings as gpu_settings
from core import kinds, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import devices as gpu_devices

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
TIME_SLICING_GATE = "TimeSlicingSettings=true"
VERSIONS: tuple[grpc_client.DRAVersion, ...] = ("v1", "v1beta1")


def can_make_device_nodes() -> bool:
    """Whether this process may mknod (the plugin refuses a dev root without /dev/nvidiactl)."""
    return os.geteuid() == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuNode:
    """One GPU node's files under `root` (short: unix socket paths max 107 bytes)."""

    root: pathlib.Path
    node: str

    @classmethod
    def create(cls, root: pathlib.Path, *, node: str, profile: str = "hgx-h100") -> GpuNode:
        made = cls(root=root, node=node)
        gpu_demo.lay_out_node_files(str(root), profile=profile, node_name=node)
        return made

    def inventory(self, profile: str) -> gpu_devices.GpuInventory:
        return nvml_inventory.gpu_discovery_from_spec(
            f"simulated:{profile}", node_name=self.node, driver_root=str(self.driver_root)
        ).gpu_inventory()

    @property
    def driver_root(self) -> pathlib.Path:
        return self.root / "driver"

    @property
    def dev_root(self) -> pathlib.Path:
        return self.root / "devroot"

    @property
    def smi_dir(self) -> pathlib.Path:
        return self.driver_root / "usr" / "bin"

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
    def dra_socket(self) -> pathlib.Path:
        return self.plugin_dir / names.DRA_SOCKET_NAME

    @property
    def registration_socket(self) -> pathlib.Path:
        return registration_socket(self.registry_dir)

    @property
    def checkpoint(self) -> pathlib.Path:
        return self.plugin_dir / gpu_settings.CHECKPOINT_FILE

    def cdi_file(self, claim_uid: str) -> pathlib.Path:
        return self.cdi_root / gpu_cdi.spec_file_name(claim_uid)

    def smi_calls(self) -> tuple[str, ...]:
        return nvsmi_simulated.calls(str(self.smi_dir))

    def plugin_args(
        self,
        *,
        kubeconfig: pathlib.Path,
        profile: str = "hgx-h100",
        feature_gates: str = TIME_SLICING_GATE,
        cdi_root: pathlib.Path | None = None,
        registry_dir: pathlib.Path | None = None,
        container_runtime_endpoint: str = "none",
    ) -> list[str]:
        """The command line the chart's container would run, pointed at this node's files
        (the container runtime CDI check off unless a stand-in runtime's socket is given: a
        runtime of this machine would not read the test's CDI root)."""
        return [
            "--container-runtime-endpoint", container_runtime_endpoint,
            "--node-name", self.node,
            "--nvml", f"simulated:{profile}",
            "--nvidia-driver-root", str(self.driver_root),
            "--dev-root", str(self.dev_root),
            "--boot-id-path", str(self.boot_id),
            "--proc-devices", str(self.proc_devices),
            "--plugin-dir", str(self.plugin_dir),
            "--registry-dir", str(registry_dir or self.registry_dir),
            "--cdi-root", str(cdi_root or self.cdi_root),
            "--kubeconfig", str(kubeconfig),
            "--feature-gates", feature_gates,
            "--health-port", "0",
            "--metrics-port", "0",
            # NB: a claim the API server does not know is retried this long before the answer.
            "--retry-budget-seconds", "1",
        ]


def registration_socket(registry_dir: pathlib.Path) -> pathlib.Path:
    """Where the GPU plugin serves registration in a (possibly shared) registry dir."""
    return registry_dir / grpc_server.registration_socket_name(DRIVER)


def wait_registered(
    process: app_processes.AppProcess, socket: pathlib.Path
) -> grpc_client.PluginInfo:
    """GetInfo on the registration socket, as the kubelet's plugin watcher does."""

    def probe() -> grpc_client.PluginInfo | None:
        if not process.running:
            raise AssertionError(
                f"{process.module} exited with {process.popen.returncode} before registering; "
                f"output:\n{process.output()}"
            )
        return grpc_client.try_register(str(socket))

    info: grpc_client.PluginInfo = eventually(
        probe, what=f"{socket} to answer GetInfo", timeout_s=app_processes.START_TIMEOUT_S
    )
    return info


def node_slices(
    cluster: memory_cluster.InMemoryCluster, *, node: str, driver: str = DRIVER
) -> list[dict[str, Any]]:
    return [
        dict(s)
        for s in cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"].get("nodeName") == node and s["spec"].get("driver") == driver
    ]


def wait_slice_devices(
    cluster: memory_cluster.InMemoryCluster, *, node: str
) -> dict[str, dict[str, Any]]:
    """The devices of the node's published gpu.nvidia.com slices, by name, once there are any."""

    def probe() -> dict[str, dict[str, Any]] | None:
        found = {
            d["name"]: d
            for s in node_slices(cluster, node=node)
            for d in s["spec"].get("devices", ())
        }
        return found or None

    found: dict[str, dict[str, Any]] = eventually(
        probe, what=f"a {DRIVER} ResourceSlice for node {node}"
    )
    return found


def gpu_config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": CONFIG_API_VERSION, "kind": "GpuConfig", **fields}


def time_slicing(interval: str) -> dict[str, Any]:
    return gpu_config(
        sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}
    )


def gpu_claim(
    cluster: memory_cluster.InMemoryCluster,
    name: str,
    *,
    node: str,
    devices: Sequence[str] = ("gpu-0",),
    device_class: str = GPU_CLASS,
    config: Mapping[str, Any] | None = None,
) -> models.ClaimRef:
    """A claim allocated `devices` on `node` and reserved for a pod bound there."""
    request = "gpu"
    created = cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": device_class, "count": len(devices),
            "allocationMode": "ExactCount"}}]}},
    })
    pod = cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda"}]},
    })
    allocation: dict[str, Any] = {"devices": {"results": [
        {"request": request, "driver": DRIVER, "pool": node, "device": device}
        for device in devices
    ]}}
    if config is not None:
        allocation["devices"]["config"] = [{
            "source": "FromClaim", "requests": [request],
            "opaque": {"driver": DRIVER, "parameters": dict(config)},
        }]
    cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
        patch={"status": {"allocation": allocation, "reservedFor": [
            {"resource": "pods", "name": f"{name}-pod", "uid": pod["metadata"]["uid"]}
        ]}},
    )
    return models.ClaimRef(
        uid=names.ClaimUID(created["metadata"]["uid"]), namespace=NAMESPACE, name=name
    )


def prepare(
    socket: pathlib.Path, ref: models.ClaimRef, *, version: grpc_client.DRAVersion = "v1"
) -> models.ClaimResult:
    with grpc_client.DRAClient(str(socket), version=version) as dra:
        return dra.prepare([ref])[ref.uid]


def unprepare(
    socket: pathlib.Path, ref: models.ClaimRef, *, version: grpc_client.DRAVersion = "v1"
) -> models.ClaimResult:
    with grpc_client.DRAClient(str(socket), version=version) as dra:
        return dra.unprepare([ref])[ref.uid]


def cdi_ids(result: models.ClaimResult) -> tuple[str, ...]:
    return tuple(i for d in result.devices for i in d.cdi_device_ids)


def read_spec(path: pathlib.Path) -> dict[str, Any]:
    """A written CDI spec, validated against the reference CDI schema."""
    import gpu_prep_fixtures  # tests/unit/gpu, put on the path by conftest

    spec: dict[str, Any] = gpu_prep_fixtures.check_cdi(
        json.loads(path.read_text(encoding="utf-8"))
    )
    return spec


def spec_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The spec-wide edits followed by every device's edits."""
    return [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]


def spec_node_paths(spec: Mapping[str, Any]) -> list[str]:
    return [n["path"] for e in spec_edits(spec) for n in e.get("deviceNodes", ())]


def spec_mounts(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [m for e in spec_edits(spec) for m in e.get("mounts", ())]


def spec_env(spec: Mapping[str, Any]) -> list[str]:
    return [v for e in spec_edits(spec) for v in e.get("env", ())]


def checkpoint_uids(
    path: pathlib.Path, codec: models.RecordCodec[Any] = gpu_records.CODEC
) -> set[str]:
    """Claims a plugin's checkpoint holds as prepared or being prepared (the GPU plugin's
    unless `codec` names the other half)."""
    current = fs_checkpoints.read_checkpoint(str(path), codec)  # snapshot + journal
    if current is None:
        return set()
    return {
        str(uid) for uid, entry in current.entries.items()
        if entry.state is not models.ClaimState.PREPARE_ABORTED
    }
