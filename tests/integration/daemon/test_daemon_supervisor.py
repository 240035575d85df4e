"""The nvidia-imex supervisor on real child processes: restart backoff, reload, stop.

Covers: a child that keeps dying is restarted with exponentially growing, capped delays (read
from the supervisor's log lines, not timed); SIGUSR1 reaches the running child and is refused
when none runs; stop terminates the child and ends restarts; stop during a restart leaves no
child running; children are spawned without preexec_fn and still die with a killed supervisor.
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import subprocess
import sys
import threading
from typing import Any

import daemon_processes as dp
import pytest

from adapters.imex import ctl as imex_ctl
from adapters.imex import supervisor as imex_supervisor


def test_a_child_that_keeps_dying_is_restarted_with_capped_exponential_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=imex_supervisor.__name__)
    sup = imex_supervisor.IMEXSupervisor(
        ["sh", "-c", "exit 3"], backoff_initial_s=0.01, backoff_max_s=0.04, stable_after_s=60
    )
    sup.start()
    dp.eventually(lambda: sup.restarts >= 4, what="four restarts", every_s=0.01)
    sup.stop()
    delays = [float(m) for m in re.findall(r"restart_in_s=([0-9.]+)", caplog.text)]
    assert delays[:4] == [0.01, 0.02, 0.04, 0.04]
    assert "exit_code=3" in caplog.text


def test_reload_signals_the_running_child_and_stop_ends_it(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "usr1"
    script = (f"trap 'echo got >> {marker}' USR1; echo up > {tmp_path}/up; "
              "while :; do sleep 1 & wait $!; done")
    sup = imex_supervisor.IMEXSupervisor(["sh", "-c", script])
    assert sup.reload() is False  # nothing runs yet
    sup.start()
    dp.eventually(lambda: (tmp_path / "up").exists(), what="child up")
    assert sup.reload() is True
    dp.eventually(lambda: marker.exists(), what="SIGUSR1 handled by the child")
    pid = sup.pid
    sup.stop()
    assert sup.pid is None and pid is not None
    assert sup.restarts == 0


def test_a_hanging_nvidia_imex_ctl_is_not_ready_with_the_reason(tmp_path: pathlib.Path) -> None:
    hanging = tmp_path / "ctl"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n", encoding="utf-8")
    hanging.chmod(0o755)
    answer = imex_ctl.IMEXCtl(command=str(hanging), config_path="/x", timeout_s=0.2).query()
    assert answer == imex_ctl.Readiness(ready=False,
                                        detail=f"{hanging} did not answer within 0.2s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) is not running.
    stat = pathlib.Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_stop_during_a_respawn_leaves_no_nvidia_imex_running(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first child exits at once; the restart is a long-lived one. stop() is called from
    # inside the restart's spawn, the window where the old supervisor read the dead child,
    # returned, and let the new one run on.
    pidfile = tmp_path / "pid"
    script = (f"if [ -e {tmp_path}/once ]; then echo $$ > {pidfile}; exec sleep 60; fi; "
              f"touch {tmp_path}/once; exit 1")
    sup = imex_supervisor.IMEXSupervisor(["sh", "-c", script], backoff_initial_s=0.01,
                                         stable_after_s=60)
    real_popen = subprocess.Popen
    spawns: list[subprocess.Popen[bytes]] = []
    stopper: list[threading.Thread] = []

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        if spawns:  # the restart: stop now, and give stop() every chance to finish first
            stopper.append(threading.Thread(target=sup.stop, kwargs={"timeout_s": 1.0}))
            stopper[0].start()
            stopper[0].join(timeout=0.5)
        child = real_popen(*args, **kwargs)
        spawns.append(child)
        return child

    monkeypatch.setattr(imex_supervisor.subprocess, "Popen", popen)
    sup.start()
    dp.eventually(lambda: bool(stopper) and not stopper[0].is_alive(), what="stop() returned")
    try:
        running = [c.pid for c in spawns if c.poll() is None]
        assert running == []
        assert sup.pid is None
    finally:
        for child in spawns:
            child.kill()
            child.wait()


def test_the_child_is_spawned_without_preexec_fn(monkeypatch: pytest.MonkeyPatch) -> None:
    # preexec_fn in a threaded process can deadlock the child between fork and exec.
    real_popen = subprocess.Popen
    seen: list[dict[str, Any]] = []

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        seen.append(kwargs)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(imex_supervisor.subprocess, "Popen", popen)
    sup = imex_supervisor.IMEXSupervisor(["sleep", "60"])
    sup.start()
    sup.stop()
    assert seen and all(kwargs.get("preexec_fn") is None for kwargs in seen)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_the_child_dies_with_a_killed_supervisor(tmp_path: pathlib.Path) -> None:
    pidfile = tmp_path / "pid"
    program = (
        "import sys, threading\n"
        "from adapters.imex import supervisor\n"
        f"sup = supervisor.IMEXSupervisor(['sh', '-c', 'echo $$ > {pidfile}; exec sleep 60'])\n"
        "sup.start()\n"
        "threading.Event().wait()\n"
    )
    root = pathlib.Path(__file__).resolve().parents[3]
    parent = subprocess.Popen([sys.executable, "-c", program], cwd=root)
    try:
        dp.eventually(lambda: pidfile.exists() and bool(pidfile.read_text().strip()),
                      what="child started")
        child_pid = int(pidfile.read_text())
        assert _alive(child_pid)
    finally:
        parent.kill()
        parent.wait()
    dp.eventually(lambda: not _alive(child_pid), what="child gone with its supervisor")
