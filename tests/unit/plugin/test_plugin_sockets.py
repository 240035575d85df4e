"""The plugin's socket names: fixed without a pod UID, per pod with one (rolling updates).

Covers: the fixed names; `<driver>-<uid>-reg.sock` and `dra-<uid>.sock`; the two shortened
registration names when the path would not fit a unix socket address; which names count as
DRA sockets.
"""

from __future__ import annotations

import pytest

from core import plugin_sockets

DRIVER = "compute-domain.nvidia.com"
UID = "0f4b2a5e-8c1d-4e2f-9a3b-7c6d5e4f3a2b"
SHORT_DIR = "/var/lib/kubelet/plugins_registry"


def test_without_a_pod_uid_the_names_are_the_fixed_ones() -> None:
    assert plugin_sockets.registration_socket_name(DRIVER) == f"{DRIVER}-reg.sock"
    assert plugin_sockets.dra_socket_name() == "dra.sock"


def test_with_a_pod_uid_both_names_carry_it() -> None:
    assert plugin_sockets.registration_socket_name(
        DRIVER, pod_uid=UID, registry_dir=SHORT_DIR) == f"{DRIVER}-{UID}-reg.sock"
    assert plugin_sockets.dra_socket_name(pod_uid=UID) == f"dra-{UID}.sock"


@pytest.mark.parametrize(("dir_length", "expected_prefix"), [
    # The full name fits up to 108 bytes of path.
    (108 - len(f"/{DRIVER}-{UID}-reg.sock"), f"{DRIVER}-{UID}"),
    # One byte more: the UID's digest (11 characters) replaces it.
    (109 - len(f"/{DRIVER}-{UID}-reg.sock"), f"{DRIVER}-"),
    # Not even that fits: dra-<digest of driver and UID>.
    (108 - len(f"/{DRIVER}--reg.sock") - 10, "dra-"),
])
def test_a_registration_name_too_long_for_a_socket_path_is_shortened(
    dir_length: int, expected_prefix: str
) -> None:
    registry_dir = "/" + "r" * (dir_length - 1)
    name = plugin_sockets.registration_socket_name(
        DRIVER, pod_uid=UID, registry_dir=registry_dir)
    assert name.startswith(expected_prefix) and name.endswith("-reg.sock")
    if expected_prefix != f"{DRIVER}-{UID}":
        assert UID not in name
    if expected_prefix != "dra-":
        assert len(f"{registry_dir}/{name}") <= plugin_sockets.UNIX_PATH_MAX


def test_a_dra_socket_name_too_long_for_a_socket_path_carries_a_digest_of_the_uid() -> None:
    plugin_dir = "/" + "p" * (107 - len(f"/dra-{UID}.sock"))
    assert plugin_sockets.dra_socket_name(pod_uid=UID, plugin_dir=plugin_dir) == (
        f"dra-{UID}.sock")
    longer = plugin_dir + "p"
    name = plugin_sockets.dra_socket_name(pod_uid=UID, plugin_dir=longer)
    assert UID not in name and plugin_sockets.is_dra_socket_name(name)
    assert len(f"{longer}/{name}") <= plugin_sockets.UNIX_PATH_MAX


def test_shortened_names_are_deterministic_and_differ_per_pod() -> None:
    long_dir = "/" + "r" * 80
    first = plugin_sockets.registration_socket_name(DRIVER, pod_uid=UID, registry_dir=long_dir)
    assert first == plugin_sockets.registration_socket_name(
        DRIVER, pod_uid=UID, registry_dir=long_dir)
    assert first != plugin_sockets.registration_socket_name(
        DRIVER, pod_uid=UID.replace("0", "1"), registry_dir=long_dir)


@pytest.mark.parametrize(("name", "is_dra"), [
    ("dra.sock", True), (f"dra-{UID}.sock", True), (f"{DRIVER}-reg.sock", False),
    ("compute-domain-plugin.checkpoint.json", False), ("dra-x.sock.tmp", False),
])
def test_dra_socket_names_are_recognised(name: str, is_dra: bool) -> None:
    assert plugin_sockets.is_dra_socket_name(name) is is_dra
