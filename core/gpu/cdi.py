"""The per-claim CDI spec of a prepared `gpu.nvidia.com` claim (vendor `k8s.gpu.nvidia.com`).

One spec per claim, class `claim`, one CDI device per prepared device, named
`<claimUID>-<device>` after the device's name in the ResourceSlice (as upstream names them).
A device carries only its own device nodes: `/dev/nvidia<minor>` for a full GPU, the parent's
node plus its GPU- and compute-instance capability nodes for a MIG device, the vfio nodes for
a passthrough function. What every device of the claim needs goes into the spec-wide edits:
the control nodes, the driver's user-space files (libraries, binaries, firmware) mounted
read-only, so a container without the NVIDIA runtime hook can use the GPU, and
`NVIDIA_VISIBLE_DEVICES=void` so that a hook that is present injects nothing more.

Where the plugin knows a `nvidia-cdi-hook` binary on the host (`DriverFiles.cdi_hook_path`),
the spec-wide edits take the NVIDIA container toolkit's layout instead, as the upstream driver
writes them through nvcdi (toolkit v1.19): the versioned library files mounted `rbind,rprivate`,
and four createContainer hooks that make the container's view complete whatever distribution
it comes from: `create-symlinks` (SONAME and `.so` links), `enable-cuda-compat` (CUDA forward
compatibility libraries of the image, when newer than the host driver), `update-ldcache` (the
library folders into the container's ld cache) and `disable-device-node-modification`.

Spec-level helpers (`minimum_cdi_version`) come from the shared `core.cdi`.
"""

from __future__ import annotations

import fnmatch
import posixpath
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
# With the hooks: the toolkit's options for every driver-file mount (nvcdi v1.19).
HOOK_MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "rbind", "rprivate")
# The toolkit's hooks, in the order nvcdi lists them in the spec-wide edits.
CREATE_SYMLINKS: Final = "create-symlinks"
ENABLE_CUDA_COMPAT: Final = "enable-cuda-compat"
UPDATE_LDCACHE: Final = "update-ldcache"
DISABLE_DEVICE_NODE_MODIFICATION: Final = "disable-device-node-modification"
HOOK_LIFECYCLE: Final = "createContainer"
HOOK_ENV: Final = "NVIDIA_CTK_DEBUG=false"
# Names the directory of libcuda in the container (nvcdi sets it beside its hooks).
LIBCUDA_DIR_ENV: Final = "NVIDIA_CTK_LIBCUDA_DIR"
# Links the toolkit adds whatever the host has, keyed by the versioned library they serve:
# (file name pattern, link target or "" for the file itself, link name).
_EXTRA_LINKS: Final = (
    ("libcuda.so.*.*", "libcuda.so.1", "libcuda.so"),
    ("libGLX_nvidia.so.*.*", "", "libGLX_indirect.so.0"),
    ("libnvidia-opticalflow.so.*.*", "libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
)
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
    hooked = driver_files and bool(files.cdi_hook_path)
    env = [VISIBLE_DEVICES_ENV]
    if hooked and files.library_dir:
        env.insert(0, f"{LIBCUDA_DIR_ENV}={files.library_dir}")
    edits: models.JSONObject = {"env": env}
    nodes: list[models.JSONObject] = []
    if driver_files:
        nodes.extend(node_json(n) for n in files.control_nodes)
    if vfio_api:
        # By path alone, as upstream: the runtime reads its numbers from the host.
        nodes.append({"path": vfio_api})
    if nodes:
        edits["deviceNodes"] = nodes
    if not driver_files:
        return edits
    libraries = files.libraries
    if hooked:
        # The hook makes the links: mount only what is not a link on the host.
        links = {link.path for link in files.library_links}
        libraries = tuple(pair for pair in libraries if pair[1] not in links)
    mounts = _mounts(
        (*libraries, *files.binaries, *files.firmware),
        options=HOOK_MOUNT_OPTIONS if hooked else MOUNT_OPTIONS,
    )
    if hooked:
        library_paths = {container_path for _, container_path in libraries}
        library_files = [
            str(m["containerPath"]) for m in mounts if m["containerPath"] in library_paths
        ]
        edits["hooks"] = driver_hooks(files, library_files=library_files)
    if mounts:
        edits["mounts"] = mounts
    return edits


def _mounts(
    pairs: Sequence[tuple[str, str]], *, options: Sequence[str]
) -> list[models.JSONObject]:
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
            "options": list(options),
        })
    return mounts


