"""DriverRoot: the driver's device nodes and files, found as on a real host.

The fake driver root (`adapters.fs.simulated_driverroot`) holds genuine ELF shared objects with
the driver libraries' SONAMEs and an ld cache built for it by the real `ldconfig -r`, which the
locator reads back with the real `ldconfig -p -C`; device nodes are real character nodes
(created with mknod, so those tests need root and are skipped without it).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from adapters.fs import driverroot, simulated_driverroot
from core import errors, ports
from core.gpu import devices

VERSION = simulated_driverroot.DRIVER_VERSION
LIB = simulated_driverroot.LIBRARY_DIR
PROC_DEVICES = "Character devices:\n195 nvidia\n234 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n"

needs_ldconfig = pytest.mark.skipif(shutil.which("ldconfig") is None, reason="no ldconfig here")


def _can_mknod(tmp_path: pathlib.Path) -> bool:
    try:
        os.mknod(tmp_path / "probe", 0o600 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        return False
    os.unlink(tmp_path / "probe")
    return True


@pytest.fixture
def dev_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "devroot"
    if not _can_mknod(tmp_path):
        pytest.skip("creating character device nodes needs root")
    simulated_driverroot.make_control_nodes(str(root))
    return root


@pytest.fixture
def proc_devices(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "devices"
    path.write_text(PROC_DEVICES, encoding="utf-8")
    return path


def _locator(
    root: pathlib.Path,
    dev_root: pathlib.Path,
    proc_devices: pathlib.Path,
    *,
    host_root: str | None = None,
    ldconfig: str = "ldconfig",
) -> driverroot.DriverRoot:
    return driverroot.DriverRoot(
        str(root),
        host_root=host_root,
        dev_root=str(dev_root),
        ldconfig=ldconfig,
        proc_devices=str(proc_devices),
    )


def _containers(pairs: tuple[tuple[str, str], ...]) -> set[str]:
    return {container for _, container in pairs}


def test_driver_root_is_a_driver_files_locator(tmp_path: pathlib.Path) -> None:
    locator: ports.DriverFilesLocator = driverroot.DriverRoot(str(tmp_path))
    assert repr(locator).startswith("DriverRoot(root=")


@needs_ldconfig
def test_libraries_come_from_the_ld_cache_by_soname_and_versioned_file(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root))
    # Not a driver library: same directory, no driver version suffix.
    (root / LIB.lstrip("/") / "libz.so.1").write_bytes(
        simulated_driverroot.elf_shared_object("libz.so.1")
    )

    files = _locator(root, dev_root, proc_devices).driver_files()

    containers = _containers(files.libraries)
    assert f"{LIB}/libcuda.so.1" in containers
    assert f"{LIB}/libcuda.so.{VERSION}" in containers
    assert f"{LIB}/libnvidia-ml.so.1" in containers
    assert f"{LIB}/libnvidia-nvvm.so.4" in containers
    assert f"{LIB}/libnvidia-gpucomp.so.{VERSION}" in containers
    assert not any("libz" in path for path in containers)
    # The SONAME path is served by the real versioned file (no symlink needed in the container).
    assert (str(root) + f"{LIB}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.1") in files.libraries
    assert list(files.libraries) == sorted(files.libraries, key=lambda pair: pair[1])


@needs_ldconfig
def test_host_paths_use_the_host_root_container_paths_drop_the_root(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver-root"
    simulated_driverroot.install(str(root))

    files = _locator(root, dev_root, proc_devices, host_root="/run/nvidia/driver").driver_files()

    for host, container in files.libraries + files.binaries + files.firmware:
        assert host.startswith("/run/nvidia/driver/")
        assert not container.startswith(str(root))
        assert (root / host.removeprefix("/run/nvidia/driver/")).is_file()
    assert ("/run/nvidia/driver/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi") in files.binaries


@needs_ldconfig
def test_binaries_and_firmware_of_the_driver_version_are_found(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root))
    # Firmware of another driver version stays out.
    other = root / "lib/firmware/nvidia/1.2.3"
    other.mkdir(parents=True)
    (other / "gsp_old.bin").write_bytes(b"x")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert _containers(files.binaries) == {
        f"/usr/bin/{name}" for name in simulated_driverroot.BINARIES
    }
    assert _containers(files.firmware) == {
        f"/lib/firmware/nvidia/{VERSION}/{name}" for name in simulated_driverroot.FIRMWARE
    }


@needs_ldconfig
def test_control_nodes_carry_their_real_major_and_minor(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root))

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert files.control_nodes == (
        devices.DeviceNode(path="/dev/nvidiactl", major=195, minor=255, file_mode=0o666),
        devices.DeviceNode(path="/dev/nvidia-uvm", major=510, minor=0, file_mode=0o666),
        devices.DeviceNode(path="/dev/nvidia-uvm-tools", major=510, minor=1, file_mode=0o666),
    )
    assert files.nvidia_major == 195
    assert files.caps_major == 234


@needs_ldconfig
def test_caps_major_is_none_when_proc_devices_has_no_nvidia_caps_or_is_unreadable(
    tmp_path: pathlib.Path, dev_root: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root))
    no_caps = tmp_path / "no-caps"
    no_caps.write_text("Character devices:\n195 nvidia\n", encoding="utf-8")

    assert _locator(root, dev_root, no_caps).driver_files().caps_major is None
    assert _locator(root, dev_root, tmp_path / "absent").driver_files().caps_major is None


def test_without_an_ld_cache_the_library_dirs_are_searched(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)

    files = _locator(root, dev_root, proc_devices).driver_files()

    containers = _containers(files.libraries)
    assert f"{LIB}/libcuda.so.1" in containers
    assert f"{LIB}/libnvidia-ml.so.{VERSION}" in containers


def test_an_unreadable_ld_cache_falls_back_to_the_library_dirs(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(b"not a cache")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert f"{LIB}/libcuda.so.1" in _containers(files.libraries)


def test_a_missing_ldconfig_falls_back_to_the_library_dirs(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(b"whatever")

    files = _locator(
        root, dev_root, proc_devices, ldconfig=str(tmp_path / "no-ldconfig")
    ).driver_files()

    assert f"{LIB}/libnvidia-ml.so.1" in _containers(files.libraries)


def test_absolute_symlinks_resolve_inside_the_root(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    link = root / LIB.lstrip("/") / "libcuda.so.1"
    link.unlink()
    link.symlink_to(f"{LIB}/libcuda.so.{VERSION}")  # absolute: means inside the root

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert (str(root) + f"{LIB}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.1") in files.libraries


def test_a_root_without_the_driver_libraries_names_the_root_and_the_fix(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "empty"
    root.mkdir()

    with pytest.raises(errors.ConfigError) as raised:
        _locator(root, dev_root, proc_devices).driver_files()

    assert str(root) in raised.value.message
    assert "libnvidia-ml.so.1" in raised.value.message
    assert "NVIDIA_DRIVER_ROOT" in raised.value.message


def test_a_root_without_libcuda_falls_back_to_libnvidia_ml_as_upstream(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    # A driver without CUDA (NVIDIA's mock NVML on a CPU-only machine): the version and the
    # library directory come from libnvidia-ml.so.<version>, as the container toolkit does.
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    for name in ("libcuda.so.1", f"libcuda.so.{VERSION}"):
        (root / LIB.lstrip("/") / name).unlink()

    files = _locator(root, dev_root, proc_devices).driver_files()

    containers = _containers(files.libraries)
    assert f"{LIB}/libnvidia-ml.so.1" in containers
    assert f"{LIB}/libnvidia-ml.so.{VERSION}" in containers
    assert not any(os.path.basename(path).startswith("libcuda.so") for path in containers)


def test_libcuda_names_the_library_directory_when_both_are_present(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    # libnvidia-ml.so.1 in the first search dir links to a copy elsewhere; libcuda's
    # directory (the toolkit's choice) still decides which versioned files are mounted.
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    other = root / "usr/lib64"
    other.mkdir(parents=True)
    (other / "libnvidia-ml.so.1").symlink_to(f"{LIB}/libnvidia-ml.so.{VERSION}")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert f"{LIB}/libcuda.so.{VERSION}" in _containers(files.libraries)


def test_a_root_without_libnvidia_ml_is_refused(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    for name in ("libnvidia-ml.so.1", f"libnvidia-ml.so.{VERSION}"):
        (root / LIB.lstrip("/") / name).unlink()

    with pytest.raises(errors.ConfigError, match=r"libnvidia-ml\.so\.1 not found"):
        _locator(root, dev_root, proc_devices).driver_files()


def test_an_unversioned_libnvidia_ml_without_libcuda_is_refused(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    for name in ("libcuda.so.1", f"libcuda.so.{VERSION}"):
        (root / LIB.lstrip("/") / name).unlink()
    nvml = root / LIB.lstrip("/") / "libnvidia-ml.so.1"
    nvml.unlink()
    nvml.write_bytes(b"a file, not a link to libnvidia-ml.so.<version>")

    with pytest.raises(errors.ConfigError, match="cannot tell the NVIDIA driver version"):
        _locator(root, dev_root, proc_devices).driver_files()


def test_an_unversioned_libnvidia_ml_beside_libcuda_takes_the_version_from_libcuda(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    nvml = root / LIB.lstrip("/") / "libnvidia-ml.so.1"
    nvml.unlink()
    nvml.write_bytes(b"a file, not a link to libnvidia-ml.so.<version>")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert f"{LIB}/libcuda.so.{VERSION}" in _containers(files.libraries)


def test_a_missing_nvidiactl_says_the_driver_is_not_loaded(
    tmp_path: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    empty_dev = tmp_path / "nodev"
    (empty_dev / "dev").mkdir(parents=True)

    with pytest.raises(errors.ConfigError, match="kernel driver is not loaded"):
        _locator(root, empty_dev, proc_devices).driver_files()


def test_a_regular_file_in_place_of_nvidiactl_is_refused(
    tmp_path: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    fake_dev = tmp_path / "fakedev"
    (fake_dev / "dev").mkdir(parents=True)
    (fake_dev / "dev/nvidiactl").write_text("", encoding="utf-8")

    with pytest.raises(errors.ConfigError, match="not a character device"):
        _locator(root, fake_dev, proc_devices).driver_files()


def test_optional_control_nodes_may_be_absent(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    (dev_root / "dev/nvidia-uvm-tools").unlink()

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert [node.path for node in files.control_nodes] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_ldconfig_output_parsing_keeps_entries_and_their_abi() -> None:
    text = (
        "3 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n"
        "\tlibnvidia-ml.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1\n"
        "Cache generated by: ldconfig (GLIBC 2.36) stable release version 2.36\n"
    )

    entries = driverroot.parse_ldconfig_output(text)

    assert [(e.soname, e.is_64bit) for e in entries] == [
        ("libcuda.so.1", True),
        ("libcuda.so.1", False),
        ("libnvidia-ml.so.1", True),
    ]
    assert entries[0].path == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


@needs_ldconfig
def test_this_machines_own_ld_cache_parses(tmp_path: pathlib.Path) -> None:
    # The real cache of this machine, read through the same ldconfig call: libc is in it.
    done = subprocess.run(
        ["ldconfig", "-p", "-C", "/etc/ld.so.cache"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("this machine has no readable /etc/ld.so.cache")
    assert "libc.so.6" in {e.soname for e in driverroot.parse_ldconfig_output(done.stdout)}


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("/usr/lib64/libnvidia-ml.so.580.65.06", "580.65.06"),
        ("libcuda.so.550.54.15", "550.54.15"),
        ("libnvidia-ml.so.1", None),
        ("libnvidia-ml.so", None),
    ],
)
def test_driver_version_comes_from_the_library_file_name(name: str, version: str | None) -> None:
    assert driverroot.driver_version_of(name) == version


@needs_ldconfig
def test_a_driver_outside_the_standard_dirs_is_found_through_its_ld_cache(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), library_dir="/opt/nvidia/lib")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert "/opt/nvidia/lib/libcuda.so.1" in _containers(files.libraries)


def test_a_driver_outside_the_standard_dirs_without_ld_cache_is_not_found(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), library_dir="/opt/nvidia/lib", ld_cache=False)

    with pytest.raises(errors.ConfigError, match=r"libnvidia-ml\.so\.1 not found"):
        _locator(root, dev_root, proc_devices).driver_files()


@needs_ldconfig
def test_soname_links_version_and_library_dir_are_reported_for_the_hooks(
    tmp_path: pathlib.Path, dev_root: pathlib.Path, proc_devices: pathlib.Path
) -> None:
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root))
    (root / LIB.lstrip("/") / "libcuda.so").symlink_to("libcuda.so.1")

    files = _locator(root, dev_root, proc_devices).driver_files()

    assert files.driver_version == VERSION
    assert files.library_dir == LIB
    real = f"{LIB}/libcuda.so.{VERSION}"
    assert devices.LibraryLink(path=f"{LIB}/libcuda.so.1", target=f"libcuda.so.{VERSION}",
                               file=real) in files.library_links
    assert devices.LibraryLink(path=f"{LIB}/libcuda.so", target="libcuda.so.1",
                               file=real) in files.library_links
    # The full-version SONAME library is a file, not a link; every link leads to a mounted file.
    assert all(link.file in _containers(files.libraries) for link in files.library_links)
    assert not any("gpucomp" in link.path for link in files.library_links)
    assert files.cdi_hook_path == ""
