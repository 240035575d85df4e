"""The daemon's fabric check (`apps.daemon.fabric.FabricMonitor`), driven with scripted reads.

Covers: a check at once and then every interval; the loop woken only on a change of judgment;
a failed read keeping the last judgment and checking on; no NVML stopping the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from adapters.nvml import real as nvml_real
from apps.daemon import fabric
from core import models

S = models.FabricState
HEALTHY = [models.FabricRecord(gpu_uuid="GPU-0", state=S.COMPLETED, cluster_uuid=b"\x01" * 16)]
FORMING = [models.FabricRecord(gpu_uuid="GPU-0", state=S.IN_PROGRESS, cluster_uuid=b"\x01" * 16)]

Read = Callable[[], Sequence[models.FabricRecord]]


def _script(*answers: Sequence[models.FabricRecord] | Exception) -> Read:
    pending = list(answers)

    def read() -> Sequence[models.FabricRecord]:
        answer = pending.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return read


def _monitor(read: Read, woken: list[str]) -> fabric.FabricMonitor:
    return fabric.FabricMonitor(read=read, node_name="n1", on_change=lambda: woken.append("x"),
                                interval_s=7.0)


def test_it_checks_at_once_then_every_interval_and_wakes_the_loop_on_changes_only() -> None:
    woken: list[str] = []
    monitor = _monitor(_script(HEALTHY, FORMING, FORMING, HEALTHY), woken)
    waited: list[float] = []
    degraded_seen: list[bool] = []

    def wait(seconds: float) -> bool:
        waited.append(seconds)
        degraded_seen.append(not monitor.health().healthy)
        return len(waited) == 4  # then the daemon stops

    monitor.run(wait)

    assert waited == [7.0] * 4 and monitor.checks == 4
    assert degraded_seen == [False, True, True, False]
    assert woken == ["x", "x"], "degraded, then recovered; an unchanged judgment wakes nothing"


def test_a_failed_read_keeps_the_last_judgment_and_checks_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken: list[str] = []
    monitor = _monitor(_script(FORMING, nvml_real.NvmlProbeFailed("probe crashed")), woken)
    assert monitor.check_once() and not monitor.health().healthy

    assert monitor.check_once(), "a probe that failed once is tried again"

    assert not monitor.health().healthy and woken == ["x"]
    assert "event=fabric_check_failed node=n1 error='probe crashed' action=keeping_last " \
           "healthy=False" in caplog.text


def test_without_nvml_the_checks_stop_and_nothing_is_judged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken: list[str] = []
    monitor = _monitor(_script(nvml_real.NvmlUnavailable("no libnvidia-ml")), woken)

    monitor.run(lambda seconds: pytest.fail("no wait: the loop ends at once"))

    assert monitor.health().healthy and woken == [] and monitor.checks == 0
    assert "event=fabric_check_unavailable node=n1" in caplog.text
