"""SysfsVfio against a sysfs tree in tmp_path laid out as the kernel's.

`/sys/bus/pci/devices/<bdf>` links to `/sys/devices/pci<domain>:<bus>/.../<bdf>`; each function
has `vendor`, `device`, `class`, `numa_node`, `resource`, `driver_override`, an `iommu_group`
link and a `driver` link into `/sys/bus/pci/drivers/<name>` (whose `bind`/`unbind` are files
here, so the tests read back what was written). Device nodes are real character nodes
(mknod, root only; those tests are skipped otherwise).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import uuid

import pytest

from adapters.fs import vfio
from core import errors, ports
from core.gpu import devices

H100 = "0000:1b:00.0"
H100_B = "0000:43:00.0"
NIC = "0000:0c:00.0"
# BAR0 16 MiB (32-bit), BAR1 64 GiB + BAR3 32 MiB (64-bit prefetchable), an IO BAR, unused ones.
H100_RESOURCE = (
    "0x00000000e2000000 0x00000000e2ffffff 0x0000000000040200\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x0000220000000000 0x0000220fffffffff 0x000000000014220c\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x0000221000000000 0x0000221001ffffff 0x000000000014220c\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x00000000e3000000 0x00000000e307ffff 0x0000000000046200\n"
)


class FakeSysfs:
    """A kernel-shaped sysfs tree under `root`."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.devices = root / "bus/pci/devices"
        self.drivers = root / "bus/pci/drivers"
        self.devices.mkdir(parents=True)
        for driver in ("nvidia", "vfio-pci"):
            self.add_driver(driver)

    def add_driver(self, name: str) -> None:
        directory = self.drivers / name
        directory.mkdir(parents=True, exist_ok=True)
        for name_ in ("bind", "unbind"):
            (directory / name_).write_text("", encoding="utf-8")

    def add_function(
        self,
        address: str,
        *,
        vendor: str = "0x10de",
        device: str = "0x2330",
        pci_class: str = "0x030200",
        numa_node: str = "0",
        group: int | None = 7,
        driver: str | None = "nvidia",
        resource: str = H100_RESOURCE,
        root_complex: str = "pci0000:16",
    ) -> pathlib.Path:
        real = self.root / "devices" / root_complex / "0000:16:01.0" / address
        real.mkdir(parents=True)
        for name, value in (
            ("vendor", vendor),
            ("device", device),
            ("class", pci_class),
            ("numa_node", numa_node),
            ("resource", resource),
            ("driver_override", "(null)"),
        ):
            (real / name).write_text(value + "\n", encoding="utf-8")
        (self.devices / address).symlink_to(os.path.relpath(real, self.devices))
        if group is not None:
            group_dir = self.root / "kernel/iommu_groups" / str(group)
            group_dir.mkdir(parents=True, exist_ok=True)
            (real / "iommu_group").symlink_to(os.path.relpath(group_dir, real))
        if driver is not None:
            self.set_driver(address, driver)
        return real

    def set_driver(self, address: str, driver: str) -> None:
        link = self.devices / address / "driver"
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(self.drivers / driver, link.parent.resolve()))

    def read(self, relative: str) -> str:
        return (self.root / relative).read_text(encoding="utf-8")


