"""The plugin finds the host driver's nvidia-imex tools under its driver-root mount."""

from __future__ import annotations

import logging
import pathlib

import pytest

from apps.kubeletplugin import daemon_claims
from apps.kubeletplugin import settings as plugin_settings
from core import names
from core.computedomain import modes, node_facts


def _executable(path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)


def test_both_tools_are_found_and_named_by_their_host_path(tmp_path: pathlib.Path) -> None:
    _executable(tmp_path / "usr/bin/nvidia-imex")
    _executable(tmp_path / "usr/sbin/nvidia-imex-ctl")
    found = daemon_claims.find_imex_binaries(str(tmp_path), host_driver_root="/run/nvidia/driver")
    assert [(b.host_path, b.container_path) for b in found] == [
        ("/run/nvidia/driver/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex"),
        ("/run/nvidia/driver/usr/sbin/nvidia-imex-ctl", "/usr/bin/nvidia-imex-ctl"),
    ]


def test_a_file_that_is_not_executable_is_not_offered(tmp_path: pathlib.Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-imex").write_text("not a program", encoding="utf-8")
    assert daemon_claims.find_imex_binaries(str(tmp_path), host_driver_root="/") == ()


def test_a_node_without_the_tools_says_so_once_in_the_log(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert daemon_claims.find_imex_binaries(str(tmp_path), host_driver_root="/") == ()
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n195 nvidia\n\nBlock devices:\n", encoding="utf-8")
    settings = plugin_settings.parse(
        ["--node-name", "n1", "--proc-devices", str(devices), "--nvidia-driver-root",
         str(tmp_path), "--plugin-dir", str(tmp_path / "plugin")], {},
    )
    node = node_facts.ImexNodeFacts(node_name=names.NodeName("n1"), clique_id="", channel_major=242,
                            boot_id="b")
    config = modes.resolve_driver_config(
        mode="driverManaged", isolation="domain", feature_gates="", namespace="ns"
    ).config
    with caplog.at_level(logging.WARNING):
        daemon_claims.with_daemon_facts(node, settings=settings, config=config)
    missing = [r for r in caplog.records if "imex_binaries_missing" in r.getMessage()]
    assert len(missing) == 1
    assert "install the nvidia-imex package" in missing[0].getMessage()

