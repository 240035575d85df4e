"""The node's GPU health events (`core.ports.GpuHealthEvents`), read from a child process.

NVML's event loop runs in `adapters.nvml.health_watch`, a child that may crash or hang
without taking the plugin down. `NvmlHealthEvents` starts it, turns its lines into
`core.gpu.health.HealthEvent`s on a background thread, and keeps it running: when the child
exits, cannot start, or prints garbage, the node is reported `UNMONITORED` once (events
are missed while it is down, and silence would read as "healthy"), and it is started again
after a capped exponential backoff. A child that comes back only says it is ready (nothing
is reported for that: what follows is for the state owner to decide).

The simulated variant (`simulated_health_events`) runs the same child on an events file
that tests and the demo append to (`raise_simulated_event`), so the whole path, restarts
included, runs without a GPU.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Final

from adapters.nvml import _health_lines, gpu_simulation, real
from core.gpu import health

logger = logging.getLogger(__name__)

WATCH_MODULE: Final = "adapters.nvml.health_watch"
EVENTS_FILE: Final = "health-events.jsonl"
DEFAULT_INITIAL_BACKOFF_S: Final = 0.5
DEFAULT_MAX_BACKOFF_S: Final = 30.0
# A bit more than one NVML wait (5 s): the real watch sees SIGTERM only between waits.
DEFAULT_TERMINATE_TIMEOUT_S: Final = 7.0
# A longer line is not one the watch prints (a ready line for hundreds of GPUs fits).
MAX_LINE_CHARS: Final = 65536
_STDERR_TAIL_LINES: Final = 20
_STDERR_TAIL_CHARS: Final = 800
_STDERR_LINE_CHARS: Final = 500
# How long the end of a dead child's stderr is waited for (a grandchild may hold it open).
_STDERR_JOIN_S: Final = 2.0

OnEvent = Callable[[health.HealthEvent], None]


def default_watch_command() -> tuple[str, ...]:
    # Its stdin is a pipe we hold: the watch ends with us, however we end.
    return (sys.executable, "-m", WATCH_MODULE, "--stop-on-stdin-eof")


def backoff_s(attempt: int, *, initial_s: float, max_s: float) -> float:
    """Seconds to wait before restart number `attempt` (0-based) of a failing watch."""
    # NB: the exponent is capped so that a long outage cannot overflow the float.
    return float(min(max_s, initial_s * 2 ** min(attempt, 60)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _ChildRun:
    """How one child ended."""

    returncode: int | None = None
    stderr_tail: str = ""
    start_error: str = ""
    ready: bool = False
    up_s: float = 0.0


class NvmlHealthEvents:
    """`core.ports.GpuHealthEvents` over the `adapters.nvml.health_watch` child.

    `command` replaces the child (default: the real NVML watch; tests inject others);
    `driver_root` and `env` give the child's environment as `adapters.nvml.real` gives the
    probe's (this package importable, the driver's libraries found). The restart backoff
    grows from `initial_backoff_s` to `max_backoff_s` and starts over once a child has
    been up that long; `sleep` (default: an interruptible wait) and `clock` are injectable
    for tests. `stop` sends SIGTERM, then SIGKILL after `terminate_timeout_s`.
    """

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        driver_root: str = "/",
        env: Mapping[str, str] | None = None,
        initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        terminate_timeout_s: float = DEFAULT_TERMINATE_TIMEOUT_S,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = tuple(command or default_watch_command())
        self.driver_root = driver_root
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.terminate_timeout_s = terminate_timeout_s
        self._env = dict(env) if env is not None else None
        self._stopping = threading.Event()
        self._sleep = sleep or self._stopping.wait
        self._clock = clock
        self._lock = threading.Lock()  # guards _proc and _thread against stop()
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._ready_changed = threading.Condition()
        self._ready_count = 0
        self._monitored: tuple[str, ...] = ()
        # Only the reader thread touches this: whether UNMONITORED was reported since the
        # last ready line (so a watch that keeps failing reports it once).
        self._down_reported = False

    def __repr__(self) -> str:
        return f"NvmlHealthEvents(command={self.command!r})"

    # ------------------------------------------------------------ the port

    def start(self, on_event: OnEvent) -> None:
        with self._lock:
            if self._thread is not None or self._stopping.is_set():
                raise RuntimeError("NvmlHealthEvents.start: it watches once (already started)")
            self._thread = threading.Thread(
                target=self._run, args=(on_event,), name="gpu-health-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            proc, thread = self._proc, self._thread
        if proc is not None:
            self._end(proc)
        # NB: stop() may be called from on_event, on the reader thread itself.
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # ------------------------------------------------------------ for tests and the demo

    @property
    def child_pid(self) -> int | None:
        """The running child's process id (None between children)."""
        with self._lock:
            return None if self._proc is None else self._proc.pid

    @property
    def monitored(self) -> tuple[str, ...]:
        """The GPUs the latest child said it watches."""
        with self._ready_changed:
            return self._monitored

    def wait_ready(self, timeout_s: float, *, times: int = 1) -> bool:
        """Whether, within `timeout_s`, children have said they are ready `times` times in
        all (a restarted child counts again)."""
        with self._ready_changed:
            return self._ready_changed.wait_for(lambda: self._ready_count >= times, timeout_s)

    # ------------------------------------------------------------ the reader thread

    def _run(self, on_event: OnEvent) -> None:
        attempt = 0
        while not self._stopping.is_set():
            run = self._run_child(on_event)
            if run is None or self._stopping.is_set():
                return
            self._went_down(run, on_event)
            if run.ready and run.up_s >= self.max_backoff_s:
                attempt = 0
            delay = backoff_s(attempt, initial_s=self.initial_backoff_s,
                              max_s=self.max_backoff_s)
            attempt += 1
            logger.info("event=gpu_health_watch_restart_scheduled delay_s=%.2f attempt=%d",
                        delay, attempt)
            self._sleep(delay)

    def _run_child(self, on_event: OnEvent) -> _ChildRun | None:
        """Run one child to its end; None when stopped before it started."""
        with self._lock:
            if self._stopping.is_set():
                return None
            try:
                proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.PIPE,  # never written: its EOF is our end
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    env=real.child_env(driver_root=self.driver_root, env=self._env),
                    # Its own session: a Ctrl-C meant for us must not end it behind our back
                    # (it sees its stdin close once we are gone).
                    start_new_session=True,
                )
            except OSError as exc:
                return _ChildRun(start_error=str(exc))
            self._proc = proc
        logger.info("event=gpu_health_watch_started pid=%d command=%r", proc.pid,
                    " ".join(self.command))
        started = self._clock()
        assert proc.stderr is not None  # piped above
        stderr = _StderrTail(proc.stderr, pid=proc.pid)
        try:
            ready = self._pump(proc, on_event)
        finally:
            returncode = self._reap(proc)
            tail = stderr.tail(_STDERR_JOIN_S)
            with self._lock:
                self._proc = None
        return _ChildRun(returncode=returncode, stderr_tail=tail, ready=ready,
                         up_s=self._clock() - started)

    def _pump(self, proc: subprocess.Popen[str], on_event: OnEvent) -> bool:
        """Deliver the child's lines until it closes stdout, or prints two bad lines in a
        row (one may be a stray print; more means it is not the watch we know); returns
        whether it said it was ready."""
        assert proc.stdout is not None  # piped in _run_child
        ready = False
        bad_in_a_row = 0
        while line := proc.stdout.readline(MAX_LINE_CHARS):
            try:
                if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
                    raise _health_lines.HealthLineError(
                        f"a line longer than {MAX_LINE_CHARS} characters")
                decoded = _health_lines.decode_line(line)
            except _health_lines.HealthLineError as exc:
                bad_in_a_row += 1
                logger.warning("event=gpu_health_watch_bad_line pid=%d error=%s", proc.pid, exc)
                if bad_in_a_row > 1:
                    logger.error("event=gpu_health_watch_bad_output pid=%d action=restart",
                                 proc.pid)
                    self._end(proc)
                    break
                continue
            bad_in_a_row = 0
            if isinstance(decoded, _health_lines.Ready):
                ready = True
                self._on_ready(decoded, pid=proc.pid)
            else:
                self._deliver(on_event, decoded)
        return ready

    def _on_ready(self, ready: _health_lines.Ready, *, pid: int) -> None:
        logger.info("event=gpu_health_watch_ready pid=%d monitored=%s", pid,
                    ",".join(ready.monitored))
        self._down_reported = False
        with self._ready_changed:
            self._monitored = ready.monitored
            self._ready_count += 1
            self._ready_changed.notify_all()

    def _deliver(self, on_event: OnEvent, event: health.HealthEvent) -> None:
        logger.info("event=gpu_health_event kind=%s gpu=%s gi=%d ci=%d xid=%d",
                    event.kind.value, event.gpu_uuid or "(node)", event.gi_id, event.ci_id,
                    event.xid)
        try:
            on_event(event)
        except Exception:  # NB: a failing consumer must not end the watch
            logger.exception("event=gpu_health_event_handler_failed kind=%s gpu=%s",
                             event.kind.value, event.gpu_uuid or "(node)")

    def _went_down(self, run: _ChildRun, on_event: OnEvent) -> None:
        if run.start_error:
            logger.error("event=gpu_health_watch_start_failed command=%r error=%s",
                         " ".join(self.command), run.start_error)
        else:
            logger.error("event=gpu_health_watch_exited rc=%s up_s=%.1f stderr_tail=%r",
                         run.returncode, run.up_s, run.stderr_tail or "(empty)")
        if not self._down_reported:
            self._down_reported = True
            self._deliver(on_event, health.HealthEvent(kind=health.HealthEventKind.UNMONITORED))

    # ------------------------------------------------------------ the child's end

    def _reap(self, proc: subprocess.Popen[str]) -> int:
        """The exit status of a child whose stdout ended (ended here if it lingers)."""
        try:
            return proc.wait(timeout=self.terminate_timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("event=gpu_health_watch_lingers pid=%d action=terminate", proc.pid)
            self._end(proc)
            return proc.wait()
        finally:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    def _end(self, proc: subprocess.Popen[str]) -> None:
        """SIGTERM, then SIGKILL after the timeout; returns once the child is gone."""
        if proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=self.terminate_timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("event=gpu_health_watch_killed pid=%d after_s=%g", proc.pid,
                           self.terminate_timeout_s)
            proc.kill()
            proc.wait()


class _StderrTail:
    """Reads a child's stderr as it comes (so a chatty child never blocks on a full pipe),
    logs each line, and keeps the last few for the exit log."""

    def __init__(self, stream: IO[str], *, pid: int) -> None:
        self._stream = stream
        self._pid = pid
        self._lines: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self._thread = threading.Thread(
            target=self._read, name=f"gpu-health-watch-stderr-{pid}", daemon=True)
        self._thread.start()

    def tail(self, timeout_s: float) -> str:
        """The last lines, once the stream ended (or `timeout_s` passed)."""
        self._thread.join(timeout_s)
        return "\n".join(self._lines)[-_STDERR_TAIL_CHARS:]

    def _read(self) -> None:
        try:
            while line := self._stream.readline(_STDERR_LINE_CHARS):
                text = line.rstrip("\n")
                self._lines.append(text)
                logger.warning("event=gpu_health_watch_stderr pid=%d line=%s", self._pid, text)
        finally:
            self._stream.close()


# ---------------------------------------------------------------- the simulated variant


def simulated_events_path(driver_root: str) -> str:
    """Where, under a simulated driver root, its health events file lives."""
    return os.path.join(driver_root, gpu_simulation.STATE_DIR, EVENTS_FILE)


def simulated_health_events(
    events_file: str, gpu_uuids: Sequence[str], *, poll_s: float | None = None
) -> NvmlHealthEvents:
    """Health events of simulated GPUs `gpu_uuids`: the lines appended to `events_file`
    (created if missing) while the watch runs, read every `poll_s` (default: the watch's)."""
    command = (
        *default_watch_command(),
        f"--simulated-events={os.path.abspath(events_file)}",
        *(f"--simulated-gpu-uuid={uuid}" for uuid in gpu_uuids),
        *(() if poll_s is None else (f"--poll-interval-s={poll_s}",)),
    )
    return NvmlHealthEvents(command=command)


def raise_simulated_event(driver_root_or_path: str, event: health.HealthEvent) -> None:
    """Append `event` to a simulated events file (given, or that of a driver root: a
    directory) in one O_APPEND write, so concurrent writers never interleave a line."""
    path = (simulated_events_path(driver_root_or_path)
            if os.path.isdir(driver_root_or_path) else driver_root_or_path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = (_health_lines.encode_event(event) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(f"raise_simulated_event: wrote {written} of {len(data)} bytes to {path}")
