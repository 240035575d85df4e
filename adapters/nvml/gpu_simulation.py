"""Simulated GPU nodes for the `gpu.nvidia.com` half, so it runs (demo, tests) without a GPU.

Profiles (one node each):

- `hgx-h100`: an 8-GPU HGX H100 board ("NVIDIA H100 80GB HBM3"), GPUs 0-3 on NUMA node 0
  and 4-7 on node 1, each behind its own PCIe root complex; MIG capable, MIG off; NVSwitch
  baseboard (module ids 1-8, for Fabric Manager's partitions).
- `a100-mig`: two "NVIDIA A100-SXM4-40GB"; GPU 0 in MIG mode with four existing MIG
  devices (2g.10gb, 1g.5gb, 1g.5gb, 3g.20gb: all seven compute and eight memory slices),
  GPU 1 not in MIG mode.
- `gb200`: a GB200 compute tray, 4 x "NVIDIA GB200" on two Grace sockets, coherent (ATS).

The GPU instance profiles (ids, memory, engine counts, placements) are NVIDIA's for these
GPUs as `nvidia-smi mig -lgip` / `-lgipp` list them (`core.gpu.migprofiles`). MIG devices
can be created and destroyed (`core.ports.MigPartitioner`) under the rules the scheduler's
counters encode (`core.gpu.partitions`): a placement the profile lists, memory slices and
engines not taken, MIG mode on (switched on and off without a reset on Hopper and later
only). UUIDs derive
from the node name (uuid5), the full GPUs' the same as `adapters.nvml.simulated` gives the
fabric records of a node of that name, so both halves of a simulated node agree.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import uuid

from adapters.nvml import simulated
from core import errors
from core.gpu import devices, migprofiles, partitions

logger = logging.getLogger(__name__)

DRIVER_VERSION = "580.65.06"
CUDA_DRIVER_VERSION = "13.0"
DEFAULT_NODE_NAME = "gpu-node01"
_MIB = 1024 * 1024
_BRAND = "Nvidia"  # what NVML reports for data-center GPUs on current drivers


# The GPU instance profile type lives in core (dynamic MIG publishes it); kept here by name.
MigProfile = migprofiles.MigProfile


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigDevice:
    """An existing MIG device of a simulated GPU: a profile at a placement, with its ids."""

    profile: str
    placement_start: int
    gi_id: int
    ci_id: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gpu:
    """One simulated GPU's place on the node."""

    pci_bus_id: str
    numa_node: int
    pcie_root: str
    mig_enabled: bool = False
    migs: tuple[MigDevice, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuProfile:
    """A simulated node: one GPU model, several GPUs."""

    name: str
    description: str
    product_name: str
    architecture: str
    cuda_compute_capability: str
    memory_mib: int
    gpus: tuple[Gpu, ...]
    mig_capable: bool = True
    addressing_mode: str | None = None
    # The model's GPU instance profiles (`core.gpu.migprofiles`), all of them: dynamic MIG
    # publishes every profile x placement.
    mig_profiles: tuple[MigProfile, ...] = ()
    # Memory slices and compute slices of the whole GPU (8 and 7 on A100 and H100).
    memory_slices: int = 8
    compute_slices: int = 7
    # An NVSwitch baseboard: its GPUs report module ids (board positions 1..N in index
    # order), which Fabric Manager's partitions name (`adapters.fabricmanager.simulated`).
    nvswitch: bool = False

    def mig_profile(self, name: str) -> MigProfile:
        """The model's GPU instance profile of that name; ValueError if it has none."""
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.mig_profiles) or "none"
        raise ValueError(f"{self.product_name} has no MIG profile {name!r} (it has: {known})")


A100_40GB_MIG_PROFILES = migprofiles.A100_40GB

