"""NVIDIA PCI functions for passthrough (gate PassthroughSupport), read and rebound via sysfs.

Discovery follows the upstream driver (go-nvlib's nvpci): every NVIDIA VGA or 3D controller
under `/sys/bus/pci/devices` that is not an SR-IOV virtual function, ordered by PCI address,
its index in that order naming it `gpu-vfio-<index>`. Binding follows go-nvlib's nvpassthrough:
clear `driver_override`, unbind from the current driver, set `driver_override`, write the
address to the target driver's `bind`. Roots are arguments so tests use a tree in tmp_path.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid

from adapters.fs import devnodes
from core import errors, ports
from core.gpu import devices, vfio_variant

log = logging.getLogger(__name__)

NVIDIA_VENDOR_ID = 0x10DE
VGA_CONTROLLER_CLASS = 0x030000
CONTROLLER_3D_CLASS = 0x030200
VFIO_DRIVER = "vfio-pci"
# What upstream asks modprobe for before a bind (go-nvlib's default VFIO variant).
VFIO_MODULE = "vfio-pci"
NVIDIA_DRIVER = "nvidia"
# What nvpci reports for a device missing from the PCI ID database.
UNKNOWN_DEVICE = "UNKNOWN_DEVICE"
PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids")
# Names of the data-center GPUs, as the PCI ID database has them, for images without pci.ids.
KNOWN_DEVICES: dict[int, str] = {
    0x20B0: "GA100 [A100 SXM4 40GB]",
    0x20B2: "GA100 [A100 SXM4 80GB]",
    0x20B5: "GA100 [A100 PCIe 80GB]",
    0x20F1: "GA100 [A100 PCIe 40GB]",
    0x20B7: "GA100GL [A30 PCIe]",
    0x2330: "GH100 [H100 SXM5 80GB]",
    0x2331: "GH100 [H100 PCIe]",
    0x2335: "GH100 [H200 SXM 141GB]",
    0x2339: "GH100 [H100 SXM5 94GB]",
    0x2342: "GH100 [GH200 120GB / 480GB]",
    0x26B9: "AD102GL [L40S]",
    0x27B8: "AD104GL [L4]",
    0x2941: "GB100 [HGX GB200]",
}

# The first six lines of `resource` are the BARs; flag bits 1-2 give a memory BAR's width.
_BAR_COUNT = 6
_BAR_TYPE_MASK = 0x06
_BAR_TYPE_64BIT = 0x04


def addressable_memory(resource_text: str) -> int:
    """Bytes of 64-bit BAR space, rounded up to a power of two (nvpci's addressable memory)."""
    total = 0
    for line in resource_text.strip().splitlines()[:_BAR_COUNT]:
        fields = line.split()
        if len(fields) != 3:
            continue
        start, end, flags = (int(field, 16) for field in fields)
        if end == start:  # an unused BAR
            continue
        if flags & _BAR_TYPE_MASK == _BAR_TYPE_64BIT:
            total += end - start + 1
    return 0 if total == 0 else 1 << (total - 1).bit_length()


def vfio_uuid(pci_bus_id: str) -> str:
    """The stable UUID upstream gives a VFIO function: SHA-1 name-based, DNS namespace."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, pci_bus_id))


def _address_order(pci_bus_id: str) -> int:
    return int(pci_bus_id.replace(":", "").replace(".", ""), 16)


class SysfsVfio:
    """`core.ports.VfioBinder`, plus discovery and the CDI device nodes of VFIO functions."""

    def __init__(
        self,
        sysfs_root: str = "/sys",
        dev_root: str = "/",
        *,
        pci_ids_paths: tuple[str, ...] = PCI_IDS_PATHS,
        modules: ports.KernelModules | None = None,
    ) -> None:
        """`modules` loads vfio-pci before a bind where it is not loaded (as upstream);
        None: a bind without it fails, saying to load it."""
        self.sysfs_root = sysfs_root
        self.dev_root = dev_root
        self._pci_ids_paths = pci_ids_paths
        self._modules = modules

    def __repr__(self) -> str:
        return f"SysfsVfio(sysfs_root={self.sysfs_root!r}, dev_root={self.dev_root!r})"

    @property
    def _devices_dir(self) -> str:
        return os.path.join(self.sysfs_root, "bus/pci/devices")

    @property
    def _drivers_dir(self) -> str:
        return os.path.join(self.sysfs_root, "bus/pci/drivers")

    # Discovery.

    def vfio_devices(self) -> tuple[devices.VfioDeviceInfo, ...]:
        """NVIDIA GPU functions, ordered by PCI address; ConfigError naming an unreadable file."""
        try:
            addresses = os.listdir(self._devices_dir)
        except OSError as exc:
            raise errors.ConfigError(
                f"cannot list {self._devices_dir} ({_errno_name(exc)}); passthrough discovery "
                "needs the host's sysfs: mount the host's /sys into the plugin container"
            ) from exc
        gpus = sorted(
            (address for address in addresses if self._is_gpu_function(address)),
            key=_address_order,
        )
        iommufd = self.iommufd_enabled()
        names = self._device_names()
        found = tuple(
            self._info(index, address, iommufd=iommufd, names=names)
            for index, address in enumerate(gpus)
        )
        log.info("event=vfio_devices_found count=%d iommufd=%s", len(found), iommufd)
        return found

    def iommufd_enabled(self) -> bool:
        """Whether the host offers iommufd (upstream's test: `/dev/iommu` exists)."""
        return os.path.exists(_join(self.dev_root, "/dev/iommu"))

    def _is_gpu_function(self, address: str) -> bool:
        if int(self._read(address, "vendor"), 16) != NVIDIA_VENDOR_ID:
            return False
        if int(self._read(address, "class"), 16) not in (VGA_CONTROLLER_CLASS, CONTROLLER_3D_CLASS):
            return False
        # A virtual function has a `physfn` link; upstream publishes physical functions only.
        return not os.path.lexists(os.path.join(self._devices_dir, address, "physfn"))

    def _info(
        self, index: int, address: str, *, iommufd: bool, names: dict[int, str]
    ) -> devices.VfioDeviceInfo:
        device_id = int(self._read(address, "device"), 16)
        numa = int(self._read(address, "numa_node", default="-1"))
        return devices.VfioDeviceInfo(
            index=index,
            uuid=vfio_uuid(address),
            device_id=f"0x{device_id:04x}",
            vendor_id=f"0x{NVIDIA_VENDOR_ID:04x}",
            product_name=names.get(device_id, UNKNOWN_DEVICE),
            pci_bus_id=address,
            iommu_group=self._iommu_group(address),
            addressable_memory_bytes=addressable_memory(self._read(address, "resource")),
            pcie_root=self._pcie_root(address),
            numa_node=numa if numa >= 0 else None,
            iommu_fd_enabled=iommufd,
        )

    def _iommu_group(self, address: str) -> int:
        link = os.path.join(self._devices_dir, address, "iommu_group")
        try:
            return int(os.path.basename(os.readlink(link)))
        except FileNotFoundError:
            return -1  # no IOMMU for this function (upstream's value)

    def _pcie_root(self, address: str) -> str | None:
        real = os.path.realpath(os.path.join(self._devices_dir, address))
        return next((part for part in real.split("/") if part.startswith("pci")), None)

    def _device_names(self) -> dict[int, str]:
        for path in self._pci_ids_paths:
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    return {**KNOWN_DEVICES, **_nvidia_names(handle.read())}
            except OSError:
                continue
        return dict(KNOWN_DEVICES)

    def _read(self, address: str, name: str, *, default: str | None = None) -> str:
        path = os.path.join(self._devices_dir, address, name)
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip()
        except FileNotFoundError:
            if default is not None:
                return default
            raise errors.ConfigError(
                f"cannot read {path} (ENOENT); passthrough discovery needs the host's sysfs: "
                "mount the host's /sys into the plugin container"
            ) from None
        except OSError as exc:
            raise errors.ConfigError(
                f"cannot read {path} ({_errno_name(exc)}); passthrough discovery needs the "
                "host's sysfs: mount the host's /sys into the plugin container"
            ) from exc

    # Binding.

    def bind_vfio(self, pci_bus_id: str) -> None:
        """Bind the function to vfio-pci, or the VFIO variant the host's modules.alias names
        for it (as upstream); nothing to do when it already is."""
        current = self.current_driver(pci_bus_id)
        module = self.vfio_module(pci_bus_id)
        if current in {VFIO_DRIVER, module, module.replace("_", "-")}:
            return
        if not self._is_gpu_function(pci_bus_id):
            raise errors.PermanentError(
                f"PCI device {pci_bus_id} is not an NVIDIA GPU (physical function); only those "
                "are passed through: the claim must name a gpu-vfio-<n> device of this node"
            )
        if current not in (None, NVIDIA_DRIVER):
            raise errors.PermanentError(
                f"GPU {pci_bus_id} is bound to driver {current!r}, expected {NVIDIA_DRIVER!r} "
                f"or {module!r}; unbind it from {current!r} on the node first"
            )
        if self._modules is not None:
            self._modules.ensure_loaded(module)
        driver = self._vfio_driver(module)
        numvfs = self._read(pci_bus_id, "sriov_numvfs", default="0")
        if int(numvfs) > 0:
            raise errors.PermanentError(
                f"GPU {pci_bus_id} has {numvfs} SR-IOV virtual functions enabled, so it cannot "
                "be passed through whole; disable them (echo 0 > sriov_numvfs) first"
            )
        self._change_driver(pci_bus_id, current, driver)

    def vfio_module(self, pci_bus_id: str) -> str:
        """The VFIO module for the function: the best `vfio_pci` alias of the host's
        modules.alias for its modalias (`core.gpu.vfio_variant`), else vfio-pci."""
        if self._modules is None:
            return VFIO_MODULE
        modalias = self._read(pci_bus_id, "modalias", default="")
        if not modalias:
            return VFIO_MODULE
        try:
            device = vfio_variant.parse_modalias(modalias)
        except ValueError:
            log.warning("event=modalias_unreadable pci_bus_id=%s modalias=%r", pci_bus_id,
                        modalias.strip())
            return VFIO_MODULE
        module = vfio_variant.best_module(
            device, vfio_variant.vfio_aliases(self._modules.modules_alias())
        )
        if module != VFIO_MODULE:
            log.info("event=vfio_variant pci_bus_id=%s module=%s", pci_bus_id, module)
        return module

    def _vfio_driver(self, module: str) -> str:
        """The driver directory of `module`: its name, or with dashes for underscores (the
        kernel's `vfio_pci` module drives `vfio-pci`), as upstream looks it up."""
        for name in (module, module.replace("_", "-")):
            if os.path.isdir(os.path.join(self._drivers_dir, name)):
                return name
        raise errors.PermanentError(
            f"driver {module} is not loaded ({self._drivers_dir}/{module} does not "
            f"exist); load it on the node: modprobe {module}"
        )

    def unbind_vfio(self, pci_bus_id: str) -> None:
        """Give the function back to the nvidia driver; nothing to do when it already has it."""
        current = self.current_driver(pci_bus_id)
        if current == NVIDIA_DRIVER:
            return
        self._require_driver(NVIDIA_DRIVER, fix="load the NVIDIA kernel driver on the node")
        self._change_driver(pci_bus_id, current, NVIDIA_DRIVER)

    def current_driver(self, pci_bus_id: str) -> str | None:
        """The driver the function is bound to, None when unbound; PermanentError if no such."""
        device_dir = os.path.join(self._devices_dir, pci_bus_id)
        if not os.path.isdir(device_dir):
            raise errors.PermanentError(
                f"no PCI device {pci_bus_id} on this node ({device_dir} does not exist); the "
                "claim names a device of another node or the GPU was removed: recreate the claim"
            )
        try:
            return os.path.basename(os.readlink(os.path.join(device_dir, "driver")))
        except FileNotFoundError:
            return None

    def _require_driver(self, driver: str, *, fix: str) -> None:
        if not os.path.isdir(os.path.join(self._drivers_dir, driver)):
            raise errors.PermanentError(
                f"driver {driver} is not loaded ({self._drivers_dir}/{driver} does not "
                f"exist); {fix}"
            )

    def _change_driver(self, pci_bus_id: str, current: str | None, driver: str) -> None:
        device_dir = os.path.join(self._devices_dir, pci_bus_id)
        override = os.path.join(device_dir, "driver_override")
        # NB: the override is cleared first so that unbinding cannot re-probe a stale choice.
        _write_sysfs(override, "\n")
        if current is not None:
            _write_sysfs(os.path.join(device_dir, "driver", "unbind"), pci_bus_id)
        _write_sysfs(override, driver)
        _write_sysfs(os.path.join(self._drivers_dir, driver, "bind"), pci_bus_id)
        log.info(
            "event=pci_driver_changed pci_bus_id=%s from=%s to=%s", pci_bus_id, current, driver
        )

    # CDI device nodes.

    def api_device_nodes(self, *, prefer_iommufd: bool = False) -> tuple[devices.DeviceNode, ...]:
        """The IOMMU API node a VFIO container needs once (`/dev/iommu` or `/dev/vfio/vfio`)."""
        if prefer_iommufd and self.iommufd_enabled():
            return (self._device_node("/dev/iommu", fix="the host's iommufd must be enabled"),)
        return (self._device_node("/dev/vfio/vfio", fix="load the vfio module: modprobe vfio-pci"),)

    def device_nodes(
        self, pci_bus_id: str, *, prefer_iommufd: bool = False
    ) -> tuple[devices.DeviceNode, ...]:
        """The function's node: `/dev/vfio/devices/vfioN` (iommufd) or `/dev/vfio/<group>`.

        Exists only while the function is bound to vfio-pci: prepare binds first.
        """
        fix = f"bind {pci_bus_id} to vfio-pci first"
        if prefer_iommufd and self.iommufd_enabled():
            cdev = self._iommufd_cdev(pci_bus_id)
            return (self._device_node(f"/dev/vfio/devices/{cdev}", fix=fix),)
        group = self._iommu_group(pci_bus_id)
        if group < 0:
            raise errors.PermanentError(
                f"GPU {pci_bus_id} has no IOMMU group; passthrough needs the IOMMU enabled in "
                "firmware and on the kernel command line (intel_iommu=on or amd_iommu=on)"
            )
        return (self._device_node(f"/dev/vfio/{group}", fix=fix),)

    def iommufd_nodes(self, pci_bus_id: str) -> tuple[devices.DeviceNode, ...]:
        """`core.ports.IommufdNodes`: the function's iommufd node (it must be bound)."""
        cdev = self._iommufd_cdev(pci_bus_id)
        return (self._device_node(
            f"/dev/vfio/devices/{cdev}", fix=f"bind {pci_bus_id} to vfio-pci first"
        ),)

    def _iommufd_cdev(self, pci_bus_id: str) -> str:
        vfio_dev = os.path.join(self._devices_dir, pci_bus_id, "vfio-dev")
        try:
            names = sorted(os.listdir(vfio_dev))
        except OSError:
            names = []
        for name in names:
            if name.startswith("vfio"):
                return name
        raise errors.RetryableError(
            f"no iommufd device for GPU {pci_bus_id} (nothing named vfio* in {vfio_dev}); "
            f"bind {pci_bus_id} to vfio-pci first"
        )

    def _device_node(self, path: str, *, fix: str) -> devices.DeviceNode:
        seen_at = _join(self.dev_root, path)
        try:
            return devnodes.char_device(self.dev_root, path)
        except OSError as exc:
            raise errors.RetryableError(
                f"cannot stat {seen_at} ({_errno_name(exc)}); {fix}"
            ) from exc
        except devnodes.NotACharDevice:
            raise errors.PermanentError(
                f"{seen_at} is not a character device; the dev root ({self.dev_root}) must be "
                "where the host's device nodes are (mount the host's /dev)"
            ) from None


def _nvidia_names(pci_ids_text: str) -> dict[int, str]:
    """Device names of vendor 10de from the text of a pci.ids database."""
    names: dict[int, str] = {}
    in_vendor = False
    for line in pci_ids_text.splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            in_vendor = line.lower().startswith("10de ")
            continue
        if in_vendor and not line.startswith("\t\t"):
            device, _, name = line.strip().partition(" ")
            try:
                names[int(device, 16)] = name.strip()
            except ValueError:
                continue
    return names


def _write_sysfs(path: str, value: str) -> None:
    """One write to a sysfs attribute (no temp file: sysfs attributes are not files)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise errors.RetryableError(f"cannot open {path} ({_errno_name(exc)})") from exc
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise errors.RetryableError(
            f"writing {value.strip()!r} to {path} failed ({_errno_name(exc)})"
        ) from exc
    finally:
        os.close(fd)


def _errno_name(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, "error")
    return f"{code}: {exc.strerror}" if exc.strerror else code


def _join(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))
