"""Fabric Manager's endpoint from the environment, by upstream's rule: the TCP address when
NVIDIA_FABRICMANAGER_ADDRESS is set (empty: localhost), else the unix socket variable, else the
socket under the driver root."""

from __future__ import annotations

import pytest

from adapters.fabricmanager import address
from adapters.fabricmanager.address import Address


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Address(address="/driver-root/run/nvidia-fabricmanager/socket", unix_socket=True)),
        ({"NVIDIA_FABRICMANAGER_UNIX_SOCKET": ""},
         Address(address="/driver-root/run/nvidia-fabricmanager/socket", unix_socket=True)),
        ({"NVIDIA_FABRICMANAGER_UNIX_SOCKET": "/run/fm.sock"},
         Address(address="/run/fm.sock", unix_socket=True)),
        ({"NVIDIA_FABRICMANAGER_ADDRESS": ""}, Address(address="127.0.0.1", unix_socket=False)),
        ({"NVIDIA_FABRICMANAGER_ADDRESS": "10.0.0.7", "NVIDIA_FABRICMANAGER_UNIX_SOCKET": "/x"},
         Address(address="10.0.0.7", unix_socket=False)),
    ],
    ids=["default-socket", "empty-socket", "socket", "empty-address", "address-wins"],
)
def test_endpoint_follows_upstreams_rule(env: dict[str, str], expected: Address) -> None:
    assert address.fabric_manager_address(env, driver_root="/driver-root") == expected
