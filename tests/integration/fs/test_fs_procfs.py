"""`ProcNodeFiles` reads procfs (or stand-in files) and names the file it could not read."""

from __future__ import annotations

import pathlib

import pytest

from adapters import fs
from core import errors


def test_proc_node_files_reads_overridden_paths(tmp_path: pathlib.Path) -> None:
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n242 nvidia-caps-imex-channels\n\nBlock devices:\n")
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("4f6c1a2e-0000-4000-8000-000000000001\n")
    files = fs.ProcNodeFiles(proc_devices_path=str(devices), boot_id_path=str(boot_id))
    assert "242 nvidia-caps-imex-channels" in files.proc_devices()
    assert files.boot_id() == "4f6c1a2e-0000-4000-8000-000000000001"


def test_proc_node_files_reads_this_machines_procfs() -> None:
    files = fs.ProcNodeFiles()
    assert "Character devices:" in files.proc_devices()
    assert len(files.boot_id()) == 36


def test_missing_proc_devices_is_a_config_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope" / "devices"
    files = fs.ProcNodeFiles(proc_devices_path=str(missing))
    with pytest.raises(errors.ConfigError, match=rf"cannot read {missing} \(No such file"):
        files.proc_devices()


def test_unreadable_boot_id_is_a_config_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    files = fs.ProcNodeFiles(boot_id_path=str(tmp_path))  # a directory cannot be read as text
    with pytest.raises(errors.ConfigError, match=rf"cannot read {tmp_path} \(Is a directory\)"):
        files.boot_id()


def test_empty_boot_id_is_a_config_error(tmp_path: pathlib.Path) -> None:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("\n")
    with pytest.raises(errors.ConfigError, match="is empty"):
        fs.ProcNodeFiles(boot_id_path=str(boot_id)).boot_id()
