"""Which nvidia-cdi-hook the GPU plugin names: configured, the image's copy, the driver root's."""

from __future__ import annotations

import os
import pathlib

from adapters.fs import cdihook


def _executable(path: pathlib.Path, body: bytes = b"#!/bin/sh\nexit 0\n") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    path.chmod(0o755)
    return path


def _locate(tmp_path: pathlib.Path, configured: str = "") -> cdihook.HookBinary:
    return cdihook.locate(
        configured, plugin_dir=str(tmp_path / "plugin"),
        container_driver_root=str(tmp_path / "driver-root"), host_driver_root="/run/nvidia/driver",
        image_path=str(tmp_path / "image/usr/bin/nvidia-cdi-hook"),
    )


def test_a_configured_path_is_taken_as_given_even_where_this_container_cannot_see_it(
    tmp_path: pathlib.Path,
) -> None:
    _executable(tmp_path / "image/usr/bin/nvidia-cdi-hook")
    found = _locate(tmp_path, configured="/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    assert found == cdihook.HookBinary(path="/usr/local/nvidia/toolkit/nvidia-cdi-hook",
                                       source=cdihook.Source.CONFIGURED)
    assert not (tmp_path / "plugin").exists()


def test_the_images_copy_goes_into_the_plugin_dir_executable(tmp_path: pathlib.Path) -> None:
    _executable(tmp_path / "image/usr/bin/nvidia-cdi-hook", b"hook v1")
    _executable(tmp_path / "driver-root/usr/bin/nvidia-cdi-hook")
    found = _locate(tmp_path)
    copy = tmp_path / "plugin" / "nvidia-cdi-hook"
    assert found == cdihook.HookBinary(path=str(copy), source=cdihook.Source.IMAGE)
    assert copy.read_bytes() == b"hook v1"
    assert os.access(copy, os.X_OK)
    # A restart with a newer image replaces the copy; no temporary file is left behind.
    _executable(tmp_path / "image/usr/bin/nvidia-cdi-hook", b"hook v2")
    assert _locate(tmp_path).path == str(copy)
    assert copy.read_bytes() == b"hook v2"
    assert sorted(p.name for p in (tmp_path / "plugin").iterdir()) == ["nvidia-cdi-hook"]


def test_else_the_driver_roots_toolkit_by_its_host_path(tmp_path: pathlib.Path) -> None:
    _executable(tmp_path / "driver-root/usr/bin/nvidia-cdi-hook")
    assert _locate(tmp_path) == cdihook.HookBinary(
        path="/run/nvidia/driver/usr/bin/nvidia-cdi-hook", source=cdihook.Source.DRIVER_ROOT
    )


def test_a_file_that_is_not_executable_does_not_count(tmp_path: pathlib.Path) -> None:
    (tmp_path / "driver-root/usr/bin").mkdir(parents=True)
    (tmp_path / "driver-root/usr/bin/nvidia-cdi-hook").write_bytes(b"")
    # NB: even root's access(X_OK) says no to a file without any x bit.
    assert _locate(tmp_path) == cdihook.HookBinary(path="", source=cdihook.Source.NONE)


def test_nothing_anywhere_means_no_hooks(tmp_path: pathlib.Path) -> None:
    assert _locate(tmp_path) == cdihook.HookBinary(path="", source=cdihook.Source.NONE)
