"""Where Fabric Manager listens, as upstream resolves it from the environment.

Fabric Manager's API answers on a unix socket (`FM_CMD_UNIX_SOCKET_PATH` in its config) or on
TCP (`FM_CMD_BIND_INTERFACE`). Upstream's rule (pkg/fabricmanager/manager.go), kept so that
the same chart values reach the same Fabric Manager: `NVIDIA_FABRICMANAGER_ADDRESS` set, even
empty, selects TCP (empty: 127.0.0.1); otherwise the unix socket
`NVIDIA_FABRICMANAGER_UNIX_SOCKET`, or by default `run/nvidia-fabricmanager/socket` under the
driver root as this container sees it. Pure: the environment is passed in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Final

ADDRESS_ENV: Final = "NVIDIA_FABRICMANAGER_ADDRESS"
UNIX_SOCKET_ENV: Final = "NVIDIA_FABRICMANAGER_UNIX_SOCKET"
DEFAULT_ADDRESS: Final = "127.0.0.1"
DEFAULT_SOCKET: Final = "run/nvidia-fabricmanager/socket"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Address:
    """A Fabric Manager endpoint: a unix socket path, or a TCP host (FM's own port)."""

    address: str
    unix_socket: bool


def fabric_manager_address(env: Mapping[str, str], *, driver_root: str) -> Address:
    """The endpoint `env` names; `driver_root` is the driver root as this container sees it."""
    if ADDRESS_ENV in env:
        return Address(address=env[ADDRESS_ENV] or DEFAULT_ADDRESS, unix_socket=False)
    socket = env.get(UNIX_SOCKET_ENV) or os.path.join(driver_root, DEFAULT_SOCKET)
    return Address(address=socket, unix_socket=True)
