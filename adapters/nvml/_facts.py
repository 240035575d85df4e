"""NVML's raw numbers, sysfs paths and procfs text, turned into the facts upstream publishes.

The probe child reads raw values (brand and architecture enums, a CUDA version integer, a
PCI bus id buffer, GPU instance profile indices) and the upstream `gpu.nvidia.com` driver
publishes them as strings ("Nvidia", "Hopper", "13.0", "0000:1b:00.0", "3g.20gb"). The
translation lives here, pure (no I/O, no pynvml), so that it is tested without a GPU and a
claim written against upstream's attribute values selects the same devices here.

The tables follow NVML's `nvml.h` enums and go-nvlib's string forms; an enum value newer
than these tables gives None (the probe notes it) rather than a wrong string.
"""

from __future__ import annotations

import math
import re

# nvmlBrandType_t -> go-nvlib's GetBrandAsString().
_BRANDS: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}

# nvmlDeviceArchitecture_t -> go-nvlib's GetArchitectureAsString().
_ARCHITECTURES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
    0xFFFFFFFF: "Unknown",
}

# nvmlDeviceAddressingModeType_t -> go-nvlib's GetAddressingModeAsString().
_ADDRESSING_MODES: dict[int, str] = {0: "None", 1: "HMM", 2: "ATS"}

# NVML GPU instance profile index (NVML_GPU_INSTANCE_PROFILE_*) -> (GPU slices, attribute
# suffix of the profile name). The suffix follows go-nvlib: "+me", "+me.all", "+gfx", "-me".
_GI_PROFILES: dict[int, tuple[int, str]] = {
    0x0: (1, ""),
    0x1: (2, ""),
    0x2: (3, ""),
    0x3: (4, ""),
    0x4: (7, ""),
    0x5: (8, ""),
    0x6: (6, ""),
    0x7: (1, "+me"),
    0x8: (2, "+me"),
    0x9: (1, ""),
    0xA: (1, "+gfx"),
    0xB: (2, "+gfx"),
    0xC: (4, "+gfx"),
    0xD: (1, "-me"),
    0xE: (2, "-me"),
    0xF: (1, "+me.all"),
    0x10: (2, "+me.all"),
    0x11: (3, "+gfx"),
}
GPU_INSTANCE_PROFILE_COUNT = max(_GI_PROFILES) + 1

# NVML compute instance profile index (NVML_COMPUTE_INSTANCE_PROFILE_*) -> compute slices.
_CI_PROFILES: dict[int, int] = {
    0x0: 1,
    0x1: 2,
    0x2: 3,
    0x3: 4,
    0x4: 7,
    0x5: 8,
    0x6: 6,
    0x7: 1,
    0x8: 7,
}
COMPUTE_INSTANCE_PROFILE_COUNT = max(_CI_PROFILES) + 1

MIB = 1024 * 1024
_GIB = 1024 * MIB

_PCI_DOMAIN_PREFIX = re.compile(r"^0{4}[0-9a-f]{4}:")
_PCI_BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_MIG_MINOR_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")


def brand_name(brand: int) -> str | None:
    """Upstream's brand string for an NVML brand enum ("Nvidia" for 14); None if unknown."""
    return _BRANDS.get(brand)


def architecture_name(architecture: int) -> str | None:
    """Upstream's architecture string ("Hopper" for 9); None for a value newer than the table."""
    return _ARCHITECTURES.get(architecture)


def addressing_mode_name(mode: int) -> str | None:
    """ "ATS", "HMM" or "None" for NVML's addressing mode; None for an unknown value."""
    return _ADDRESSING_MODES.get(mode)


def compute_capability(major: int, minor: int) -> str:
    """CUDA compute capability as upstream writes it: "9.0"."""
    return f"{major}.{minor}"


