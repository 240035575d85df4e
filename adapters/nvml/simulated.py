"""Simulated GPU nodes, so the whole driver runs (demo, tests) without a GPU or a driver.

A profile is a fleet of nodes with deterministic names, GPU UUIDs and fabric info:

- `gb200-nvl72`: one GB200 NVL72 rack, 18 nodes x 4 GPUs, all in one NVLink clique;
- `gb200-2racks`: two such racks, each its own clique (distinct cluster UUID and id);
- `h100`: one H100 node, 8 GPUs, no multi-node fabric (state NOT_SUPPORTED, zero UUID).

Everything is derived from names (uuid5), never random, so every run and every node
agree. `SimulatedNodeFiles` fakes the matching procfs facts for a node.

A node's fabric can be degraded on demand, as a fabric manager or NVLink switch failure would:
`degrade_simulated_fabric` writes the state some GPUs report into a file under the simulated
driver root (`fabric_state_path`), read again at every `fabric_records()`;
`restore_simulated_fabric` removes it. It mirrors how the GPU half simulates health events
with a file (`adapters.nvml.health_events.raise_simulated_event`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from typing import Any

from core import errors, models, names

DEFAULT_CHANNEL_MAJOR = 242
# The driver simulated nodes run (a 580 driver, as the GPU half's simulated GPUs report).
DEFAULT_DRIVER_VERSION = "580.65.06"
# Fixed namespace for every derived identifier of the simulation (any constant UUID works).
SIMULATION_NAMESPACE = uuid.UUID("5e0c6a51-3f0b-4d3e-9a57-6b1c0de0a1d7")
_ZERO_CLUSTER_UUID = b"\x00" * 16
# The simulated driver root's state directory (the GPU half keeps its MIG state there too:
# `adapters.nvml.gpu_simulation.STATE_DIR`) and the fabric state file in it.
STATE_DIR = "var/lib/nvidia-simulated"
FABRIC_STATE_FILE = "fabric-state.json"
# The key of a fabric state entry that applies to every GPU of the node.
ALL_GPUS = "*"


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
        fabric_state_file: str | None = None,
    ) -> None:
        """`fabric_state` overrides the state of fabric GPUs (e.g. IN_PROGRESS: not ready);
        `fabric_state_file` (see `degrade_simulated_fabric`) overrides GPUs while it exists."""
        self.profile = get_profile(profile)
        self._driver_version = driver_version
        self.node_name = names.NodeName(node_name)
        self.fabric_state = fabric_state
        self.fabric_state_file = fabric_state_file
        self._rack = _rack_of(self.profile, self.node_name)

    def __repr__(self) -> str:
        return f"SimulatedInventory(profile={self.profile.name!r}, node_name={self.node_name!r})"

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        """The node's GPUs, sorted by UUID; identical on every call while the fabric state
        file says nothing. DriverError when that file cannot be read (as NVML failing)."""
        overrides = _read_fabric_state(self.fabric_state_file)
        records = []
        for index in range(self.profile.gpus_per_node):
            record = self._record(index)
            override = overrides.get(record.gpu_uuid) or overrides.get(ALL_GPUS)
            if override is not None:
                record = dataclasses.replace(record, state=override[0], status_ok=override[1])
            records.append(record)
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


def fabric_state_path(driver_root: str) -> str | None:
    """The fabric state file of a simulated driver root; None for "/" (the real root is never
    a simulated one: nothing there is read)."""
    if os.path.normpath(driver_root) == "/":
        return None
    return os.path.join(driver_root, STATE_DIR, FABRIC_STATE_FILE)


def degrade_simulated_fabric(
    path: str,
    *,
    gpu_uuid: str = ALL_GPUS,
    state: models.FabricState = models.FabricState.COMPLETED,
    status_ok: bool = False,
) -> None:
    """From the next read on, GPU `gpu_uuid` (every GPU: `ALL_GPUS`) reports `state` and
    `status_ok`; the default is a registration COMPLETED with an error status. Other entries
    of the file are kept. Written atomically: a concurrent read sees the old or the new file."""
    entries = dict(_load_entries(path))
    entries[gpu_uuid] = {"state": state.name, "statusOk": status_ok}
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{FABRIC_STATE_FILE}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entries, f, sort_keys=True)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def restore_simulated_fabric(path: str) -> None:
    """Every GPU reports its profile's fabric again (the state file is removed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _load_entries(path: str | None) -> Mapping[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise errors.DriverError(f"simulated fabric state {path} is unreadable: {exc}") from exc
    if not isinstance(raw, dict):
        raise errors.DriverError(f"simulated fabric state {path}: want a JSON object by GPU "
                                 f"UUID, got {str(raw)[:100]}")
    return raw


def _read_fabric_state(path: str | None) -> dict[str, tuple[models.FabricState, bool]]:
    """GPU UUID (or `ALL_GPUS`) -> (state, status ok) from the file; {} without one."""
    found: dict[str, tuple[models.FabricState, bool]] = {}
    for gpu, entry in _load_entries(path).items():
        try:
            state = models.FabricState[entry["state"]]
            status_ok = entry.get("statusOk", True)
            if not isinstance(status_ok, bool):
                raise TypeError("statusOk must be true or false")
        except (KeyError, TypeError, AttributeError) as exc:
            raise errors.DriverError(
                f"simulated fabric state {path}: entry {gpu!r} is malformed ({exc!r}); want "
                f"{{\"state\": one of {', '.join(s.name for s in models.FabricState)}, "
                "\"statusOk\": true|false}"
            ) from None
        found[str(gpu)] = (state, status_ok)
    return found


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
