"""The per-claim CDI spec of a prepared `gpu.nvidia.com` claim (vendor `k8s.gpu.nvidia.com`).

One spec per claim, class `claim`, one CDI device per prepared device, named
`<claimUID>-<device>` after the device's name in the ResourceSlice (as upstream names them).
A device carries only its own device nodes: `/dev/nvidia<minor>` for a full GPU, the parent's
node plus its GPU- and compute-instance capability nodes for a MIG device, the vfio nodes for
a passthrough function. What every device of the claim needs goes into the spec-wide edits:
the control nodes, the driver's user-space files (libraries, binaries, firmware) mounted
read-only, so a container without the NVIDIA runtime hook can use the GPU, and
`NVIDIA_VISIBLE_DEVICES=void` so that a hook that is present injects nothing more.

Spec-level helpers (`minimum_cdi_version`) come from the shared `core.cdi`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from core import cdi, errors, models
from core.gpu import devices

VENDOR: Final = "k8s.gpu.nvidia.com"
CLASS_CLAIM: Final = "claim"
KIND_CLAIM: Final = f"{VENDOR}/{CLASS_CLAIM}"

# The legacy NVIDIA hook reads this variable: "void" makes it add nothing, so the devices a
# container gets are exactly the CDI devices of its claims (upstream sets the same).
VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES=void"
# Options of every driver-file bind mount, as the NVIDIA container toolkit's CDI specs use.
MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "bind")
CAPS_DIR: Final = "/dev/nvidia-caps"
VFIO_DIR: Final = "/dev/vfio"
# The IOMMU API device a VfioDeviceConfig may ask for: the legacy vfio container device, or
# the iommufd device where the config prefers iommufd and the host has it.
VFIO_API_NODE: Final = f"{VFIO_DIR}/vfio"
IOMMU_API_NODE: Final = "/dev/iommu"
API_NODES: Final = (VFIO_API_NODE, IOMMU_API_NODE)


def spec_file_name(claim_uid: str) -> str:
    """File name of a claim's spec in the CDI root: `k8s.gpu.nvidia.com-claim_<uid>.json`."""
    return f"{VENDOR}-{CLASS_CLAIM}_{claim_uid}.json"


def device_name(claim_uid: str, device: str) -> str:
    """CDI device name of one prepared device of a claim: `<claimUID>-<device>`."""
    return f"{claim_uid}-{device}"


def qualified_name(claim_uid: str, device: str) -> str:
    """`k8s.gpu.nvidia.com/claim=<claimUID>-<device>`: the id the kubelet hands the runtime."""
    return f"{KIND_CLAIM}={device_name(claim_uid, device)}"


def slice_device_of(claim_uid: str, cdi_device: str) -> str | None:
    """The slice device name a CDI device of this claim stands for, or None if not ours."""
    prefix = device_name(claim_uid, "")
    name = cdi_device.removeprefix(prefix)
    return name if name != cdi_device and name else None


def gpu_node_path(minor: int) -> str:
    return f"/dev/nvidia{minor}"


def cap_node_path(minor: int) -> str:
    return f"{CAPS_DIR}/nvidia-cap{minor}"


def node_json(node: devices.DeviceNode) -> models.JSONObject:
    """A CDI `deviceNodes[]` entry for a character device (host path = container path)."""
    return {
        "path": node.path,
        "type": "c",
        "major": node.major,
        "minor": node.minor,
        "fileMode": node.file_mode,
    }


def gpu_device(
    claim_uid: str, gpu: devices.GpuInfo, *, files: devices.DriverFiles
) -> models.JSONObject:
    """The CDI device of a full GPU: its `/dev/nvidia<minor>`."""
    node = devices.DeviceNode(
        path=gpu_node_path(gpu.minor), major=files.nvidia_major, minor=gpu.minor
    )
    return _device(claim_uid, gpu.name, [node_json(node)])


