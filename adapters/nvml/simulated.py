"""Simulated GPU nodes, so the whole driver runs (demo, tests) without a GPU or a driver.

A profile is a fleet of nodes with deterministic names, GPU UUIDs and fabric info:

- `gb200-nvl72`: one GB200 NVL72 rack, 18 nodes x 4 GPUs, all in one NVLink clique;
- `gb200-2racks`: two such racks, each its own clique (distinct cluster UUID and id);
- `h100`: one H100 node, 8 GPUs, no multi-node fabric (state NOT_SUPPORTED, zero UUID).

Everything is derived from names (uuid5), never random, so every run and every node
agree. `SimulatedNodeFiles` fakes the matching procfs facts for a node.
"""

from __future__ import annotations

import dataclasses
import uuid

from core import models, names

DEFAULT_CHANNEL_MAJOR = 242
# The driver simulated nodes run (a 580 driver, as the GPU half's simulated GPUs report).
DEFAULT_DRIVER_VERSION = "580.65.06"
# Fixed namespace for every derived identifier of the simulation (any constant UUID works).
SIMULATION_NAMESPACE = uuid.UUID("5e0c6a51-3f0b-4d3e-9a57-6b1c0de0a1d7")
_ZERO_CLUSTER_UUID = b"\x00" * 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rack:
    """One NVLink domain: nodes in it share a cluster UUID and clique id."""

    name: str
    node_count: int
    clique_id: int
    fabric: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str
    node_prefix: str
    racks: tuple[Rack, ...]
    gpus_per_node: int
    gpu_name: str


_PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            name="gb200-nvl72",
            description="one GB200 NVL72 rack: 18 nodes x 4 GPUs, one NVLink clique",
            node_prefix="gb200",
            racks=(Rack(name="rack1", node_count=18, clique_id=1),),
            gpus_per_node=4,
            gpu_name="NVIDIA GB200",
        ),
        Profile(
            name="gb200-2racks",
            description="two GB200 NVL72 racks: 2 x 18 nodes x 4 GPUs, two NVLink cliques",
            node_prefix="gb200",
            racks=(
                Rack(name="rack1", node_count=18, clique_id=1),
                Rack(name="rack2", node_count=18, clique_id=2),
            ),
            gpus_per_node=4,
            gpu_name="NVIDIA GB200",
        ),
        Profile(
            name="h100",
            description="one H100 node: 8 GPUs, no multi-node NVLink fabric",
            node_prefix="h100",
            racks=(Rack(name="", node_count=1, clique_id=0, fabric=False),),
            gpus_per_node=8,
            gpu_name="NVIDIA H100 80GB HBM3",
        ),
    )
}

PROFILES: tuple[str, ...] = tuple(sorted(_PROFILES))


def get_profile(profile: str) -> Profile:
    """The profile of that name; ValueError listing the known ones otherwise."""
    try:
        return _PROFILES[profile]
    except KeyError:
        raise ValueError(
            f"unknown simulated GPU profile {profile!r}; known profiles: {', '.join(PROFILES)}"
        ) from None


def profile_nodes(profile: str) -> tuple[names.NodeName, ...]:
    """Every node of the profile, sorted (e.g. `gb200-rack1-node01` ... `gb200-rack2-node18`)."""
    spec = get_profile(profile)
    return tuple(sorted(node for rack in spec.racks for node in _rack_nodes(spec, rack)))


def cluster_uuid(profile: str, *, rack: str) -> bytes:
    """The NVLink cluster UUID (16 bytes) that the rack's GPUs report."""
    return uuid.uuid5(SIMULATION_NAMESPACE, f"cluster/{profile}/{rack}").bytes


def simulated_gpu_uuid(node_name: str, index: int) -> str:
    """The UUID of GPU `index` of a simulated node (the same for fabric and GPU profiles)."""
    return "GPU-" + str(uuid.uuid5(SIMULATION_NAMESPACE, f"gpu/{node_name}/{index}"))


def simulated_boot_id(node_name: str, *, boot: int = 0) -> str:
    """A deterministic boot ID for a node; a different `boot` simulates a reboot."""
    return str(uuid.uuid5(SIMULATION_NAMESPACE, f"boot/{node_name}/{boot}"))


