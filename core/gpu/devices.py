"""What the GPU half knows about a node's devices: full GPUs, MIG devices, VFIO functions.

Pure data, filled by discovery (`adapters.nvml` for GPUs and MIG devices, sysfs for VFIO) and
read by the slice, CDI and prepare planners in `core.gpu`. Names and units follow the upstream
`gpu.nvidia.com` driver, so a claim written for it selects the same devices here.
"""

from __future__ import annotations

import dataclasses
import re

from core.gpu import migprofiles

# The `type` attribute of each kind of device, as upstream publishes it.
GPU_TYPE = "gpu"
MIG_TYPE = "mig"
VFIO_TYPE = "vfio"

_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """One full GPU as NVML reports it; `minor` is its /dev/nvidia<minor> number."""

    minor: int
    index: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    # Dotted versions as NVML gives them ("9.0", "580.65.06", "13.0"); the slice planner
    # turns them into the semantic versions the `version` attribute type needs.
    cuda_compute_capability: str
    driver_version: str
    cuda_driver_version: str
    pci_bus_id: str
    memory_bytes: int
    # "pci0000:00"-style PCIe root complex, when sysfs shows it.
    pcie_root: str | None = None
    numa_node: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    addressing_mode: str | None = None
    # The GPU instance profiles this GPU offers (with their placements), for dynamic MIG;
    # empty where discovery did not list them.
    mig_profiles: tuple[migprofiles.MigProfile, ...] = ()
    # The GPU's physical position on an NVSwitch baseboard (nvmlDeviceGetModuleId, 1-based),
    # which Fabric Manager's partitions name; None where NVML does not say (PCIe boards).
    module_id: int | None = None

    @property
    def name(self) -> str:
        """The device's name in the ResourceSlice (`gpu-<minor>`)."""
        return f"gpu-{self.minor}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigDeviceInfo:
    """One existing MIG device (a GPU instance with one compute instance) on a parent GPU."""

    uuid: str
    # The profile as nvidia-smi names it, e.g. "1g.10gb" or "3g.40gb".
    profile: str
    parent_uuid: str
    parent_minor: int
    gi_profile_id: int
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    memory_bytes: int
    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0
    # Minors of /dev/nvidia-caps/nvidia-cap<N> for this GPU and compute instance (from
    # /proc/driver/nvidia-caps/mig-minors); None where the host does not show them.
    gi_cap_minor: int | None = None
    ci_cap_minor: int | None = None

    @property
    def name(self) -> str:
        """Upstream's canonical name: gpu-<parent minor>-mig-<profile>-<profile id>-<start>."""
        return mig_device_name(
            parent_minor=self.parent_minor, profile=self.profile,
            gi_profile_id=self.gi_profile_id, placement_start=self.placement_start,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class VfioDeviceInfo:
    """One NVIDIA PCI function that can be passed through (gate PassthroughSupport)."""

    index: int
    uuid: str
    device_id: str
    vendor_id: str
    product_name: str
    pci_bus_id: str
    iommu_group: int
    addressable_memory_bytes: int
    pcie_root: str | None = None
    numa_node: int | None = None
    iommu_fd_enabled: bool = False
    # The minor of the full GPU this function is while bound to nvidia, when known.
    parent_minor: int | None = None

    @property
    def name(self) -> str:
        """The device's name in the ResourceSlice (`gpu-vfio-<index>`)."""
        return f"gpu-vfio-{self.index}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuInventory:
    """Everything the GPU half publishes for one node, in discovery order."""

    gpus: tuple[GpuInfo, ...] = ()
    migs: tuple[MigDeviceInfo, ...] = ()
    vfios: tuple[VfioDeviceInfo, ...] = ()

    def gpu_by_minor(self, minor: int) -> GpuInfo | None:
        """The full GPU with this minor, if the node has it."""
        return next((gpu for gpu in self.gpus if gpu.minor == minor), None)


def mig_device_name(
    *, parent_minor: int, profile: str, gi_profile_id: int, placement_start: int
) -> str:
    """Upstream's canonical MIG name: the profile loses its dots and becomes a DNS label
    ("1g.5gb+me" -> "1g5gb-me"), so that devices sort smallest profile first."""
    label = _rfc1123(profile.replace(".", ""))
    return f"gpu-{parent_minor}-mig-{label}-{gi_profile_id}-{placement_start}"


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class MigPlacement:
    """Where a MIG device lives: its GPU, GPU instance profile and placement start.

    What dynamic MIG creates and destroys; the GPU and compute instance ids come only once
    the device exists (`MigDeviceInfo`).
    """

    parent_minor: int
    gi_profile_id: int
    placement_start: int

    @classmethod
    def of(cls, mig: MigDeviceInfo) -> MigPlacement:
        """The placement of an existing MIG device."""
        return cls(
            parent_minor=mig.parent_minor, gi_profile_id=mig.gi_profile_id,
            placement_start=mig.placement_start,
        )

    @classmethod
    def from_name(cls, name: str) -> MigPlacement | None:
        """The placement a canonical MIG name (`gpu-0-mig-1g10gb-19-3`) stands for, else None."""
        parsed = parse_mig_name(name)
        if parsed is None:
            return None
        minor, profile_id, start = parsed
        return cls(parent_minor=minor, gi_profile_id=profile_id, placement_start=start)


def parse_mig_name(name: str) -> tuple[int, int, int] | None:
    """(parent minor, GI profile id, placement start) of a canonical MIG name, else None."""
    found = _MIG_NAME.match(name)
    if found is None:
        return None
    return int(found.group(1)), int(found.group(3)), int(found.group(4))


def _rfc1123(text: str) -> str:
    lowered = re.sub(r"[^a-z0-9-.]", "-", text.lower())
    return lowered.strip("-").removesuffix(".")[:253]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceNode:
    """A character device a prepared container gets (host path = container path)."""

    path: str
    major: int
    minor: int
    file_mode: int = 0o666


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverFiles:
    """The driver's user-space files on this host, found under the driver root.

    `host_path` is where the file is on this host (driver root included); `container_path`
    where a container sees it. Mounted read-only into every GPU container, so a container
    without the NVIDIA runtime hook can use the GPU.
    """

    # /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools (and /dev/nvidia-modeset if any).
    control_nodes: tuple[DeviceNode, ...] = ()
    # Libraries from the driver root's ld cache, binaries (nvidia-smi, ...), firmware.
    libraries: tuple[tuple[str, str], ...] = ()
    binaries: tuple[tuple[str, str], ...] = ()
    firmware: tuple[tuple[str, str], ...] = ()
    # Major numbers for /dev/nvidia<minor> and /dev/nvidia-caps/nvidia-cap<N>.
    nvidia_major: int = 195
    caps_major: int | None = None
    # The driver version (`580.65.06`) and the directory of libcuda (else libnvidia-ml), as a
    # container sees them; the hooks below need them. Empty where not known.
    driver_version: str = ""
    library_dir: str = ""
    # The library paths in `libraries` that are symlinks on the host (SONAME and `.so` links).
    library_links: tuple[LibraryLink, ...] = ()
    # Host path of NVIDIA's `nvidia-cdi-hook`: where set, specs carry the NVIDIA container
    # toolkit's createContainer hooks (core.gpu.cdi.driver_hooks); empty, none.
    cdi_hook_path: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LibraryLink:
    """A driver library path that is a symlink on the host: `path` -> `target` (as written).

    `file` is the real library it leads to (a container path, like `path`).
    """

    path: str
    target: str
    file: str
