"""GPU health events through a real watch child (`adapters.nvml.health_watch`).

Covers: events raised in the simulated events file reach `on_event` as `HealthEvent`s; a
malformed line is skipped (noted on stderr) and later events still arrive; the watch sees
only lines appended while it runs, and copes with a file truncated or written in pieces; a
child killed with SIGKILL is one node-wide UNMONITORED, then a restart; a watch whose parent
was killed ends by itself; a child that cannot
start (missing module, missing program, no NVML) is UNMONITORED once however often it is
retried; a child printing garbage is restarted, one stray line is not; `stop` leaves no
child behind, SIGKILLs one that ignores SIGTERM, and is idempotent. Waits are on events and
log lines, never on sleeps.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from adapters import nvml
from adapters.nvml import _health_lines, health_events, health_watch, real
from apps.cli.embedded import wait_until
from core import ports
from core.gpu import health

GPU_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
GPU_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
TIMEOUT_S = 20.0
HAS_NVML = ctypes.util.find_library("nvidia-ml") is not None
UNMONITORED_NODE = health.HealthEvent(kind=health.HealthEventKind.UNMONITORED)
XID_79 = health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=GPU_A, xid=79)


class Recorder:
    """`on_event` for the tests: keeps every event (called from the watch's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[health.HealthEvent] = []

    def __call__(self, event: health.HealthEvent) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[health.HealthEvent]:
        with self._lock:
            return list(self._events)

    def wait_for(self, event: health.HealthEvent, *, count: int = 1) -> None:
        wait_until(lambda: self.events.count(event) >= count, timeout_s=TIMEOUT_S,
                   what=f"{count} x {event}")


class RecordingSleep:
    """The restart backoff, recorded, but waited only briefly (the tests need restarts,
    not the real delays)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._brief = threading.Event()

    def __call__(self, delay_s: float) -> None:
        self.delays.append(delay_s)
        self._brief.wait(0.05)


def _logged(caplog: pytest.LogCaptureFixture, *parts: str) -> list[str]:
    return [r.getMessage() for r in list(caplog.records)
            if all(part in r.getMessage() for part in parts)]


def _wait_logged(caplog: pytest.LogCaptureFixture, *parts: str, count: int = 1) -> None:
    wait_until(lambda: len(_logged(caplog, *parts)) >= count, timeout_s=TIMEOUT_S,
               what=f"{count} log line(s) with {parts}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _gone_or_zombie(pid: int) -> bool:
    """Whether `pid` has ended (an orphan may wait as a zombie for a container's init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _append(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="adapters.nvml.health_events")
    return caplog


@pytest.fixture
def events_file(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(os.fspath(tmp_path), "state", "health-events.jsonl")


@pytest.fixture
def watching(events_file: str) -> Iterator[tuple[nvml.NvmlHealthEvents, Recorder]]:
    watch = nvml.simulated_health_events(events_file, [GPU_A, GPU_B])
    recorder = Recorder()
    watch.start(recorder)
    try:
        assert watch.wait_ready(TIMEOUT_S), "the simulated watch never said it was ready"
        yield watch, recorder
    finally:
        watch.stop()


def test_raised_events_reach_on_event_as_health_events(
    watching: tuple[nvml.NvmlHealthEvents, Recorder], events_file: str
) -> None:
    watch, recorder = watching
    port: ports.GpuHealthEvents = watch
    assert port is watch
    assert watch.monitored == (GPU_A, GPU_B)
    raised = [
        health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=GPU_A, gi_id=1, ci_id=0,
                           xid=31),
        health.HealthEvent(kind=health.HealthEventKind.GPU_LOST),
        health.HealthEvent(kind=health.HealthEventKind.UNMONITORED, gpu_uuid=GPU_B),
        XID_79,
    ]
    for event in raised:
        nvml.raise_simulated_event(events_file, event)
    wait_until(lambda: len(recorder.events) >= len(raised), timeout_s=TIMEOUT_S,
               what="the raised events")
    assert recorder.events == raised


def test_events_raised_through_a_driver_root_arrive(tmp_path: os.PathLike[str]) -> None:
    root = os.fspath(tmp_path)
    watch = nvml.simulated_health_events(nvml.simulated_events_path(root), [GPU_A])
    recorder = Recorder()
    watch.start(recorder)
    try:
        assert watch.wait_ready(TIMEOUT_S)
        assert os.path.isfile(nvml.simulated_events_path(root))
        nvml.raise_simulated_event(root, XID_79)
        recorder.wait_for(XID_79)
    finally:
        watch.stop()


def test_a_malformed_line_is_skipped_with_a_note_and_later_events_arrive(
    watching: tuple[nvml.NvmlHealthEvents, Recorder], events_file: str,
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    watch, recorder = watching
    pid = watch.child_pid
    _append(events_file, b'not json\n{"kind": "fire"}\n{"ready": true}\n')
    nvml.raise_simulated_event(events_file, XID_79)
    recorder.wait_for(XID_79)
    _wait_logged(caplog_info, "event=gpu_health_watch_stderr", "simulated_health_line_skipped",
                 count=3)
    assert recorder.events == [XID_79]
    assert watch.child_pid == pid  # skipped in the child: no restart


def test_only_lines_appended_while_the_watch_runs_are_seen(events_file: str) -> None:
    os.makedirs(os.path.dirname(events_file))
    before = health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=GPU_B, xid=48)
    nvml.raise_simulated_event(events_file, before)
    watch = nvml.simulated_health_events(events_file, [GPU_A])
    recorder = Recorder()
    watch.start(recorder)
    try:
        assert watch.wait_ready(TIMEOUT_S)
        nvml.raise_simulated_event(events_file, XID_79)
        recorder.wait_for(XID_79)
        assert recorder.events == [XID_79]
    finally:
        watch.stop()


def test_the_file_tail_copes_with_pieces_and_truncation(events_file: str) -> None:
    """In process: the tail itself, fed a line in two writes, then a truncated file."""
    lines: list[str] = []
    ready = threading.Event()
    stop = threading.Event()

    def emit(line: str) -> None:
        lines.append(line)
        ready.set()

    tail = threading.Thread(target=health_watch.watch_file,
                            args=(events_file, [GPU_A], stop, emit), kwargs={"poll_s": 0.01})
    tail.start()
    try:
        assert ready.wait(TIMEOUT_S)
        _append(events_file, b'{"kind": "xid", "gpuUUID": "GPU-x"')
        _append(events_file, b', "xid": 13}\n')
        wait_until(lambda: len(lines) >= 2, timeout_s=TIMEOUT_S, what="the pieced line")
        with open(events_file, "wb"):
            pass  # truncated: what follows is read from the start
        _append(events_file, b'{"kind": "gpu-lost"}\n')
        wait_until(lambda: len(lines) >= 3, timeout_s=TIMEOUT_S, what="the line after truncation")
    finally:
        stop.set()
        tail.join()
    decoded = [_health_lines.decode_line(line) for line in lines[1:]]
    assert decoded == [
        health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid="GPU-x", xid=13),
        health.HealthEvent(kind=health.HealthEventKind.GPU_LOST),
    ]


def test_a_killed_child_is_one_unmonitored_then_a_restart(
    watching: tuple[nvml.NvmlHealthEvents, Recorder], events_file: str,
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    watch, recorder = watching
    first = watch.child_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    recorder.wait_for(UNMONITORED_NODE)
    _wait_logged(caplog_info, "event=gpu_health_watch_exited", "rc=-9")
    assert watch.wait_ready(TIMEOUT_S, times=2), "the watch was not restarted"
    assert watch.child_pid not in (None, first)
    nvml.raise_simulated_event(events_file, XID_79)
    recorder.wait_for(XID_79)
    assert recorder.events == [UNMONITORED_NODE, XID_79]


def test_stop_leaves_no_child_and_is_idempotent(
    watching: tuple[nvml.NvmlHealthEvents, Recorder],
) -> None:
    watch, recorder = watching
    pid = watch.child_pid
    assert pid is not None and not _gone(pid)
    watch.stop()
    assert _gone(pid)
    assert watch.child_pid is None
    watch.stop()
    assert recorder.events == []  # stopping is not a failure: nothing reported


def test_the_watch_ends_with_a_parent_that_was_killed(events_file: str) -> None:
    """The watch runs in its own session; its stdin pipe is what ties it to the plugin."""
    parent = _python(
        "import subprocess, sys\n"
        "child = subprocess.Popen([*sys.argv[1:]], stdin=subprocess.PIPE,\n"
        "    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)\n"
        "print(child.pid, child.stdout.readline().strip(), flush=True)\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    command = [*health_events.default_watch_command(), f"--simulated-events={events_file}"]
    ran = subprocess.run([*parent, *command], capture_output=True, text=True, check=False,
                         timeout=TIMEOUT_S, env=real.child_env(driver_root="/"))
    assert ran.returncode == -signal.SIGKILL, ran.stderr
    pid, ready = ran.stdout.split(maxsplit=1)
    assert '"ready": true' in ready
    wait_until(lambda: _gone_or_zombie(int(pid)), timeout_s=TIMEOUT_S,
               what="the orphaned watch to exit")


def test_stop_kills_a_child_that_ignores_sigterm(caplog_info: pytest.LogCaptureFixture) -> None:
    stubborn = _python(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('{\"ready\": true, \"monitored\": []}', flush=True)\n"
        "time.sleep(120)\n"
    )
    watch = nvml.NvmlHealthEvents(command=stubborn, terminate_timeout_s=0.5)
    recorder = Recorder()
    watch.start(recorder)
    try:
        assert watch.wait_ready(TIMEOUT_S)
        pid = watch.child_pid
        assert pid is not None
    finally:
        watch.stop()
    assert _gone(pid)
    assert _logged(caplog_info, "event=gpu_health_watch_killed", f"pid={pid}")
    assert recorder.events == []


def test_a_missing_module_is_unmonitored_once_however_often_retried(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    sleep = RecordingSleep()
    watch = nvml.NvmlHealthEvents(
        command=[sys.executable, "-m", "adapters.nvml.no_such_watch"], sleep=sleep)
    recorder = Recorder()
    watch.start(recorder)
    try:
        _wait_logged(caplog_info, "event=gpu_health_watch_exited", "rc=1", "No module named",
                     count=3)
    finally:
        watch.stop()
    assert recorder.events == [UNMONITORED_NODE]
    assert sleep.delays[:3] == [0.5, 1.0, 2.0]


def test_a_program_that_cannot_start_is_unmonitored_and_logged(
    caplog_info: pytest.LogCaptureFixture, tmp_path: os.PathLike[str],
) -> None:
    missing = os.path.join(os.fspath(tmp_path), "no-such-health-watch")
    watch = nvml.NvmlHealthEvents(command=[missing], sleep=RecordingSleep())
    recorder = Recorder()
    watch.start(recorder)
    try:
        recorder.wait_for(UNMONITORED_NODE)
        _wait_logged(caplog_info, "event=gpu_health_watch_start_failed", missing, count=2)
    finally:
        watch.stop()
    assert recorder.events == [UNMONITORED_NODE]


@pytest.mark.skipif(HAS_NVML, reason="this host has libnvidia-ml")
def test_the_real_watch_without_nvml_is_unmonitored(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    watch = nvml.NvmlHealthEvents(sleep=RecordingSleep())
    recorder = Recorder()
    watch.start(recorder)
    try:
        recorder.wait_for(UNMONITORED_NODE)
        _wait_logged(caplog_info, "event=gpu_health_watch_exited", "rc=1", "nvml_init_failed")
    finally:
        watch.stop()


def test_one_stray_line_is_skipped_but_garbage_restarts_the_child(
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    chatty = _python(
        "import sys, time\n"
        "print('{\"ready\": true, \"monitored\": []}', flush=True)\n"
        "print('a stray print', flush=True)\n"
        "print('{\"kind\": \"xid\", \"gpuUUID\": \"" + GPU_A + "\", \"xid\": 79}', flush=True)\n"
        "print('garbage', flush=True)\n"
        "print('more garbage', flush=True)\n"
        "time.sleep(120)\n"
    )
    watch = nvml.NvmlHealthEvents(command=chatty, sleep=RecordingSleep())
    recorder = Recorder()
    watch.start(recorder)
    try:
        recorder.wait_for(UNMONITORED_NODE)
        _wait_logged(caplog_info, "event=gpu_health_watch_bad_output", "action=restart")
        assert watch.wait_ready(TIMEOUT_S, times=2), "the watch was not restarted"
        recorder.wait_for(XID_79, count=2)
    finally:
        watch.stop()
    # The XID after the stray line arrived; the garbage pair ended the child (UNMONITORED
    # once: the restarted child said it was ready, so a second failure would report again).
    assert recorder.events[:2] == [XID_79, UNMONITORED_NODE]


def test_a_failing_consumer_does_not_end_the_watch(events_file: str) -> None:
    seen: list[health.HealthEvent] = []
    arrived = threading.Event()

    def flaky(event: health.HealthEvent) -> None:
        seen.append(event)
        if len(seen) == 1:
            raise RuntimeError("consumer failed")
        arrived.set()

    watch = nvml.simulated_health_events(events_file, [GPU_A])
    watch.start(flaky)
    try:
        assert watch.wait_ready(TIMEOUT_S)
        nvml.raise_simulated_event(events_file, XID_79)
        nvml.raise_simulated_event(events_file, UNMONITORED_NODE)
        assert arrived.wait(TIMEOUT_S)
    finally:
        watch.stop()
    assert seen == [XID_79, UNMONITORED_NODE]


def test_start_is_once(watching: tuple[nvml.NvmlHealthEvents, Recorder]) -> None:
    watch, recorder = watching
    with pytest.raises(RuntimeError, match="watches once"):
        watch.start(recorder)


def test_stop_before_start_does_nothing() -> None:
    watch = health_events.NvmlHealthEvents(command=_python("pass"))
    watch.stop()
    assert watch.child_pid is None
