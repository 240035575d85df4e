"""Adapter for the node's GPUs: real NVML (probed in a child process) and simulated profiles.

Only `adapters.nvml.probe`, `adapters.nvml.migctl` and `adapters.nvml.health_watch` import
`pynvml`, and each runs in its own process so that an NVML crash or hang cannot take the
plugin down.
"""

from adapters.nvml.gpu_simulation import (
    SimulatedGpus,
    gpu_profile_names,
    simulated_gpus,
)
from adapters.nvml.health_events import (
    NvmlHealthEvents,
    raise_simulated_event,
    simulated_events_path,
    simulated_health_events,
)
from adapters.nvml.inventory import gpu_discovery_from_spec, inventory_from_spec
from adapters.nvml.mig_real import NvmlMigFailed, NvmlMigPartitioner
from adapters.nvml.real import (
    NvmlError,
    NvmlInventory,
    NvmlProbeFailed,
    NvmlUnavailable,
)
from adapters.nvml.simulated import (
    PROFILES,
    SimulatedInventory,
    SimulatedNodeFiles,
    profile_nodes,
    simulated_boot_id,
    simulated_proc_devices,
)

__all__ = [
    "PROFILES",
    "NvmlError",
    "NvmlHealthEvents",
    "NvmlInventory",
    "NvmlMigFailed",
    "NvmlMigPartitioner",
    "NvmlProbeFailed",
    "NvmlUnavailable",
    "SimulatedGpus",
    "SimulatedInventory",
    "SimulatedNodeFiles",
    "gpu_discovery_from_spec",
    "gpu_profile_names",
    "inventory_from_spec",
    "profile_nodes",
    "raise_simulated_event",
    "simulated_boot_id",
    "simulated_events_path",
    "simulated_gpus",
    "simulated_health_events",
    "simulated_proc_devices",
]
