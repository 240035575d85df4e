"""Host `nvidia-imex-ctl -q` readiness probe for host-managed IMEX (optional check).

Runs the host's control tool from under the driver root with a timeout; interpretation
of its answer is pure (`core.computedomain.hostimex`).
"""

from __future__ import annotations

import logging
import os
import subprocess

from core import errors
from core.computedomain import hostimex

log = logging.getLogger(__name__)


class HostIMEXProbe:
    """Asks the host IMEX daemon, through its control socket, whether it is READY."""

    def __init__(
        self,
        *,
        driver_root: str,
        socket_path: str,
        command: str = "nvidia-imex-ctl",
        timeout_s: float = 5.0,
    ) -> None:
        # The chart mounts the host socket at the same path inside the plugin container.
        self._socket = socket_path
        self._command = self._resolve(driver_root, command)
        self._timeout_s = timeout_s

    @staticmethod
    def _resolve(driver_root: str, command: str) -> str:
        if os.path.isabs(command):
            return command
        for directory in ("usr/bin", "usr/sbin", "bin"):
            candidate = os.path.join(driver_root, directory, command)
            if os.access(candidate, os.X_OK):
                return candidate
        return command  # fall back to PATH

    def check(self) -> errors.RetryableError | None:
        """None when READY; otherwise the retryable error naming the socket and the fix."""
        argv = [self._command, "-q", "--socket", self._socket]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except FileNotFoundError:
            detail = f"{self._command} not found under the driver root or on PATH"
        except subprocess.TimeoutExpired:
            detail = f"{self._command} did not answer within {self._timeout_s:g}s"
        else:
            if hostimex.is_ready(exit_code=done.returncode, stdout=done.stdout):
                return None
            answer = (done.stdout.strip() or done.stderr.strip() or "no output")[:200]
            detail = f"exit code {done.returncode}, answered {answer!r}"
        log.warning("event=host_imex_not_ready socket=%s detail=%r", self._socket, detail)
        return hostimex.not_ready_error(socket_path=self._socket, detail=detail)
