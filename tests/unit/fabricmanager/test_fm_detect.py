"""NVSwitch fabric detection on real files under a proc root and a sys root.

Covers: no nvswitch directory or an empty one means no fabric; one device entry means a
fabric; an InfiniBand device whose VPD carries `SW_MNG` (NVLink 5 switch) means a fabric,
other VPDs do not; an unreadable devices directory or VPD is an error naming the path.
"""

from __future__ import annotations

import pathlib

import pytest

from adapters.fabricmanager import detect
from core import errors


def _roots(tmp_path: pathlib.Path) -> dict[str, str]:
    return {"proc_root": str(tmp_path / "proc"), "sys_root": str(tmp_path / "sys")}


def _devices(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "proc/driver/nvidia-nvswitch/devices"
    path.mkdir(parents=True)
    return path


def _vpd(tmp_path: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    path = tmp_path / f"sys/class/infiniband/{name}/device/vpd"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def test_no_nvswitch_driver_means_no_fabric(tmp_path: pathlib.Path) -> None:
    assert not detect.has_nvswitch_fabric(**_roots(tmp_path))


def test_an_empty_devices_directory_means_no_fabric(tmp_path: pathlib.Path) -> None:
    _devices(tmp_path)
    assert not detect.has_nvswitch_fabric(**_roots(tmp_path))


def test_an_nvswitch_device_means_a_fabric(tmp_path: pathlib.Path) -> None:
    (_devices(tmp_path) / "0000:05:00.0").write_text("")
    assert detect.has_nvswitch_fabric(**_roots(tmp_path))


def test_a_switch_managed_infiniband_vpd_means_a_fabric(tmp_path: pathlib.Path) -> None:
    _vpd(tmp_path, "mlx5_0", b"\x82\x10ConnectX-7\x90PN")
    assert not detect.has_nvswitch_fabric(**_roots(tmp_path))
    _vpd(tmp_path, "mlx5_1", b"\x82\x08NVLink5\x90V1SW_MNG\x78")
    assert detect.has_nvswitch_fabric(**_roots(tmp_path))


def test_an_unreadable_devices_directory_is_an_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "proc/driver/nvidia-nvswitch/devices"
    path.parent.mkdir(parents=True)
    path.write_text("not a directory")
    with pytest.raises(errors.PermanentError, match=f"cannot read {path}"):
        detect.has_nvswitch_fabric(**_roots(tmp_path))


def test_an_unreadable_vpd_is_an_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sys/class/infiniband/mlx5_0/device/vpd"
    path.mkdir(parents=True)  # a directory: reading it fails
    with pytest.raises(errors.PermanentError, match=f"cannot read {path}"):
        detect.has_nvswitch_fabric(**_roots(tmp_path))
