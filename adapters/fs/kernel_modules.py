"""Kernel modules on the host, loaded as upstream loads vfio-pci: `chroot <host root> modprobe`.

The plugin runs in a container; the host's root file system is mounted at `--host-root`
(upstream's flag and default, `/host-root`). A module counts as loaded when the host's
`/sys/module/<name>` is a directory (the kernel's name: dashes become underscores); else
`chroot <host root> modprobe <module>` runs, so the host's own modprobe, modules and
configuration do the work. The chroot program is an argument so tests can put a stand-in
on PATH that implements its contract (run the command inside the given root).
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
        self, host_root: str, *, chroot: str = "chroot", timeout_s: float = MODPROBE_TIMEOUT_S
    ) -> None:
        self.host_root = host_root
        self._chroot = chroot
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"ChrootModprobe(host_root={self.host_root!r})"

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