def cuda_driver_version(version: int) -> str:
    """NVML's CUDA driver version integer (13000) as "13.0", as upstream formats it."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def pci_bus_id(raw: str | bytes) -> str:
    """NVML's bus id ("00000000:1B:00.0") in the sysfs form upstream publishes ("0000:1b:00.0").

    NB: NVML pads the domain to 8 hex digits; sysfs and upstream use 4. A domain that really
    needs more than 4 digits is kept whole.
    """
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    lowered = text.split("\x00", 1)[0].strip().lower()
    if _PCI_DOMAIN_PREFIX.match(lowered):
        return lowered[4:]
    return lowered


def is_pci_bus_id(text: str) -> bool:
    """Whether `text` is a normalised PCI address like "0000:1b:00.0"."""
    return _PCI_BUS_ID.match(text) is not None


def pcie_root(resolved_sysfs_path: str) -> str | None:
    """The PCIe root complex ("pci0000:15") of a device, from its resolved sysfs path.

    `/sys/bus/pci/devices/<bdf>` links to `/sys/devices/pci0000:15/0000:15:01.0/.../<bdf>`;
    the root is the `pci<domain>:<bus>` component, as Kubernetes' `pcieRoot` attribute reads it.
    """
    for component in resolved_sysfs_path.split("/"):
        if _PCIE_ROOT.match(component):
            return component
    return None


def numa_node(sysfs_text: str) -> int | None:
    """A device's `numa_node` file as a node number; None for -1 (no NUMA) or junk."""
    try:
        node = int(sysfs_text.strip())
    except ValueError:
        return None
    return node if node >= 0 else None


def mig_memory_gb(*, device_memory_bytes: int, mig_memory_mib: int) -> int:
    """The "<N>gb" of a MIG profile name, computed as go-nvlib does.

    The instance's share of the GPU's memory is rounded up to eighths and scaled to the GPU's
    memory in whole GiB (rounded up): 4864 MiB of a 40 GiB A100 is 1/8 of 40, so "5gb".
    """
    if device_memory_bytes <= 0:
        return 0
    fraction = math.ceil(mig_memory_mib * MIB / device_memory_bytes * 8) / 8
    total_gb = (device_memory_bytes + _GIB - 1) // _GIB
    # NB: Go's math.Round rounds halves away from zero; Python's round() would go to even.
    return math.floor(fraction * total_gb + 0.5)


def mig_profile_name(
    *,
    gi_profile_index: int,
    ci_profile_index: int,
    mig_memory_mib: int,
    device_memory_bytes: int,
) -> str | None:
    """The profile as nvidia-smi names it ("3g.20gb", "1g.10gb+me", "1c.2g.10gb").

    Indices are NVML's profile enums (not the profile *ids* nvidia-smi lists); None when an
    index is newer than the tables here.
    """
    gi = _GI_PROFILES.get(gi_profile_index)
    compute_slices = _CI_PROFILES.get(ci_profile_index)
    if gi is None or compute_slices is None:
        return None
    gpu_slices, suffix = gi
    gb = mig_memory_gb(device_memory_bytes=device_memory_bytes, mig_memory_mib=mig_memory_mib)
    if compute_slices == gpu_slices:
        return f"{gpu_slices}g.{gb}gb{suffix}"
    return f"{compute_slices}c.{gpu_slices}g.{gb}gb{suffix}"


MigMinorKey = tuple[int, int, int | None]


def parse_mig_minors(text: str) -> dict[MigMinorKey, int]:
    """`/proc/driver/nvidia-caps/mig-minors` as {(gpu minor, gi id, ci id or None): cap minor}.

    Lines look like `gpu0/gi1/access 12` (a GPU instance) and `gpu0/gi1/ci0/access 13` (a
    compute instance in it); `config` and `monitor` lines and anything else are skipped.
    """
    minors: dict[MigMinorKey, int] = {}
    for line in text.splitlines():
        found = _MIG_MINOR_LINE.match(line.strip())
        if found is None:
            continue
        gpu, gi, ci, minor = found.groups()
        minors[(int(gpu), int(gi), None if ci is None else int(ci))] = int(minor)
    return minors