def mig_device(
    claim_uid: str, mig: devices.MigDeviceInfo, *, files: devices.DriverFiles
) -> models.JSONObject:
    """The CDI device of a MIG device: the parent's node plus its GI and CI capability nodes.

    Raises PermanentError when the node did not show the capability minors or the
    nvidia-caps major: without them a container cannot open the MIG device.
    """
    if files.caps_major is None or mig.gi_cap_minor is None or mig.ci_cap_minor is None:
        missing = "the nvidia-caps major (/proc/devices)" if files.caps_major is None else (
            "its capability minors (/proc/driver/nvidia-caps/mig-minors)"
        )
        raise errors.PermanentError(
            f"MIG device {mig.name} cannot be prepared: this node did not show {missing}; "
            "check that the driver root and /proc are mounted into the GPU plugin, then "
            "restart it"
        )
    parent = devices.DeviceNode(
        path=gpu_node_path(mig.parent_minor), major=files.nvidia_major, minor=mig.parent_minor
    )
    gi = devices.DeviceNode(
        path=cap_node_path(mig.gi_cap_minor), major=files.caps_major, minor=mig.gi_cap_minor
    )
    ci = devices.DeviceNode(
        path=cap_node_path(mig.ci_cap_minor), major=files.caps_major, minor=mig.ci_cap_minor
    )
    return _device(claim_uid, mig.name, [node_json(n) for n in (parent, gi, ci)])


def vfio_group_path(vfio: devices.VfioDeviceInfo) -> str:
    return f"{VFIO_DIR}/{vfio.iommu_group}"


def vfio_device(
    claim_uid: str,
    vfio: devices.VfioDeviceInfo,
    *,
    nodes: Sequence[devices.DeviceNode] | None = None,
) -> models.JSONObject:
    """The CDI device of a passthrough function: the vfio nodes discovery found for it.

    Without `nodes`, its legacy IOMMU group node `/dev/vfio/<group>` by path alone: its
    major is the vfio driver's, which the runtime reads from the host (as upstream does).
    """
    if nodes is None:
        listed: list[models.JSONObject] = [{"path": vfio_group_path(vfio)}]
    else:
        listed = [node_json(n) for n in nodes]
    return _device(claim_uid, vfio.name, listed)


def _device(claim_uid: str, name: str, nodes: list[models.JSONObject]) -> models.JSONObject:
    return {"name": device_name(claim_uid, name), "containerEdits": {"deviceNodes": nodes}}


def common_edits(
    files: devices.DriverFiles, *, driver_files: bool = True, vfio_api: str = ""
) -> models.JSONObject:
    """The spec-wide edits: env, control nodes and driver mounts (GPU/MIG), the IOMMU API node.

    `driver_files` False (a claim of passthrough functions only) leaves out the nvidia
    control nodes and mounts: a VM's GPU is driven by the guest, not the host's driver.
    """
    edits: models.JSONObject = {"env": [VISIBLE_DEVICES_ENV]}
    nodes: list[models.JSONObject] = []
    if driver_files:
        nodes.extend(node_json(n) for n in files.control_nodes)
    if vfio_api:
        # By path alone, as upstream: the runtime reads its numbers from the host.
        nodes.append({"path": vfio_api})
    if nodes:
        edits["deviceNodes"] = nodes
    if driver_files:
        mounts = _mounts((*files.libraries, *files.binaries, *files.firmware))
        if mounts:
            edits["mounts"] = mounts
    return edits


def _mounts(pairs: Sequence[tuple[str, str]]) -> list[models.JSONObject]:
    # NB: one mount per container path (the first wins): two mounts onto one path would
    # leave the container with whichever the runtime applies last.
    seen: set[str] = set()
    mounts: list[models.JSONObject] = []
    for host_path, container_path in pairs:
        if container_path in seen:
            continue
        seen.add(container_path)
        mounts.append({
            "hostPath": host_path,
            "containerPath": container_path,
            "options": list(MOUNT_OPTIONS),
        })
    return mounts


def claim_spec(
    *, devices_json: Sequence[Mapping[str, Any]], edits: Mapping[str, Any]
) -> models.JSONObject:
    """A `k8s.gpu.nvidia.com/claim` spec with these devices and spec-wide edits.

    Stamped with the lowest cdiVersion its fields need (`core.cdi.minimum_cdi_version`).
    """
    spec: models.JSONObject = {
        "kind": KIND_CLAIM,
        "devices": [dict(d) for d in devices_json],
        "containerEdits": dict(edits),
    }
    return {"cdiVersion": cdi.minimum_cdi_version(spec), **spec}


def spec_devices(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The CDI device names a spec (as read back from disk) lists; malformed items skipped."""
    listed = spec.get("devices")
    if not isinstance(listed, list):
        return ()
    return tuple(
        str(d["name"]) for d in listed if isinstance(d, Mapping) and isinstance(d.get("name"), str)
    )
