"""The NVIDIA driver's device nodes and user-space files under the driver root.

A GPU container gets these mounted read-only so that it works without the NVIDIA runtime
hook: control nodes from the dev root, the driver's libraries (found through the driver root's
own ld cache, as the upstream driver's CDI library does), its tools and its GSP firmware.

Three roots are involved: `root` is where this process sees the driver installation (a
container mount such as `/driver-root`), `host_root` the same directory on the host (CDI host
paths are read by the container runtime on the host), and `dev_root` where `/dev` is.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import subprocess

from adapters.fs import devnodes
from core import errors, procdevices
from core.gpu import devices

log = logging.getLogger(__name__)

# Where the upstream driver (and the NVIDIA container toolkit) look for libraries when the ld
# cache cannot tell them; `/usr/lib` and `/lib` last for distributions without multiarch dirs.
LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib",
)
BINARY_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/sbin", "/opt/bin")
# The tools the NVIDIA container toolkit mounts for a driver (nvcdi's driver binaries).
BINARY_NAMES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
FIRMWARE_DIRS = ("/lib/firmware", "/usr/lib/firmware")
LD_CACHE = "/etc/ld.so.cache"
PROC_DEVICES = "/proc/devices"

# nvidiactl is the one node every driver has; the others appear with their kernel modules.
REQUIRED_CONTROL_NODE = "/dev/nvidiactl"
OPTIONAL_CONTROL_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
CAPS_PROC_NAME = "nvidia-caps"

# NVML proves a driver is installed (required); libcuda, when present, names the driver's
# library directory and version (else libnvidia-ml.so.<version> does).
NVML_SONAME = "libnvidia-ml.so.1"
CUDA_SONAME = "libcuda.so.1"

# The flags of 64-bit entries in `ldconfig -p` (x86-64, arm64, other 64-bit ABIs): 32-bit
# compatibility libraries of a driver are of no use to the plugin's containers.
_SIXTY_FOUR_BIT_FLAGS = ("x86-64", "AArch64", "64bit")
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")
_MAX_SYMLINK_HOPS = 40


@dataclasses.dataclass(frozen=True, kw_only=True)
class LdCacheEntry:
    """One line of `ldconfig -p`: a SONAME and the path the cache maps it to."""

    soname: str
    flags: str
    path: str

    @property
    def is_64bit(self) -> bool:
        """Whether the entry is for a 64-bit ABI (what the plugin's containers run)."""
        return any(flag in self.flags.split(",") for flag in _SIXTY_FOUR_BIT_FLAGS)


def parse_ldconfig_output(text: str) -> tuple[LdCacheEntry, ...]:
    """The entries `ldconfig -p` printed, in its order; header and trailer lines are skipped."""
    entries = []
    for line in text.splitlines():
        found = _LDCONFIG_LINE.match(line)
        if found is not None:
            entries.append(
                LdCacheEntry(soname=found.group(1), flags=found.group(2), path=found.group(3))
            )
    return tuple(entries)


def driver_version_of(library_file: str) -> str | None:
    """`580.65.06` for `.../libnvidia-ml.so.580.65.06`; None when the name has no such suffix."""
    name = os.path.basename(library_file)
    _, sep, suffix = name.partition(".so.")
    # NB: a SONAME suffix ("1") is not a driver version; versions have at least one dot.
    if not sep or "." not in suffix:
        return None
    return suffix


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Libraries:
    libraries: tuple[tuple[str, str], ...]
    version: str
    # libcuda's directory (else libnvidia-ml's), as a container sees it.
    directory: str
    links: tuple[devices.LibraryLink, ...]


class DriverRoot:
    """`core.ports.DriverFilesLocator` over a driver installation on this host.

    Every `host_path` returned is `host_root` plus the file's path inside the root, with
    symlinks followed inside the root (an absolute link target means a path in the root).
    """

    def __init__(
        self,
        root: str,
        *,
        host_root: str | None = None,
        dev_root: str = "/",
        ldconfig: str = "ldconfig",
        proc_devices: str = PROC_DEVICES,
        timeout_s: float = 30.0,
    ) -> None:
        self.root = root
        self.host_root = root if host_root is None else host_root
        self.dev_root = dev_root
        self._ldconfig = ldconfig
        self._proc_devices = proc_devices
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return (
            f"DriverRoot(root={self.root!r}, host_root={self.host_root!r}, "
            f"dev_root={self.dev_root!r})"
        )

    def driver_files(self) -> devices.DriverFiles:
        """What a GPU container needs; ConfigError naming the root when no driver is there."""
        control_nodes = self._control_nodes()
        found = self._libraries()
        return devices.DriverFiles(
            control_nodes=control_nodes,
            libraries=found.libraries,
            binaries=self._binaries(),
            firmware=self._firmware(found.version),
            nvidia_major=control_nodes[0].major,
            caps_major=self._caps_major(),
            driver_version=found.version,
            library_dir=found.directory,
            library_links=found.links,
        )

    # Device nodes.

    def _control_nodes(self) -> tuple[devices.DeviceNode, ...]:
        nodes = [self._device_node(REQUIRED_CONTROL_NODE, required=True)]
        for path in OPTIONAL_CONTROL_NODES:
            node = self._device_node(path, required=False)
            if node is None:
                log.warning(
                    "event=driver_control_node_missing path=%s dev_root=%s", path, self.dev_root
                )
            else:
                nodes.append(node)
        return tuple(node for node in nodes if node is not None)

    def _device_node(self, path: str, *, required: bool) -> devices.DeviceNode | None:
        seen_at = _join(self.dev_root, path)
        try:
            return devnodes.char_device(self.dev_root, path)
        except FileNotFoundError:
            if not required:
                return None
            raise errors.ConfigError(
                f"{seen_at} does not exist: the NVIDIA kernel driver is not loaded on this node, "
                f"or the dev root ({self.dev_root}) is wrong; load the driver (nvidia-smi on the "
                "host creates the node) or point the plugin's dev root at the host's /dev parent"
            ) from None
        except OSError as exc:
            raise errors.ConfigError(
                f"cannot stat {seen_at} ({errno.errorcode.get(exc.errno or 0, '?')}: "
                f"{exc.strerror}); mount the host's /dev into the plugin container"
            ) from exc
        except devnodes.NotACharDevice:
            raise errors.ConfigError(
                f"{seen_at} is not a character device; the dev root ({self.dev_root}) must be "
                "where the host's NVIDIA device nodes are (mount the host's /dev)"
            ) from None

    def _caps_major(self) -> int | None:
        try:
            with open(self._proc_devices, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            # Only MIG devices need the caps major; full GPUs still work without it.
            log.warning("event=proc_devices_unreadable path=%s error=%s", self._proc_devices, exc)
            return None
        return procdevices.character_major(text, CAPS_PROC_NAME)

    # Libraries.

    def _libraries(self) -> _Libraries:
        cached = self._ld_cache_paths()
        nvml = self._find_library(NVML_SONAME, cached)
        if nvml is None:
            raise errors.ConfigError(
                f"no NVIDIA driver under the driver root {self.root}: {NVML_SONAME} not "
                f"found (looked in {self.root}{LD_CACHE} and {', '.join(LIBRARY_DIRS)}); set "
                "nvidiaDriverRoot (Helm) / NVIDIA_DRIVER_ROOT to the directory the driver is "
                "installed in (/ for a host install, /run/nvidia/driver for the GPU Operator's)"
            )
        # As the NVIDIA container toolkit does for the upstream driver: the driver's library
        # directory and version come from libcuda.so.<version>, else from
        # libnvidia-ml.so.<version> (a driver without CUDA, such as NVIDIA's mock NVML).
        cuda = self._find_library(CUDA_SONAME, cached)
        anchor, version = "", None
        for soname, path in ((CUDA_SONAME, cuda), (NVML_SONAME, nvml)):
            real = None if path is None else self._resolve(path)
            version = None if real is None else driver_version_of(real)
            if real is not None and version is not None:
                anchor = real
                log.info("event=driver_version_found root=%s version=%s from=%s",
                         self.root, version, soname)
                break
        if version is None:
            raise errors.ConfigError(
                f"cannot tell the NVIDIA driver version under {self.root}: neither "
                f"{CUDA_SONAME} nor {nvml} leads to a lib*.so.<version> file; reinstall the "
                "driver or set nvidiaDriverRoot / NVIDIA_DRIVER_ROOT to a complete driver "
                "installation"
            )
        library_dir = os.path.dirname(anchor)
        candidates = set(cached)
        for directory in (library_dir, library_dir + "/vdpau"):
            candidates.update(self._list_dir(directory))
        mounts: dict[str, str] = {}
        links: list[devices.LibraryLink] = []
        for candidate in sorted(candidates):
            real = self._resolve(candidate)
            if real is None or not real.endswith(".so." + version) or not self._is_file(real):
                continue
            # The SONAME link's path (what the loader asks for) and the file's own path both
            # get the file: a container without the toolkit's hook has no symlinks to make.
            mounts[candidate] = real
            mounts[real] = real
            link = self._link(candidate, real)
            if link is not None:
                links.append(link)
        libraries = tuple(
            (self._host_path(real), container) for container, real in sorted(mounts.items())
        )
        log.info(
            "event=driver_libraries_found root=%s version=%s count=%d from_ld_cache=%s",
            self.root,
            version,
            len(libraries),
            bool(cached),
        )
        return _Libraries(
            libraries=libraries, version=version, directory=library_dir, links=tuple(links)
        )

    def _link(self, path: str, real: str) -> devices.LibraryLink | None:
        """`path` as a host symlink to `real`, where its own name is the link; else None.

        NB: a path that reaches the file only through a linked directory (`/lib` ->
        `/usr/lib`) is no link a container could be given: its directories may differ.
        """
        parent = os.path.dirname(path)
        if path == real or self._resolve(parent) != parent:
            return None
        try:
            target = os.readlink(_join(self.root, path))
        except OSError:
            return None
        return devices.LibraryLink(path=path, target=target, file=real)

    def _ld_cache_paths(self) -> tuple[str, ...]:
        """Paths (inside the root) of the 64-bit libraries in the root's ld cache; () if none."""
        cache = _join(self.root, LD_CACHE)
        if not os.path.isfile(cache):
            log.info("event=ld_cache_missing path=%s fallback=library_dirs", cache)
            return ()
        argv = [self._ldconfig, "-p", "-C", cache]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("event=ldconfig_failed argv=%s error=%s fallback=library_dirs", argv, exc)
            return ()
        if done.returncode != 0:
            log.warning(
                "event=ldconfig_failed argv=%s rc=%d stderr=%s fallback=library_dirs",
                argv,
                done.returncode,
                done.stderr.strip()[:200],
            )
            return ()
        return tuple(e.path for e in parse_ldconfig_output(done.stdout) if e.is_64bit)

    def _find_library(self, soname: str, cached: tuple[str, ...]) -> str | None:
        for path in cached:
            if os.path.basename(path) == soname:
                return path
        for directory in LIBRARY_DIRS:
            path = f"{directory}/{soname}"
            real = self._resolve(path)
            if real is not None and self._is_file(real):
                return path
        return None

    # Binaries and firmware.

    def _binaries(self) -> tuple[tuple[str, str], ...]:
        found = []
        for name in BINARY_NAMES:
            for directory in BINARY_DIRS:
                path = f"{directory}/{name}"
                real = self._resolve(path)
                if real is not None and self._is_file(real):
                    found.append((self._host_path(real), path))
                    break
        return tuple(found)

    def _firmware(self, version: str) -> tuple[tuple[str, str], ...]:
        found: dict[str, str] = {}
        for directory in FIRMWARE_DIRS:
            version_dir = f"{directory}/nvidia/{version}"
            for path in self._list_dir(version_dir):
                real = self._resolve(path)
                if path.endswith(".bin") and real is not None and self._is_file(real):
                    found.setdefault(path, real)
        return tuple((self._host_path(real), path) for path, real in sorted(found.items()))

    # Paths inside the root.

    def _host_path(self, path: str) -> str:
        return _join(self.host_root, path)

    def _is_file(self, path: str) -> bool:
        return os.path.isfile(_join(self.root, path))

    def _list_dir(self, directory: str) -> tuple[str, ...]:
        try:
            names = os.listdir(_join(self.root, directory))
        except OSError:
            return ()
        return tuple(f"{directory}/{name}" for name in sorted(names))

    def _resolve(self, path: str) -> str | None:
        """`path` (as seen inside the root) with every symlink followed inside the root.

        None when some component does not exist or the links loop.
        """
        pending = [part for part in path.split("/") if part]
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            here = "/" + "/".join([*resolved, part])
            try:
                target = os.readlink(_join(self.root, here))
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # not a link: keep the component
                    resolved.append(part)
                    continue
                return None
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                return None
            if target.startswith("/"):
                resolved = []
            pending = [p for p in target.split("/") if p] + pending
        return "/" + "/".join(resolved)


def _join(root: str, path: str) -> str:
    """`path` (absolute inside `root`) as a path on this machine."""
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else "/" + path.lstrip("/")