_HGX_H100_SLOTS = (
    # (PCI bus id, NUMA node, PCIe root): one root complex per GPU, as on HGX boards.
    ("0000:1b:00.0", 0, "pci0000:18"),
    ("0000:43:00.0", 0, "pci0000:40"),
    ("0000:52:00.0", 0, "pci0000:4f"),
    ("0000:61:00.0", 0, "pci0000:5e"),
    ("0000:9d:00.0", 1, "pci0000:9a"),
    ("0000:c3:00.0", 1, "pci0000:c0"),
    ("0000:d1:00.0", 1, "pci0000:ce"),
    ("0000:df:00.0", 1, "pci0000:dc"),
)

_PROFILES: dict[str, GpuProfile] = {
    profile.name: profile
    for profile in (
        GpuProfile(
            name="hgx-h100",
            description="an 8-GPU HGX H100 node (NVIDIA H100 80GB HBM3), MIG capable, MIG off",
            product_name="NVIDIA H100 80GB HBM3",
            architecture="Hopper",
            cuda_compute_capability="9.0",
            memory_mib=81559,
            mig_profiles=migprofiles.H100_80GB,
            nvswitch=True,
            gpus=tuple(
                Gpu(pci_bus_id=bus, numa_node=numa, pcie_root=root)
                for bus, numa, root in _HGX_H100_SLOTS
            ),
        ),
        GpuProfile(
            name="a100-mig",
            description=(
                "2 x NVIDIA A100-SXM4-40GB: GPU 0 in MIG mode with 2g.10gb, 1g.5gb, 1g.5gb and "
                "3g.20gb devices, GPU 1 not in MIG mode"
            ),
            product_name="NVIDIA A100-SXM4-40GB",
            architecture="Ampere",
            cuda_compute_capability="8.0",
            memory_mib=40960,
            mig_profiles=A100_40GB_MIG_PROFILES,
            gpus=(
                Gpu(
                    pci_bus_id="0000:07:00.0",
                    numa_node=0,
                    pcie_root="pci0000:00",
                    mig_enabled=True,
                    # GPU instance ids as the driver numbers them for these placements.
                    migs=(
                        MigDevice(profile="2g.10gb", placement_start=0, gi_id=3),
                        MigDevice(profile="1g.5gb", placement_start=2, gi_id=9),
                        MigDevice(profile="1g.5gb", placement_start=3, gi_id=10),
                        MigDevice(profile="3g.20gb", placement_start=4, gi_id=2),
                    ),
                ),
                Gpu(pci_bus_id="0000:0f:00.0", numa_node=0, pcie_root="pci0000:00"),
            ),
        ),
        GpuProfile(
            name="gb200",
            description="a GB200 compute tray: 4 x NVIDIA GB200 on two Grace sockets, MIG off",
            product_name="NVIDIA GB200",
            architecture="Blackwell",
            cuda_compute_capability="10.0",
            memory_mib=189471,
            addressing_mode="ATS",
            mig_profiles=migprofiles.GB200,
            gpus=(
                Gpu(pci_bus_id="0008:01:00.0", numa_node=0, pcie_root="pci0008:00"),
                Gpu(pci_bus_id="0009:01:00.0", numa_node=0, pcie_root="pci0009:00"),
                Gpu(pci_bus_id="0018:01:00.0", numa_node=1, pcie_root="pci0018:00"),
                Gpu(pci_bus_id="0019:01:00.0", numa_node=1, pcie_root="pci0019:00"),
            ),
        ),
    )
}


def gpu_profile_names() -> tuple[str, ...]:
    """The simulated GPU profiles, sorted: `a100-mig`, `gb200`, `hgx-h100`."""
    return tuple(sorted(_PROFILES))


def gpu_profile(name: str) -> GpuProfile:
    """The profile of that name; ConfigError listing the known ones otherwise."""
    try:
        return _PROFILES[name]
    except KeyError:
        raise errors.ConfigError(
            f"unknown simulated GPU profile {name!r}; known profiles: "
            f"{', '.join(gpu_profile_names())}"
        ) from None


# Where, under a simulated driver root (`adapters.fs.simulated_driverroot.install` makes the
# directory), the MIG state of the simulated GPUs lives, so that it outlives the plugin
# process as a real GPU's does.
STATE_DIR = "var/lib/nvidia-simulated"
STATE_FILE = "mig-state.json"


