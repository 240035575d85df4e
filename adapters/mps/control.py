"""`nvidia-cuda-mps-control` as the daemon's container runs it: start, configure, quit.

Upstream's container script, as a program: when the driver root has a shell (a full driver
installation) and we may chroot, the daemon runs chrooted into it, so it uses the driver's own
libraries and sees its pipe and log directories at /tmp/nvidia-mps and /var/log/nvidia-mps
inside; otherwise (a driver root without a shell, e.g. GKE's; or no privilege to chroot) the
driver root's binaries and libraries go first on PATH and LD_LIBRARY_PATH and the directories
are given as they are mounted.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import subprocess
from collections.abc import Mapping, Sequence

from core import errors

log = logging.getLogger(__name__)

PROGRAM = "nvidia-cuda-mps-control"
_SHELLS = ("bin/sh", "usr/bin/sh")
_BIN_DIRS = ("usr/bin", "bin", "usr/local/bin")
_LIB_DIRS = ("lib64", "lib", "usr/lib64", "usr/lib")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControlPaths:
    """Where the container sees the driver root and the daemon's pipe and log directories."""

    driver_root: str
    pipe_dir: str
    log_dir: str


class MpsControl:
    """Runs `nvidia-cuda-mps-control` for one daemon's directories."""

    def __init__(
        self,
        paths: ControlPaths,
        *,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        may_chroot: bool | None = None,
    ) -> None:
        self._paths = paths
        self._environ = dict(os.environ if environ is None else environ)
        self._timeout_s = timeout_s
        chroot_ok = os.geteuid() == 0 if may_chroot is None else may_chroot
        self._chroot = chroot_ok and any(
            os.access(os.path.join(paths.driver_root, shell), os.X_OK) for shell in _SHELLS
        )

    @property
    def chrooted(self) -> bool:
        """Whether the daemon runs chrooted into the driver root."""
        return self._chroot

    def start(self, *, multi_user: bool = False) -> None:
        """`nvidia-cuda-mps-control -d [-M]`: the daemon forks and keeps running.

        errors.DriverError with the program's output when it fails.
        """
        self._run(("-d", *(("-M",) if multi_user else ())), stdin="", purpose="start the daemon")
        log.info("event=mps_daemon_started chroot=%s multi_user=%s pipe_dir=%s",
                 self._chroot, multi_user, self._paths.pipe_dir)

    def send(self, commands: Sequence[str]) -> str:
        """Send each command on its own line to the running daemon; returns its answers."""
        if not commands:
            return ""
        text = "".join(f"{c}\n" for c in commands)
        answer = self._run((), stdin=text, purpose="configure the daemon")
        log.info("event=mps_daemon_configured commands=%r answer=%r", list(commands),
                 answer.strip())
        return answer

    def quit(self) -> None:
        """Ask the daemon to shut down (`quit`); a daemon already gone is fine."""
        try:
            self._run((), stdin="quit\n", purpose="stop the daemon")
        except errors.DriverError as exc:
            log.warning("event=mps_daemon_quit_failed error=%r", exc.message)

    def _run(self, args: tuple[str, ...], *, stdin: str, purpose: str) -> str:
        argv, env = self._command(args)
        try:
            done = subprocess.run(
                argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=env, timeout=self._timeout_s, check=False,
            )
        except subprocess.TimeoutExpired:
            raise errors.DriverError(
                f"{PROGRAM} did not {purpose} within {self._timeout_s:g}s"
            ) from None
        except OSError as exc:
            raise errors.DriverError(
                f"cannot run {PROGRAM} to {purpose} ({exc.strerror or exc}): is the driver root "
                f"{self._paths.driver_root} a full driver installation with {PROGRAM}?"
            ) from exc
        if done.returncode != 0:
            raise errors.DriverError(
                f"{PROGRAM} failed to {purpose} (exit code {done.returncode}): "
                f"{done.stdout.strip()[:500] or 'no output'}"
            )
        return done.stdout

    def _command(self, args: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        env = dict(self._environ)
        root = self._paths.driver_root
        if self._chroot:
            env["CUDA_MPS_PIPE_DIRECTORY"] = _inside(root, self._paths.pipe_dir)
            env["CUDA_MPS_LOG_DIRECTORY"] = _inside(root, self._paths.log_dir)
            return ["chroot", root, PROGRAM, *args], env
        env["PATH"] = os.pathsep.join(
            [*(os.path.join(root, d) for d in _BIN_DIRS), env.get("PATH", os.defpath)]
        )
        libraries = [os.path.join(root, d) for d in _LIB_DIRS]
        if env.get("LD_LIBRARY_PATH"):
            libraries.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
        env["CUDA_MPS_PIPE_DIRECTORY"] = self._paths.pipe_dir
        env["CUDA_MPS_LOG_DIRECTORY"] = self._paths.log_dir
        return [PROGRAM, *args], env


def _inside(root: str, path: str) -> str:
    """`path` as seen from inside the chroot at `root` (it must lie under it)."""
    relative = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(root))
    if relative.startswith(".."):
        raise errors.DriverError(
            f"{path} is not inside the driver root {root}: mount the MPS pipe and log "
            "directories under the driver root (the Deployment the plugin writes does)"
        )
    return posixpath.join("/", relative)
