"""A stand-in NVIDIA driver installation, for tests and the demo where no driver is installed.

`install` lays out what `adapters.fs.driverroot.DriverRoot` reads on a real host: small but
genuine ELF shared objects carrying the driver libraries' SONAMEs, their SONAME links and an ld
cache built for the root by the real `ldconfig -r`, the driver's tools, GSP firmware; and,
where this process may create device nodes (root), real character nodes under a dev root.
"""

from __future__ import annotations

import os
import platform
import struct
import subprocess

DRIVER_VERSION = "580.65.06"
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
# (file stem, SONAME suffix): libcuda.so.<version> has SONAME libcuda.so.1, and so on.
LIBRARIES = (
    ("libcuda", "1"),
    ("libcudadebugger", "1"),
    ("libnvidia-ml", "1"),
    ("libnvidia-ptxjitcompiler", "1"),
    ("libnvidia-nvvm", "4"),
    ("libnvidia-cfg", "1"),
    ("libnvidia-opencl", "1"),
    ("libnvidia-encode", "1"),
    ("libnvcuvid", "1"),
)
# A library whose SONAME is its full versioned name, as the driver ships some.
FULL_VERSION_LIBRARIES = ("libnvidia-gpucomp",)
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
# Where the simulated GPUs keep their MIG state across plugin processes
# (`adapters.nvml.gpu_simulation.STATE_DIR`).
SIMULATED_STATE_DIR = "/var/lib/nvidia-simulated"
# (path, major, minor) of the control nodes on a typical host.
CONTROL_NODES = (
    ("/dev/nvidiactl", 195, 255),
    ("/dev/nvidia-uvm", 510, 0),
    ("/dev/nvidia-uvm-tools", 510, 1),
)

_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}


def elf_shared_object(soname: str) -> bytes:
    """The smallest ELF64 shared object `ldconfig` accepts: one PT_LOAD and a DT_SONAME."""
    machine = _ELF_MACHINES.get(platform.machine().lower(), 62)
    strtab = b"\0" + soname.encode() + b"\0"
    header_size, phdr_size, phdr_count = 64, 56, 2
    dynamic_at = header_size + phdr_count * phdr_size
    dynamic_size = 4 * 16
    strtab_at = dynamic_at + dynamic_size
    total = strtab_at + len(strtab)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, SysV
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, machine, 1, 0, header_size, 0, 0,
        header_size, phdr_size, phdr_count, 64, 0, 0,
    )  # fmt: skip
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, total, total, 0x1000)
    dynamic = struct.pack(
        "<IIQQQQQQ", 2, 4, dynamic_at, dynamic_at, dynamic_at, dynamic_size, dynamic_size, 8
    )
    # DT_STRTAB, DT_STRSZ, DT_SONAME (offset 1 in the string table), DT_NULL.
    entries = ((5, strtab_at), (10, len(strtab)), (14, 1), (0, 0))
    body = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    return header + load + dynamic + body + strtab


def install(
    root: str,
    *,
    version: str = DRIVER_VERSION,
    library_dir: str = LIBRARY_DIR,
    ld_cache: bool = True,
    ldconfig: str = "ldconfig",
) -> None:
    """Lay out a driver installation under `root`; `ld_cache=False` leaves no ld cache."""
    lib_dir = _inside(root, library_dir)
    os.makedirs(lib_dir, exist_ok=True)
    for stem, soname_suffix in LIBRARIES:
        real = f"{stem}.so.{version}"
        _write(os.path.join(lib_dir, real), elf_shared_object(f"{stem}.so.{soname_suffix}"))
        # What ldconfig would create; made here too so that the no-cache layout has them.
        _symlink(real, os.path.join(lib_dir, f"{stem}.so.{soname_suffix}"))
    for stem in FULL_VERSION_LIBRARIES:
        name = f"{stem}.so.{version}"
        _write(os.path.join(lib_dir, name), elf_shared_object(name))
    bin_dir = _inside(root, "/usr/bin")
    os.makedirs(bin_dir, exist_ok=True)
    for name in BINARIES:
        path = os.path.join(bin_dir, name)
        _write(path, b"#!/bin/sh\nexit 0\n")
        os.chmod(path, 0o755)
    firmware_dir = _inside(root, f"/lib/firmware/nvidia/{version}")
    os.makedirs(firmware_dir, exist_ok=True)
    for name in FIRMWARE:
        _write(os.path.join(firmware_dir, name), b"\0" * 16)
    os.makedirs(_inside(root, SIMULATED_STATE_DIR), exist_ok=True)
    if ld_cache:
        os.makedirs(_inside(root, "/etc"), exist_ok=True)
        _write(_inside(root, "/etc/ld.so.conf"), (library_dir + "\n").encode())
        subprocess.run([ldconfig, "-r", root], check=True, capture_output=True, timeout=60)


# NVSwitches of an HGX H100 8-GPU baseboard (third generation NVSwitch, four per board), as the
# nvswitch driver lists them under /proc/driver/nvidia-nvswitch/devices (one directory per PCI
# address); `adapters.fabricmanager.detect` reads that list.
HGX_NVSWITCHES = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")


def present_nvswitch_fabric(proc_root: str, *, switches: tuple[str, ...] = HGX_NVSWITCHES) -> None:
    """Lay out the nvswitch driver's device list under `proc_root` (a stand-in /proc), so
    that the node shows an NVSwitch fabric."""
    devices = os.path.join(proc_root, "driver/nvidia-nvswitch/devices")
    for address in switches:
        os.makedirs(os.path.join(devices, address), exist_ok=True)
        _write(os.path.join(devices, address, "information"),
               f"Bus Location:\t {address}\nArchitecture:\t LS10\n".encode())


def make_control_nodes(dev_root: str) -> None:
    """Real character nodes for the control devices under `dev_root`/dev.

    Raises PermissionError where this process may not create device nodes (not root).
    """
    os.makedirs(_inside(dev_root, "/dev"), exist_ok=True)
    for path, major, minor in CONTROL_NODES:
        target = _inside(dev_root, path)
        if not os.path.exists(target):
            os.mknod(target, 0o666 | 0o020000, os.makedev(major, minor))
            os.chmod(target, 0o666)


def _inside(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def _symlink(target: str, link: str) -> None:
    if not os.path.lexists(link):
        os.symlink(target, link)