def simulated_gpus(
    profile: str, *, node_name: str = DEFAULT_NODE_NAME, state_path: str | None = None
) -> SimulatedGpus:
    """The simulated node `node_name` of a GPU profile; ConfigError for an unknown profile.
    With `state_path`, its MIG devices are read from and kept in that file."""
    return SimulatedGpus(profile=profile, node_name=node_name, state_path=state_path)


def state_path_in(driver_root: str) -> str | None:
    """The MIG state file of a simulated driver root; None where `driver_root` is none."""
    directory = os.path.join(driver_root, STATE_DIR)
    return os.path.join(directory, STATE_FILE) if os.path.isdir(directory) else None


def mig_cap_minor(*, gpu_minor: int, gi_id: int, ci_id: int | None = None) -> int:
    """The /dev/nvidia-caps minor the driver gives a GPU or compute instance.

    As `/proc/driver/nvidia-caps/mig-minors` lists them: 1 and 2 are config and monitor,
    then per GPU 15 GPU instances of 9 entries each (the instance, then its 8 compute
    instances): `gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`.
    """
    base = 3 + gpu_minor * 15 * 9 + gi_id * 9
    return base if ci_id is None else base + 1 + ci_id


class SimulatedGpus:
    """`core.ports.GpuDiscovery` and `core.ports.MigPartitioner` for one simulated node.

    The inventory is the same on every call until a MIG device is created or destroyed;
    the MIG state lives in this object (thread-safe), as it lives in the GPU across plugin
    restarts on a real node; with `state_path` also in that file (read at construction,
    replaced atomically on each change), so that it outlives the process too.
    """

    def __init__(
        self, *, profile: str, node_name: str = DEFAULT_NODE_NAME, state_path: str | None = None
    ) -> None:
        self.profile = gpu_profile(profile)
        self.node_name = node_name
        self._state_path = state_path
        self._lock = threading.Lock()
        self._gpus = _load_state(state_path, self.profile) or list(self.profile.gpus)
        self._inventory = _inventory(self.profile, self._gpus, node_name=node_name)

    def __repr__(self) -> str:
        return f"SimulatedGpus(profile={self.profile.name!r}, node_name={self.node_name!r})"

    def gpu_inventory(self) -> devices.GpuInventory:
        """The node's GPUs and MIG devices (no VFIO functions)."""
        with self._lock:
            return self._inventory

    def create_mig_device(self, placement: devices.MigPlacement) -> devices.MigDeviceInfo:
        """Create the MIG device at `placement`; PermanentError where NVML would refuse."""
        with self._lock:
            gpu, parent = self._gpu(placement.parent_minor)
            spec = _mig_spec(parent, placement)
            if not gpu.mig_enabled and not migprofiles.toggles_without_reset(parent.architecture):
                raise errors.PermanentError(
                    f"cannot create MIG device {spec.name}: MIG mode is off on {parent.name} "
                    f"and an {parent.architecture} GPU needs a reset to enable it; enable MIG "
                    f"mode (nvidia-smi -i {parent.index} -mig 1) and reset the GPU"
                )
            _check_free(parent, spec, existing=self._specs(placement.parent_minor))
            gi_id = min(set(range(1, 15)) - {m.gi_id for m in gpu.migs})
            created = MigDevice(
                profile=spec.profile.name, placement_start=spec.placement_start, gi_id=gi_id
            )
            self._replace(
                placement.parent_minor,
                dataclasses.replace(gpu, mig_enabled=True, migs=(*gpu.migs, created)),
            )
            logger.info(
                "event=mig_created device=%s gi_id=%d mig_mode_was=%s", spec.name, gi_id,
                "on" if gpu.mig_enabled else "off",
            )
            return next(m for m in self._inventory.migs if devices.MigPlacement.of(m) == placement)

    def destroy_mig_device(self, placement: devices.MigPlacement) -> bool:
        """Destroy the MIG device at `placement`; False if there is none."""
        with self._lock:
            gpu, parent = self._gpu(placement.parent_minor)
            kept = tuple(m for m in gpu.migs if self._placement(parent, m) != placement)
            if len(kept) == len(gpu.migs):
                return False
            mig_mode = bool(kept) or not migprofiles.toggles_without_reset(parent.architecture)
            self._replace(
                placement.parent_minor, dataclasses.replace(gpu, mig_enabled=mig_mode, migs=kept)
            )
            logger.info(
                "event=mig_destroyed gpu=%s gi_profile_id=%d placement_start=%d mig_mode=%s",
                parent.name, placement.gi_profile_id, placement.placement_start,
                "on" if mig_mode else "off",
            )
            return True

    def _gpu(self, minor: int) -> tuple[Gpu, devices.GpuInfo]:
        parent = self._inventory.gpu_by_minor(minor)
        if parent is None:
            raise errors.PermanentError(
                f"no GPU with minor {minor} on simulated node {self.node_name} "
                f"({len(self._gpus)} GPUs)"
            )
        if not parent.mig_capable:
            raise errors.PermanentError(f"{parent.name} ({parent.product_name}) is not MIG capable")
        return self._gpus[minor], parent

    def _placement(self, parent: devices.GpuInfo, mig: MigDevice) -> devices.MigPlacement:
        return devices.MigPlacement(
            parent_minor=parent.minor,
            gi_profile_id=self.profile.mig_profile(mig.profile).profile_id,
            placement_start=mig.placement_start,
        )

    def _specs(self, minor: int) -> tuple[partitions.MigSpec, ...]:
        gpu, parent = self._gpus[minor], self._inventory.gpus[minor]
        return tuple(
            partitions.MigSpec(
                parent=parent, profile=self.profile.mig_profile(m.profile),
                placement_start=m.placement_start,
            )
            for m in gpu.migs
        )

    def _replace(self, minor: int, gpu: Gpu) -> None:
        self._gpus[minor] = gpu
        self._inventory = _inventory(self.profile, self._gpus, node_name=self.node_name)
        if self._state_path is not None:
            _save_state(self._state_path, self.profile, self._gpus)


