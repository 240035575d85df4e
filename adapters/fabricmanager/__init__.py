"""Adapter for NVIDIA Fabric Manager (gate FabricManagerPartitioning): whether the node has an
NVSwitch fabric (`detect`), and the partitions Fabric Manager supports and activates.

Only the simulated Fabric Manager (`simulated`, real HGX partition tables, activations kept in
a file of the simulated driver root) exists so far; the real one binds `libnvfm` in a child
process, as `adapters.nvml` binds NVML, so that a crash in the library never takes the plugin
down.
"""

from adapters.fabricmanager.address import Address, fabric_manager_address
from adapters.fabricmanager.detect import has_nvswitch_fabric
from adapters.fabricmanager.simulated import SimulatedFabricManager, state_path_in

__all__ = [
    "Address",
    "SimulatedFabricManager",
    "fabric_manager_address",
    "has_nvswitch_fabric",
    "state_path_in",
]