def simulated_proc_devices(major: int = DEFAULT_CHANNEL_MAJOR) -> str:
    """Text shaped like /proc/devices on a GPU node, with IMEX channels at `major`."""
    char_devices = sorted(
        [
            (1, "mem"),
            (4, "tty"),
            (5, "/dev/tty"),
            (10, "misc"),
            (195, "nvidia-frontend"),
            (major, names.IMEX_CHANNELS_PROC_NAME),
            (509, "nvidia-nvswitch"),
            (510, "nvidia-uvm"),
            (511, "nvidia-caps"),
        ]
    )
    lines = ["Character devices:"]
    lines += [f"{number:3d} {name}" for number, name in char_devices]
    lines += ["", "Block devices:", "  7 loop", "259 blkext", ""]
    return "\n".join(lines)


class SimulatedInventory:
    """`core.ports.DeviceInventory` for one node of a simulated profile."""

    def __init__(
        self,
        *,
        profile: str,
        node_name: str,
        fabric_state: models.FabricState | None = None,
        driver_version: str = DEFAULT_DRIVER_VERSION,
    ) -> None:
        """`fabric_state` overrides the state of fabric GPUs (e.g. IN_PROGRESS: not ready)."""
        self.profile = get_profile(profile)
        self._driver_version = driver_version
        self.node_name = names.NodeName(node_name)
        self.fabric_state = fabric_state
        self._rack = _rack_of(self.profile, self.node_name)

    def __repr__(self) -> str:
        return f"SimulatedInventory(profile={self.profile.name!r}, node_name={self.node_name!r})"

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        """The node's GPUs, sorted by UUID; identical on every call."""
        records = (self._record(index) for index in range(self.profile.gpus_per_node))
        return tuple(sorted(records, key=lambda record: record.gpu_uuid))

    def driver_version(self) -> str:
        return self._driver_version

    def _record(self, index: int) -> models.FabricRecord:
        gpu_uuid = simulated_gpu_uuid(self.node_name, index)
        if not self._rack.fabric:
            return models.FabricRecord(
                gpu_uuid=gpu_uuid,
                state=models.FabricState.NOT_SUPPORTED,
                cluster_uuid=_ZERO_CLUSTER_UUID,
                clique_id=0,
            )
        return models.FabricRecord(
            gpu_uuid=gpu_uuid,
            state=self.fabric_state or models.FabricState.COMPLETED,
            cluster_uuid=cluster_uuid(self.profile.name, rack=self._rack.name),
            clique_id=self._rack.clique_id,
        )


class SimulatedNodeFiles:
    """`core.ports.NodeFiles` for a simulated node: IMEX major and a deterministic boot ID."""

    def __init__(
        self, *, node_name: str, channel_major: int = DEFAULT_CHANNEL_MAJOR, boot: int = 0
    ) -> None:
        self.node_name = node_name
        self.channel_major = channel_major
        self.boot = boot

    def __repr__(self) -> str:
        return f"SimulatedNodeFiles(node_name={self.node_name!r}, boot={self.boot})"

    def proc_devices(self) -> str:
        return simulated_proc_devices(self.channel_major)

    def boot_id(self) -> str:
        return simulated_boot_id(self.node_name, boot=self.boot)


def _rack_nodes(profile: Profile, rack: Rack) -> tuple[names.NodeName, ...]:
    stem = f"{profile.node_prefix}-{rack.name}" if rack.name else profile.node_prefix
    return tuple(names.NodeName(f"{stem}-node{n:02d}") for n in range(1, rack.node_count + 1))


def _rack_of(profile: Profile, node_name: names.NodeName) -> Rack:
    for rack in profile.racks:
        if node_name in _rack_nodes(profile, rack):
            return rack
    nodes = profile_nodes(profile.name)
    raise ValueError(
        f"node {node_name!r} is not part of simulated profile {profile.name!r}; its nodes are "
        f"{nodes[0]} .. {nodes[-1]} (see profile_nodes({profile.name!r}))"
    )
