"""The daemon's fabric check (`apps.daemon.fabric.FabricMonitor`), driven with scripted reads.

Covers: a check at once and then every interval; the loop woken only on a change of judgment;
a failed read keeping the last judgment and checking on; no NVML said once, then only the
plugin's file read; the plugin's judgment (its `fabric-health.json`) preferred to NVML, a
missing file falling back to NVML, a malformed one logged once and the last judgment kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from adapters.nvml import real as nvml_real
from apps.daemon import fabric
from core import errors, models
from core.computedomain import fabric_health

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


PluginAnswer = fabric_health.FabricHealth | None | Exception


def _monitor(read: Read, woken: list[str],
             plugin: list[PluginAnswer] | None = None) -> fabric.FabricMonitor:
    def read_plugin() -> fabric_health.FabricHealth | None:
        answer = plugin.pop(0) if plugin else None
        if isinstance(answer, Exception):
            raise answer
        return answer

    return fabric.FabricMonitor(read=read, node_name="n1", on_change=lambda: woken.append("x"),
                                interval_s=7.0, read_plugin=read_plugin)


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
    monitor.check_once()
    assert not monitor.health().healthy

    monitor.check_once()  # a probe that failed once is tried again (the script is used up)

    assert not monitor.health().healthy and woken == ["x"]
    assert "event=fabric_check_failed node=n1 error='probe crashed' action=keeping_last " \
           "healthy=False" in caplog.text


def test_without_nvml_it_says_so_once_and_then_reads_only_the_plugins_file(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken: list[str] = []
    monitor = _monitor(_script(nvml_real.NvmlUnavailable("no libnvidia-ml")), woken,
                       plugin=[None, None, None, fabric_health.judge(FORMING)])
    rounds: list[bool] = []

    def wait(seconds: float) -> bool:
        rounds.append(monitor.health().healthy)
        return len(rounds) == 4

    monitor.run(wait)  # NVML read once only: the script holds one answer

    assert rounds == [True, True, True, False] and woken == ["x"]
    assert caplog.text.count("event=fabric_check_unavailable node=n1") == 1


def test_the_plugins_judgment_is_preferred_to_nvml_and_nvml_is_the_fallback_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken: list[str] = []
    nvml_reads: list[str] = []

    def read() -> Sequence[models.FabricRecord]:
        nvml_reads.append("read")
        return HEALTHY

    monitor = _monitor(read, woken, plugin=[fabric_health.judge(FORMING), None,
                                            fabric_health.judge(HEALTHY)])
    monitor.check_once()
    assert not monitor.health().healthy and nvml_reads == []
    assert "event=fabric_degraded node=n1 reason=InProgress" in caplog.text
    assert "source=plugin" in caplog.text

    monitor.check_once()  # the file went away: NVML's judgment
    assert monitor.health().healthy and nvml_reads == ["read"]

    monitor.check_once()
    assert monitor.health().healthy and nvml_reads == ["read"] and woken == ["x", "x"]


def test_a_missing_file_without_nvml_is_no_judgment_never_not_ready() -> None:
    woken: list[str] = []
    monitor = _monitor(_script(nvml_real.NvmlUnavailable("no libnvidia-ml")), woken,
                       plugin=[fabric_health.judge(FORMING), None])
    monitor.check_once()
    assert not monitor.health().healthy

    monitor.check_once()  # no file, and NVML cannot be loaded: nothing known

    assert monitor.health() == fabric_health.NOT_JUDGED and woken == ["x", "x"]


def test_a_malformed_file_is_logged_once_and_the_last_judgment_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken: list[str] = []
    garbage = errors.DecodeError("fabric-health.json is not JSON")
    monitor = _monitor(_script(), woken, plugin=[
        fabric_health.judge(FORMING), garbage, garbage, OSError("EACCES"),
        fabric_health.judge(HEALTHY), garbage])
    monitor.check_once()
    for _ in range(3):
        monitor.check_once()
        assert not monitor.health().healthy, "kept, and NVML not read (the script is empty)"
    assert caplog.text.count("event=fabric_file_unreadable") == 1
    assert "action=keeping_last healthy=False" in caplog.text

    monitor.check_once()
    monitor.check_once()  # garbage again after a good file: said again

    assert monitor.health().healthy and woken == ["x", "x"]
    assert caplog.text.count("event=fabric_file_unreadable") == 2
