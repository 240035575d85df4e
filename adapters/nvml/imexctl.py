"""Host `nvidia-imex-ctl -q --u=<socket>` readiness probe for host-managed IMEX.

Finds the host's control tool under the driver root and runs it there (chroot) with a
timeout; building the query and judging its answer are pure (`core.computedomain.hostimex`).
"""

from __future__ import annotations

import logging
import os
import subprocess

from core import errors
from core.computedomain import hostimex

log = logging.getLogger(__name__)


class HostIMEXProbe:
    """Asks the host IMEX daemon, through its command socket, whether it is READY."""

    def __init__(
        self,
        *,
        driver_root: str,
        socket_path: str = hostimex.DEFAULT_HOST_SOCKET,
        ctl_path: str | None = None,
        chroot: str = "chroot",
        timeout_s: float = 5.0,
    ) -> None:
        """`ctl_path`: the tool's path inside the driver root; None looks it up at each probe
        (the nvidia-imex package may be installed after the plugin started)."""
        self._driver_root = driver_root
        self._socket = socket_path
        self._ctl_path = ctl_path
        self._chroot = chroot
        self._timeout_s = timeout_s

    def _find_ctl(self) -> str | None:
        if self._ctl_path is not None:
            return self._ctl_path
        for directory in hostimex.SEARCH_DIRS:
            inside = f"{directory}/{hostimex.CTL_NAME}"
            if os.access(os.path.join(self._driver_root, inside.lstrip("/")), os.X_OK):
                return inside
        return None

    def check(self) -> errors.RetryableError | None:
        """None when READY; otherwise the retryable error naming the socket and the fix."""
        ctl = self._find_ctl()
        if ctl is None:
            return self._not_ready(hostimex.ctl_missing_detail(self._driver_root))
        argv = hostimex.ctl_argv(
            driver_root=self._driver_root, ctl_path=ctl, socket_path=self._socket,
            chroot=self._chroot,
        )
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except FileNotFoundError:
            return self._not_ready(f"{argv[0]} not found")
        except subprocess.TimeoutExpired:
            return self._not_ready(f"{ctl} did not answer within {self._timeout_s:g}s")
        if hostimex.is_ready(exit_code=done.returncode, stdout=done.stdout):
            return None
        answer = (done.stdout.strip() or done.stderr.strip() or "no output")[:200]
        return self._not_ready(f"exit code {done.returncode}, answered {answer!r}")

    def _not_ready(self, detail: str) -> errors.RetryableError:
        log.warning("event=host_imex_not_ready socket=%s detail=%r", self._socket, detail)
        return hostimex.not_ready_error(socket_path=self._socket, detail=detail)
