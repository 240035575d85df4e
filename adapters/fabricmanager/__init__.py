"""Adapter for NVIDIA Fabric Manager (gate FabricManagerPartitioning): whether the node has an
NVSwitch fabric (`detect`), and the partitions Fabric Manager supports and activates.

Two implementations of `core.ports.FabricManager`: the simulated Fabric Manager (`simulated`,
real HGX partition tables, activations kept in a file of the simulated driver root) and the
real one (`real.NvfmFabricManager`), which binds Fabric Manager's C library `libnvfm` with
ctypes in a child process per call (`fmctl`, `_nvfm`), as `adapters.nvml` binds NVML, so that
a crash in the library never takes the plugin down. `open_fabric_manager` picks one for a
driver root and an environment.
"""

from adapters.fabricmanager.address import Address, fabric_manager_address
from adapters.fabricmanager.detect import has_nvswitch_fabric
from adapters.fabricmanager.opening import open_fabric_manager
from adapters.fabricmanager.real import NvfmFabricManager
from adapters.fabricmanager.simulated import SimulatedFabricManager, state_path_in

__all__ = [
    "Address",
    "NvfmFabricManager",
    "SimulatedFabricManager",
    "fabric_manager_address",
    "has_nvswitch_fabric",
    "open_fabric_manager",
    "state_path_in",
]
