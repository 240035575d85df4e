"""The Fabric Manager a plugin talks to: the simulated one in a simulated driver root, else
the real one (libnvfm, in a child process) at the address the environment names.

The real library is looked for under the driver root's library directories first (the
driver root the chart mounts holds the host's libraries, as for NVML), then where the loader
looks. It is loaded once here, in a child, so that a node without it fails at startup with
what to install rather than at every prepare.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from adapters.driverlib import child
from adapters.fabricmanager import address, real, simulated
from core import ports

log = logging.getLogger(__name__)

# The runtime library's SONAME first; the development link as upstream looks for it.
LIBRARY_NAMES: Final = ("libnvfm.so.1", "libnvfm.so")


def open_fabric_manager(*, driver_root: str, env: Mapping[str, str]) -> ports.FabricManager:
    """The Fabric Manager for `driver_root` (as this container sees it) and environment `env`.

    Raises `errors.PermanentError` where the real library cannot be loaded (the message names
    the package to install, or the gate to disable). Does not connect: an unreachable Fabric
    Manager is the calls' `errors.RetryableError`.
    """
    state_path = simulated.state_path_in(driver_root)
    if state_path is not None:
        log.info("event=fabric_manager_opened kind=simulated state=%s", state_path)
        return simulated.SimulatedFabricManager(state_path=state_path)
    endpoint = address.fabric_manager_address(env, driver_root=driver_root)
    library = child.find_library(driver_root, LIBRARY_NAMES) or LIBRARY_NAMES[0]
    manager = real.NvfmFabricManager(
        endpoint=endpoint, library=library, driver_root=driver_root, env=env
    )
    manager.check_library()
    log.info(
        "event=fabric_manager_opened kind=nvfm library=%s address=%s unix_socket=%s",
        library, endpoint.address, endpoint.unix_socket,
    )
    return manager
