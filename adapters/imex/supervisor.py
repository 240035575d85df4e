"""`nvidia-imex` as a supervised child: started once, told to reload, restarted when it dies.

The child runs in the foreground (DAEMONIZE=0) with our stdout/stderr, so its log lines land in
the pod log. SIGUSR1 makes it re-read its nodes config and reconnect to peers. A child that
exits on its own is restarted after a capped exponential backoff; the backoff resets once a
child has stayed up for `stable_after_s`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)


class IMEXSupervisor:
    """Runs `argv` until `stop`; thread-safe."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        stable_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._argv = tuple(argv)
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._stable_after_s = stable_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._thread: threading.Thread | None = None
        self.restarts = 0

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def pid(self) -> int | None:
        with self._lock:
            child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def child_age_s(self) -> float | None:
        """Seconds since the running child was started; None when none runs."""
        with self._lock:
            child, started_at = self._child, self._started_at
        if child is None or child.poll() is not None:
            return None
        return self._clock() - started_at

    def start(self) -> None:
        """Start the child (raises OSError when the executable cannot run) and its watcher."""
        if self._thread is not None:
            return
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name="imex-supervisor", daemon=True)
        self._thread.start()

    def reload(self) -> bool:
        """SIGUSR1 to the running child; False when none runs, or it is still starting (a
        fresh one reads the files)."""
        with self._lock:
            child = self._child
            if child is None or child.poll() is not None or _still_starting(child.pid):
                return False
            child.send_signal(signal.SIGUSR1)
        log.info("event=imex_reload_signalled pid=%d signal=SIGUSR1", child.pid)
        return True

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM the child, SIGKILL it after `timeout_s`, and stop restarting it."""
        # NB: set under the lock a spawn holds: a restart either finished (its child is read
        # here and terminated) or sees the flag and does not start.
        with self._lock:
            self._stopping.set()
            child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("event=imex_kill pid=%d reason=no_exit_after_sigterm", child.pid)
                child.kill()
                child.wait()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _spawn(self) -> bool:
        """Start a child unless stopping (False then); raises OSError when it cannot run."""
        if shutil.which(self._argv[0]) is None:
            raise FileNotFoundError(2, "no such executable", self._argv[0])
        with self._lock:
            if self._stopping.is_set():
                return False
            child = subprocess.Popen(_with_parent_death_signal(self._argv),
                                     stdin=subprocess.DEVNULL)
            self._child = child
            self._started_at = self._clock()
        log.info("event=imex_started pid=%d argv=%r", child.pid, " ".join(self._argv))
        return True

    def _watch(self) -> None:
        failures = 0
        while True:
            with self._lock:
                child = self._child
            assert child is not None
            code = child.wait()
            if self._stopping.is_set():
                log.info("event=imex_stopped pid=%d exit_code=%d", child.pid, code)
                return
            ran_s = self._clock() - self._started_at
            failures = 1 if ran_s >= self._stable_after_s else failures + 1
            delay = min(self._backoff_max_s, self._backoff_initial_s * 2 ** (failures - 1))
            log.warning(
                "event=imex_exited pid=%d exit_code=%d ran_s=%.1f restart_in_s=%.2f attempt=%d",
                child.pid, code, ran_s, delay, failures,
            )
            if self._stopping.wait(delay):
                return
            try:
                if not self._spawn():
                    return
            except OSError as exc:
                log.error("event=imex_restart_failed error=%r", str(exc))
                with self._lock:
                    self._started_at = self._clock()
                continue
            self.restarts += 1


# The child asks Linux for SIGTERM when the thread that started it ends (a kill -9 of the
# daemon, tests, the demo; in a pod the container's end takes it along anyway), then becomes
# nvidia-imex (same pid). A tiny single-threaded interpreter does this instead of a
# `preexec_fn`, which in a threaded process can deadlock between fork and exec.
_SHIM = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform.startswith('linux'):\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
    "    if os.getppid() != int(sys.argv[1]):\n"
    "        os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _with_parent_death_signal(argv: Sequence[str]) -> list[str]:
    return [*_SHIM_ARGV, str(os.getpid()), *argv]


_SHIM_ARGV = (sys.executable, "-I", "-S", "-c", _SHIM)
_SHIM_CMDLINE = ("\0".join(_SHIM_ARGV) + "\0").encode()


def _still_starting(pid: int) -> bool:
    """True while `pid` is still the shim, before it became nvidia-imex: SIGUSR1 would kill
    it then, and nvidia-imex reads the files when it starts anyway."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(_SHIM_CMDLINE)
    except OSError:
        return False