def hook(hook_path: str, name: str, *args: str) -> models.JSONObject:
    """One createContainer hook running `nvidia-cdi-hook <name> <args>` as nvcdi writes it.

    argv[0] is the binary's file name; `nvidia-ctk` (the toolkit's CLI, which also carries
    the hooks) takes them under its `hook` subcommand.
    """
    base = posixpath.basename(hook_path)
    fixed = [base, "hook"] if base == "nvidia-ctk" else [base]
    return {
        "hookName": HOOK_LIFECYCLE,
        "path": hook_path,
        "args": [*fixed, name, *args],
        "env": [HOOK_ENV],
    }


def driver_hooks(
    files: devices.DriverFiles, *, library_files: Sequence[str]
) -> list[models.JSONObject]:
    """The toolkit's hooks for the mounted library files, in nvcdi's order.

    `create-symlinks` is left out when there is no link to make; the other three are always
    there (an `enable-cuda-compat` without a known driver version does nothing).
    Deterministic: the same files give the same hooks in the same order.
    """
    path = files.cdi_hook_path
    hooks: list[models.JSONObject] = []
    links = library_symlinks(files, library_files=library_files)
    if links:
        hooks.append(hook(path, CREATE_SYMLINKS, *_flagged("--link", links)))
    version = files.driver_version
    compat = [f"--host-driver-version={version}"] if version and "*" not in version else []
    hooks.append(hook(path, ENABLE_CUDA_COMPAT, *compat))
    folders = ldcache_folders(library_files)
    hooks.append(hook(path, UPDATE_LDCACHE, *_flagged("--folder", folders)))
    hooks.append(hook(path, DISABLE_DEVICE_NODE_MODIFICATION))
    return hooks


def library_symlinks(
    files: devices.DriverFiles, *, library_files: Sequence[str]
) -> list[str]:
    """`target::link` for every link a container needs beside the mounted library files.

    Per file, in mount order: the toolkit's fixed link for it (`libcuda.so` ->
    `libcuda.so.1`, ...), then the host's links that lead to it, the one naming the file
    first (its SONAME link), then the rest (`.so` links) by path. Duplicates are dropped.
    """
    found: list[str] = []
    for file in library_files:
        directory, name = posixpath.split(file)
        for pattern, target, link in _EXTRA_LINKS:
            if fnmatch.fnmatchcase(name, pattern):
                found.append(f"{target or name}::{posixpath.join(directory, link)}")
        host_links = sorted(
            (link for link in files.library_links if link.file == file),
            key=lambda link: (link.target != name, link.path),
        )
        found.extend(f"{link.target}::{link.path}" for link in host_links)
    return list(dict.fromkeys(found))


def ldcache_folders(library_files: Sequence[str]) -> list[str]:
    """The directories of the library files (`lib?*.so[.N...]`), each once, in order."""
    folders = [posixpath.dirname(f) for f in library_files if _is_library_name(f)]
    return [folder for folder in dict.fromkeys(folders) if folder]


def _is_library_name(path: str) -> bool:
    # As the toolkit's check: `lib?*.so*` whose part after the last `.so` is empty or `.N`.
    base = posixpath.basename(path)
    if not fnmatch.fnmatchcase(base, "lib?*.so*"):
        return False
    tail = base.split(".so")[-1]
    return tail == "" or tail.startswith(".")


def _flagged(flag: str, values: Sequence[str]) -> list[str]:
    return [item for value in values for item in (flag, value)]


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
