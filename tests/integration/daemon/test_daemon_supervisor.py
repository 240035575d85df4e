"""The nvidia-imex supervisor on real child processes: restart backoff, reload, stop.

Covers: a child that keeps dying is restarted with exponentially growing, capped delays (read
from the supervisor's log lines, not timed); SIGUSR1 reaches the running child and is refused
when none runs; stop terminates the child and ends restarts.
"""

from __future__ import annotations

import logging
import pathlib
import re

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
