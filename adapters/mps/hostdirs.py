"""The directories of MPS control daemons on the node: `<plugin dir>/mps/<daemon id>/`.

`pipe` (the daemon's control socket and the clients' pipes), `log` (control.log and the
wrapper's startup file) and `shm`: a tmpfs of its own, as upstream mounts it (rw, nosuid,
nodev, noexec, half the node's memory), so the daemon's and its clients' shared memory is
neither the node's /dev/shm nor capped by a container's. Where the plugin may not mount (tests,
the demo), `tmpfs=False` leaves shm a plain directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from core import errors
from core.gpu import mps

log = logging.getLogger(__name__)

FALLBACK_SHM_SIZE = "65536k"
_MOUNT_OPTIONS = "rw,nosuid,nodev,noexec,relatime"


class MpsHostDirs:
    """Creates and removes the daemons' directories under `control_root` (`<plugin dir>/mps`)."""

    def __init__(
        self, control_root: str, *, tmpfs: bool = True, meminfo: str = "/proc/meminfo",
        timeout_s: float = 30.0,
    ) -> None:
        self._root = control_root
        self._tmpfs = tmpfs
        self._meminfo = meminfo
        self._timeout_s = timeout_s

    @property
    def control_root(self) -> str:
        """Where the daemons' directories are (`<plugin dir>/mps`)."""
        return self._root

    def dirs(self, daemon_id: str) -> mps.MpsDirs:
        """The directories of one daemon."""
        return mps.daemon_dirs(self._root, daemon_id)

    def create(self, daemon_id: str) -> mps.MpsDirs:
        """Make pipe, log and shm (mounting the tmpfs unless mounted already); idempotent."""
        dirs = self.dirs(daemon_id)
        for path in (dirs.pipe, dirs.log, dirs.shm):
            os.makedirs(path, mode=0o755, exist_ok=True)
        if self._tmpfs and not os.path.ismount(dirs.shm):
            options = f"{_MOUNT_OPTIONS},size={self.shm_size()}"
            self._run(["mount", "-t", "tmpfs", "-o", options, "shm", dirs.shm],
                      doing=f"mount a tmpfs on {dirs.shm}")
        return dirs

    def remove(self, daemon_id: str) -> None:
        """Unmount shm (if mounted) and remove the daemon's directory; idempotent."""
        dirs = self.dirs(daemon_id)
        if not os.path.isdir(dirs.root):
            return
        if os.path.ismount(dirs.shm):
            self._run(["umount", dirs.shm], doing=f"unmount {dirs.shm}")
        shutil.rmtree(dirs.root, ignore_errors=True)
        if os.path.exists(dirs.root):
            raise errors.RetryableError(
                f"could not remove {dirs.root} (still in use?); the unprepare is retried"
            )

    def daemon_ids(self) -> frozenset[str]:
        """The daemons whose directories exist (for start-up reports)."""
        try:
            return frozenset(
                n for n in os.listdir(self._root) if os.path.isdir(os.path.join(self._root, n))
            )
        except FileNotFoundError:
            return frozenset()

    def shm_size(self) -> str:
        """Half the node's memory as tmpfs takes it (`<n>k`), as upstream sizes it."""
        try:
            with open(self._meminfo, encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("MemTotal:"):
                        amount, _, unit = line.split(":", 1)[1].strip().partition(" ")
                        return f"{int(amount) // 2}{unit[:1]}"
        except (OSError, ValueError) as exc:
            log.warning("event=mps_shm_size_unknown meminfo=%s error=%r", self._meminfo, exc)
        return FALLBACK_SHM_SIZE

    def _run(self, argv: list[str], *, doing: str) -> None:
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                timeout=self._timeout_s, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise errors.RetryableError(f"cannot {doing}: {exc}") from exc
        if done.returncode != 0:
            raise errors.RetryableError(
                f"cannot {doing} ({' '.join(argv)} exit code {done.returncode}): "
                f"{done.stdout.strip()[:300] or 'no output'}; the GPU plugin needs "
                "CAP_SYS_ADMIN and a bidirectional mount of its plugin directory (the chart's)"
            )
