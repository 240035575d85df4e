"""Adapter for the node's GPUs: real NVML (probed in a child process) and simulated profiles.

Only `adapters.nvml.probe` imports `pynvml`, and it runs in its own process so that an
NVML crash or hang cannot take the plugin down.
"""

from adapters.nvml.inventory import inventory_from_spec
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
    "NvmlInventory",
    "NvmlProbeFailed",
    "NvmlUnavailable",
    "SimulatedInventory",
    "SimulatedNodeFiles",
    "inventory_from_spec",
    "profile_nodes",
    "simulated_boot_id",
    "simulated_proc_devices",
]