def _load_state(path: str | None, profile: GpuProfile) -> list[Gpu] | None:
    """The GPUs as `path` keeps them (None: no file, or another profile's)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return None
    if state.get("profile") != profile.name or len(state.get("gpus") or ()) != len(profile.gpus):
        return None
    return [
        dataclasses.replace(gpu, mig_enabled=bool(kept["migEnabled"]), migs=tuple(
            MigDevice(profile=str(m["profile"]), placement_start=int(m["placementStart"]),
                      gi_id=int(m["giId"]), ci_id=int(m["ciId"]))
            for m in kept["migs"]))
        for gpu, kept in zip(profile.gpus, state["gpus"], strict=True)
    ]


def _save_state(path: str, profile: GpuProfile, gpus: list[Gpu]) -> None:
    """Replace `path` with the GPUs' MIG state, atomically (the GPU's own state: no fault
    point, a kill never leaves it half-changed)."""
    state = {"profile": profile.name, "gpus": [
        {"migEnabled": gpu.mig_enabled, "migs": [
            {"profile": m.profile, "placementStart": m.placement_start, "giId": m.gi_id,
             "ciId": m.ci_id} for m in gpu.migs]}
        for gpu in gpus
    ]}
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _mig_spec(parent: devices.GpuInfo, placement: devices.MigPlacement) -> partitions.MigSpec:
    """The profile x placement `placement` names on `parent`; PermanentError if none."""
    profile = next(
        (p for p in parent.mig_profiles if p.profile_id == placement.gi_profile_id), None
    )
    if profile is None:
        known = ", ".join(f"{p.name} ({p.profile_id})" for p in parent.mig_profiles)
        raise errors.PermanentError(
            f"{parent.product_name} has no GPU instance profile {placement.gi_profile_id} "
            f"(it has: {known})"
        )
    if placement.placement_start not in profile.placement_starts:
        raise errors.PermanentError(
            f"profile {profile.name} cannot be placed at {placement.placement_start} on "
            f"{parent.name}; its placements start at {list(profile.placement_starts)}"
        )
    return partitions.MigSpec(
        parent=parent, profile=profile, placement_start=placement.placement_start
    )


def _check_free(
    parent: devices.GpuInfo, spec: partitions.MigSpec, *, existing: tuple[partitions.MigSpec, ...]
) -> None:
    """PermanentError unless `spec` fits beside `existing`: memory slices, then engines."""
    for other in existing:
        if set(other.memory_slices) & set(spec.memory_slices):
            raise errors.PermanentError(
                f"cannot create MIG device {spec.name}: its memory slices "
                f"{list(spec.memory_slices)} overlap those of existing MIG device {other.name}"
            )
    limits = partitions.max_amounts(parent)
    wanted = partitions.profile_amounts(spec.profile)
    for capacity, limit in limits.items():
        used = sum(partitions.profile_amounts(o.profile)[capacity] for o in existing)
        if used + wanted[capacity] > limit:
            raise errors.PermanentError(
                f"cannot create MIG device {spec.name}: {capacity} {used} in use + "
                f"{wanted[capacity]} wanted exceeds the {limit} of {parent.name}"
            )


def _inventory(
    profile: GpuProfile, slots: list[Gpu], *, node_name: str
) -> devices.GpuInventory:
    gpus = tuple(
        devices.GpuInfo(
            minor=index,
            index=index,
            uuid=simulated.simulated_gpu_uuid(node_name, index),
            product_name=profile.product_name,
            brand=_BRAND,
            architecture=profile.architecture,
            cuda_compute_capability=profile.cuda_compute_capability,
            driver_version=DRIVER_VERSION,
            cuda_driver_version=CUDA_DRIVER_VERSION,
            pci_bus_id=gpu.pci_bus_id,
            memory_bytes=profile.memory_mib * _MIB,
            pcie_root=gpu.pcie_root,
            numa_node=gpu.numa_node,
            mig_capable=profile.mig_capable,
            mig_enabled=gpu.mig_enabled,
            addressing_mode=profile.addressing_mode,
            mig_profiles=profile.mig_profiles if profile.mig_capable else (),
            module_id=index + 1 if profile.nvswitch else None,
        )
        for index, gpu in enumerate(slots)
    )
    migs = tuple(
        _mig(profile, parent=parent, mig=mig, node_name=node_name)
        for parent, gpu in zip(gpus, slots, strict=True)
        for mig in gpu.migs
    )
    return devices.GpuInventory(gpus=gpus, migs=migs)


def _mig(
    profile: GpuProfile, *, parent: devices.GpuInfo, mig: MigDevice, node_name: str
) -> devices.MigDeviceInfo:
    spec = profile.mig_profile(mig.profile)
    key = f"mig/{node_name}/{parent.minor}/{mig.gi_id}/{mig.ci_id}"
    return devices.MigDeviceInfo(
        uuid="MIG-" + str(uuid.uuid5(simulated.SIMULATION_NAMESPACE, key)),
        profile=spec.name,
        parent_uuid=parent.uuid,
        parent_minor=parent.minor,
        gi_profile_id=spec.profile_id,
        gi_id=mig.gi_id,
        ci_id=mig.ci_id,
        placement_start=mig.placement_start,
        placement_size=spec.placement_size,
        memory_bytes=spec.memory_mib * _MIB,
        multiprocessors=spec.multiprocessors,
        copy_engines=spec.copy_engines,
        decoders=spec.decoders,
        encoders=spec.encoders,
        jpeg_engines=spec.jpeg_engines,
        ofa_engines=spec.ofa_engines,
        gi_cap_minor=mig_cap_minor(gpu_minor=parent.minor, gi_id=mig.gi_id),
        ci_cap_minor=mig_cap_minor(gpu_minor=parent.minor, gi_id=mig.gi_id, ci_id=mig.ci_id),
    )