@pytest.fixture
def sysfs(tmp_path: pathlib.Path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


def _mknod(path: pathlib.Path, mode: int, major: int, minor: int) -> None:
    os.mknod(path, mode | 0o020000, os.makedev(major, minor))
    os.chmod(path, mode)  # NB: mknod's mode is masked by the umask


@pytest.fixture
def dev_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "devroot"
    (root / "dev/vfio/devices").mkdir(parents=True)
    try:
        _mknod(root / "dev/vfio/vfio", 0o666, 10, 196)
    except PermissionError:
        pytest.skip("creating character device nodes needs root")
    _mknod(root / "dev/vfio/7", 0o600, 508, 0)
    return root


def _vfio(sysfs: FakeSysfs, dev_root: pathlib.Path | None = None) -> vfio.SysfsVfio:
    return vfio.SysfsVfio(
        str(sysfs.root), str(dev_root) if dev_root else "/nonexistent", pci_ids_paths=()
    )


def test_sysfs_vfio_is_a_vfio_binder(sysfs: FakeSysfs) -> None:
    binder: ports.VfioBinder = _vfio(sysfs)
    assert "SysfsVfio" in repr(binder)


def test_discovery_publishes_nvidia_gpus_in_pci_address_order(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100_B, group=9, numa_node="1", root_complex="pci0000:3a")
    sysfs.add_function(H100)
    sysfs.add_function(NIC, vendor="0x15b3", pci_class="0x020000", device="0x1021")
    sysfs.add_function("0000:05:00.0", pci_class="0x068000", device="0x22a3")  # an NVSwitch

    found = _vfio(sysfs).vfio_devices()

    assert found == (
        devices.VfioDeviceInfo(
            index=0,
            uuid=vfio.vfio_uuid(H100),
            device_id="0x2330",
            vendor_id="0x10de",
            product_name="GH100 [H100 SXM5 80GB]",
            pci_bus_id=H100,
            iommu_group=7,
            addressable_memory_bytes=128 * 2**30,
            pcie_root="pci0000:16",
            numa_node=0,
            iommu_fd_enabled=False,
        ),
        devices.VfioDeviceInfo(
            index=1,
            uuid=vfio.vfio_uuid(H100_B),
            device_id="0x2330",
            vendor_id="0x10de",
            product_name="GH100 [H100 SXM5 80GB]",
            pci_bus_id=H100_B,
            iommu_group=9,
            addressable_memory_bytes=128 * 2**30,
            pcie_root="pci0000:3a",
            numa_node=1,
            iommu_fd_enabled=False,
        ),
    )
    assert [info.name for info in found] == ["gpu-vfio-0", "gpu-vfio-1"]


def test_vga_controllers_count_and_virtual_functions_do_not(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100, pci_class="0x030000")
    vf = sysfs.add_function("0000:1b:00.4")
    (vf / "physfn").symlink_to(os.path.relpath(sysfs.devices / H100, vf))

    assert [info.pci_bus_id for info in _vfio(sysfs).vfio_devices()] == [H100]


def test_the_vfio_uuid_is_upstreams_name_based_uuid() -> None:
    # Go's uuid.NewSHA1(uuid.NameSpaceDNS, []byte(address)): RFC 4122 version 5, by hand.
    digest = bytearray(hashlib.sha1(uuid.NAMESPACE_DNS.bytes + H100.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80

    assert vfio.vfio_uuid(H100) == str(uuid.UUID(bytes=bytes(digest)))
    assert vfio.vfio_uuid(H100) != vfio.vfio_uuid(H100_B)


def test_unknown_devices_no_numa_and_no_iommu_are_reported_as_upstream(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100, device="0x1eb8", numa_node="-1", group=None)

    (info,) = _vfio(sysfs).vfio_devices()

    assert info.product_name == "UNKNOWN_DEVICE"
    assert info.numa_node is None
    assert info.iommu_group == -1


def test_product_names_come_from_the_pci_id_database_when_present(
    sysfs: FakeSysfs, tmp_path: pathlib.Path
) -> None:
    sysfs.add_function(H100, device="0x1eb8")
    pci_ids = tmp_path / "pci.ids"
    pci_ids.write_text(
        "# comment\n10de  NVIDIA Corporation\n\t1eb8  TU104GL [Tesla T4]\n"
        "\t\t10de 12a2  T4 16GB\n10df  Emulex\n\t1eb8  not this one\n",
        encoding="utf-8",
    )

    binder = vfio.SysfsVfio(str(sysfs.root), "/nonexistent", pci_ids_paths=(str(pci_ids),))

    assert binder.vfio_devices()[0].product_name == "TU104GL [Tesla T4]"


def test_iommufd_is_enabled_when_the_host_has_dev_iommu(
    sysfs: FakeSysfs, tmp_path: pathlib.Path
) -> None:
    sysfs.add_function(H100)
    dev = tmp_path / "dev-with-iommu"
    (dev / "dev").mkdir(parents=True)
    (dev / "dev/iommu").write_text("", encoding="utf-8")

    (info,) = vfio.SysfsVfio(str(sysfs.root), str(dev), pci_ids_paths=()).vfio_devices()

    assert info.iommu_fd_enabled


def test_a_missing_sysfs_is_a_config_error_naming_the_directory(tmp_path: pathlib.Path) -> None:
    with pytest.raises(errors.ConfigError, match="mount the host's /sys"):
        vfio.SysfsVfio(str(tmp_path / "nosys")).vfio_devices()


def test_an_unreadable_attribute_is_a_config_error_naming_the_file(sysfs: FakeSysfs) -> None:
    real = sysfs.add_function(H100)
    (real / "resource").unlink()

    with pytest.raises(errors.ConfigError, match=f"{H100}/resource"):
        _vfio(sysfs).vfio_devices()


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        (H100_RESOURCE, 128 * 2**30),
        ("0x0 0x0 0x0\n", 0),
        ("0x00000000e2000000 0x00000000e2ffffff 0x0000000000040200\n", 0),  # 32-bit only
        # 3 GiB of 64-bit BARs rounds up to 4 GiB.
        ("0x100000000 0x17fffffff 0x14220c\n0x200000000 0x23fffffff 0x14220c\n", 4 * 2**30),
    ],
)
def test_addressable_memory_sums_64bit_bars_rounded_up(resource: str, expected: int) -> None:
    assert vfio.addressable_memory(resource) == expected


def test_bind_moves_a_gpu_from_nvidia_to_vfio_pci(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100)

    _vfio(sysfs).bind_vfio(H100)

    assert sysfs.read(f"bus/pci/devices/{H100}/driver_override") == "vfio-pci"
    assert sysfs.read("bus/pci/drivers/nvidia/unbind") == H100
    assert sysfs.read("bus/pci/drivers/vfio-pci/bind") == H100


def test_bind_is_idempotent_when_already_on_vfio_pci(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100, driver="vfio-pci")

    _vfio(sysfs).bind_vfio(H100)

    assert sysfs.read(f"bus/pci/devices/{H100}/driver_override") == "(null)\n"
    assert sysfs.read("bus/pci/drivers/vfio-pci/bind") == ""


def test_bind_of_an_unbound_gpu_skips_the_unbind(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100, driver=None)

    _vfio(sysfs).bind_vfio(H100)

    assert sysfs.read("bus/pci/drivers/nvidia/unbind") == ""
    assert sysfs.read("bus/pci/drivers/vfio-pci/bind") == H100


def test_unbind_gives_the_gpu_back_to_nvidia(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100, driver="vfio-pci")

    _vfio(sysfs).unbind_vfio(H100)

    assert sysfs.read(f"bus/pci/devices/{H100}/driver_override") == "nvidia"
    assert sysfs.read("bus/pci/drivers/vfio-pci/unbind") == H100
    assert sysfs.read("bus/pci/drivers/nvidia/bind") == H100


def test_unbind_is_idempotent_when_already_on_nvidia(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100)

    _vfio(sysfs).unbind_vfio(H100)

    assert sysfs.read("bus/pci/drivers/nvidia/bind") == ""


def test_bind_refuses_a_gpu_held_by_another_driver(sysfs: FakeSysfs) -> None:
    sysfs.add_driver("nouveau")
    sysfs.add_function(H100, driver="nouveau")

    with pytest.raises(errors.PermanentError, match="bound to driver 'nouveau'"):
        _vfio(sysfs).bind_vfio(H100)
    assert sysfs.read("bus/pci/drivers/nouveau/unbind") == ""


def test_bind_refuses_a_device_that_is_not_an_nvidia_gpu(sysfs: FakeSysfs) -> None:
    sysfs.add_function(NIC, vendor="0x15b3", pci_class="0x020000", driver=None)

    with pytest.raises(errors.PermanentError, match="is not an NVIDIA GPU"):
        _vfio(sysfs).bind_vfio(NIC)


def test_bind_of_an_unknown_address_names_it(sysfs: FakeSysfs) -> None:
    with pytest.raises(errors.PermanentError, match=r"no PCI device 0000:99:00\.0"):
        _vfio(sysfs).bind_vfio("0000:99:00.0")


def test_bind_without_the_vfio_pci_module_says_to_load_it(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100)
    for name in ("bind", "unbind"):
        (sysfs.drivers / "vfio-pci" / name).unlink()
    (sysfs.drivers / "vfio-pci").rmdir()

    with pytest.raises(errors.PermanentError, match="modprobe vfio-pci"):
        _vfio(sysfs).bind_vfio(H100)


def test_bind_refuses_a_gpu_with_sriov_virtual_functions(sysfs: FakeSysfs) -> None:
    real = sysfs.add_function(H100)
    (real / "sriov_numvfs").write_text("4\n", encoding="utf-8")

    with pytest.raises(errors.PermanentError, match="4 SR-IOV virtual functions"):
        _vfio(sysfs).bind_vfio(H100)


def test_a_failed_sysfs_write_names_the_file_and_errno(sysfs: FakeSysfs) -> None:
    sysfs.add_function(H100)
    (sysfs.drivers / "vfio-pci" / "bind").unlink()

    with pytest.raises(errors.RetryableError, match=r"vfio-pci/bind \(ENOENT"):
        _vfio(sysfs).bind_vfio(H100)


def test_legacy_device_nodes_are_the_container_and_the_group(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100, driver="vfio-pci")
    binder = _vfio(sysfs, dev_root)

    assert binder.api_device_nodes() == (
        devices.DeviceNode(path="/dev/vfio/vfio", major=10, minor=196, file_mode=0o666),
    )
    assert binder.device_nodes(H100) == (
        devices.DeviceNode(path="/dev/vfio/7", major=508, minor=0, file_mode=0o600),
    )


def test_iommufd_device_nodes_when_preferred_and_enabled(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    real = sysfs.add_function(H100, driver="vfio-pci")
    (real / "vfio-dev/vfio3").mkdir(parents=True)
    _mknod(dev_root / "dev/iommu", 0o666, 10, 123)
    _mknod(dev_root / "dev/vfio/devices/vfio3", 0o600, 237, 3)
    binder = _vfio(sysfs, dev_root)

    assert binder.api_device_nodes(prefer_iommufd=True)[0].path == "/dev/iommu"
    assert binder.device_nodes(H100, prefer_iommufd=True) == (
        devices.DeviceNode(path="/dev/vfio/devices/vfio3", major=237, minor=3, file_mode=0o600),
    )
    # Not preferred: the legacy nodes, as upstream's LegacyOnly policy.
    assert binder.device_nodes(H100)[0].path == "/dev/vfio/7"


def test_iommufd_preferred_but_absent_falls_back_to_legacy(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100, driver="vfio-pci")
    binder = _vfio(sysfs, dev_root)

    assert binder.api_device_nodes(prefer_iommufd=True)[0].path == "/dev/vfio/vfio"
    assert binder.device_nodes(H100, prefer_iommufd=True)[0].path == "/dev/vfio/7"


def test_iommufd_without_a_vfio_cdev_says_to_bind_first(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100)
    _mknod(dev_root / "dev/iommu", 0o666, 10, 123)

    with pytest.raises(errors.RetryableError, match=r"bind 0000:1b:00\.0 to vfio-pci first"):
        _vfio(sysfs, dev_root).device_nodes(H100, prefer_iommufd=True)


def test_a_group_node_not_yet_created_says_to_bind_first(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100, group=12)

    with pytest.raises(errors.RetryableError, match=r"/dev/vfio/12 \(ENOENT"):
        _vfio(sysfs, dev_root).device_nodes(H100)


def test_a_function_without_iommu_group_cannot_be_passed_through(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100, group=None)

    with pytest.raises(errors.PermanentError, match="no IOMMU group"):
        _vfio(sysfs, dev_root).device_nodes(H100)


def test_a_regular_file_in_place_of_a_node_is_refused(
    sysfs: FakeSysfs, dev_root: pathlib.Path
) -> None:
    sysfs.add_function(H100, group=8)
    (dev_root / "dev/vfio/8").write_text("", encoding="utf-8")

    with pytest.raises(errors.PermanentError, match="not a character device"):
        _vfio(sysfs, dev_root).device_nodes(H100)
