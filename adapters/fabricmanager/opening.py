"""Opens the Fabric Manager the GPU plugin talks to (gate FabricManagerPartitioning).

A simulated driver root (`simulated.state_path_in` finds its state directory) gets the
simulated Fabric Manager, its activations in that root; a real one needs the `libnvfm` client,
which is not built yet.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.fabricmanager import address, simulated
from core import errors, ports


def open_fabric_manager(*, driver_root: str, env: Mapping[str, str]) -> ports.FabricManager:
    """The Fabric Manager for `driver_root` (as this container sees it); PermanentError where
    none can be opened."""
    state_path = simulated.state_path_in(driver_root)
    if state_path is not None:
        return simulated.SimulatedFabricManager(state_path=state_path)
    endpoint = address.fabric_manager_address(env, driver_root=driver_root)
    raise errors.PermanentError(
        f"feature gate FabricManagerPartitioning is on and this node has an NVSwitch fabric, "
        f"but this driver cannot talk to a real Fabric Manager yet (it would use "
        f"{'unix socket' if endpoint.unix_socket else 'TCP'} {endpoint.address}); set "
        "FabricManagerPartitioning=false on this node"
    )
