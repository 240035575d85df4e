"""Kernel modules on the host, loaded as upstream loads vfio-pci: `chroot <host root> modprobe`.

The plugin runs in a container; the host's root file system is mounted at `--host-root`
(upstream's flag and default, `/host-root`). A module counts as loaded when the host's
`/sys/module/<name>` is a directory (the kernel's name: dashes become underscores); else
`chroot <host root> modprobe <module>` runs, so the host's own modprobe, modules and
configuration do the work. The chroot program is an argument so tests can put a stand-in
on PATH that implements its contract (run the command inside the given root). The host's
`modules.alias` (under the host root, as upstream reads it from the host's /lib/modules) tells
which VFIO variant module serves a device (`core.gpu.vfio_variant`).
"""

from __future__ import annotations

import logging
import os
import subprocess

from core import errors

log = logging.getLogger(__name__)

MODPROBE_TIMEOUT_S = 60.0


class ChrootModprobe:
    """`core.ports.KernelModules` on the host root mounted at `host_root`."""

    def __init__(
        self,
        host_root: str,
        *,
        chroot: str = "chroot",
        timeout_s: float = MODPROBE_TIMEOUT_S,
        kernel_release: str | None = None,
    ) -> None:
        """`kernel_release` (default: the running kernel's, which a container shares with
        its host) names the host's modules directory."""
        self.host_root = host_root
        self._chroot = chroot
        self._timeout_s = timeout_s
        self._release = kernel_release or os.uname().release

    def __repr__(self) -> str:
        return f"ChrootModprobe(host_root={self.host_root!r})"

    def modules_alias(self) -> str:
        """The host's `/lib/modules/<release>/modules.alias`; "" where it cannot be read
        (then no vendor variant is known, and vfio-pci serves)."""
        path = os.path.join(self.host_root, "lib/modules", self._release, "modules.alias")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError as exc:
            log.warning("event=modules_alias_unreadable path=%s error=%r", path, exc.strerror)
            return ""

    def is_loaded(self, module: str) -> bool:
        """Whether the host's /sys/module shows `module`."""
        name = module.replace("-", "_")
        return os.path.isdir(os.path.join(self.host_root, "sys/module", name))

    def ensure_loaded(self, module: str) -> None:
        """Load `module` on the host unless it is loaded; PermanentError saying why not."""
        if self.is_loaded(module):
            return
        command = [self._chroot, self.host_root, "modprobe", module]
        shown = " ".join(command)
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except FileNotFoundError as exc:
            raise errors.PermanentError(
                f"cannot load kernel module {module}: {self._chroot!r} is not on PATH ({exc}); "
                f"load it on the node (modprobe {module})"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise errors.RetryableError(
                f"loading kernel module {module} did not finish in {self._timeout_s:g}s "
                f"({shown})"
            ) from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip().splitlines()
            raise errors.PermanentError(
                f"loading kernel module {module} failed: `{shown}` exited {done.returncode}"
                f"{': ' + output[-1] if output else ''}; load it on the node (modprobe "
                f"{module}), and check that --host-root ({self.host_root}) is the host's root "
                "file system"
            )
        log.info("event=kernel_module_loaded module=%s host_root=%s", module, self.host_root)
