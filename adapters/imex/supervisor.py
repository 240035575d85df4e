"""`nvidia-imex` as a supervised child: started once, told to reload, restarted when it dies.

The child runs in the foreground (DAEMONIZE=0) with our stdout/stderr, so its log lines land in
the pod log. SIGUSR1 makes it re-read its nodes config and reconnect to peers. A child that
exits on its own is restarted after a capped exponential backoff; the backoff resets once a
child has stayed up for `stable_after_s`.
"""

from __future__ import annotations

import ctypes
import logging
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
        """SIGUSR1 to the running child; False when none runs (a fresh one reads the files)."""
        with self._lock:
            child = self._child
            if child is None or child.poll() is not None:
                return False
            child.send_signal(signal.SIGUSR1)
        log.info("event=imex_reload_signalled pid=%d signal=SIGUSR1", child.pid)
        return True

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM the child, SIGKILL it after `timeout_s`, and stop restarting it."""
        self._stopping.set()
        with self._lock:
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

    def _spawn(self) -> None:
        child = subprocess.Popen(
            self._argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        with self._lock:
            self._child = child
            self._started_at = self._clock()
        log.info("event=imex_started pid=%d argv=%r", child.pid, " ".join(self._argv))

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
                self._spawn()
            except OSError as exc:
                log.error("event=imex_restart_failed error=%r", str(exc))
                with self._lock:
                    self._started_at = self._clock()
                continue
            self.restarts += 1


_PR_SET_PDEATHSIG = 1
# NB: resolved once here: between fork and exec the child may only call, not load or import.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    # In a pod the container's end takes the child along; outside one (tests, the demo, a
    # kill -9 of the daemon) Linux's parent-death signal does the same.
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
