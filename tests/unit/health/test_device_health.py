"""The health list planned for the kubelet's stream (`core.device_health`), and the plugin's
record of what it published (`apps.pluginkit.device_health`)."""

from __future__ import annotations

import pytest

from apps.pluginkit import device_health as plugin_device_health
from core import device_health, ports

H = device_health.HealthStatus
NOW = 1_700_000_000


def _plan(published: tuple[str, ...],
          observed: dict[str, device_health.Observation] | None) -> list[tuple[str, H, str]]:
    return [(e.device, e.status, e.message) for e in device_health.plan_device_health(
        pool="node-a", published=published, observed=observed, now_s=NOW)]


@pytest.mark.parametrize(
    ("published", "observed", "want"),
    [
        ((), None, []),
        (("gpu-1", "gpu-0", "gpu-0"), None,
         [("gpu-0", H.HEALTHY, device_health.NOT_MONITORED_MESSAGE),
          ("gpu-1", H.HEALTHY, device_health.NOT_MONITORED_MESSAGE)]),
        (("gpu-0", "gpu-1"),
         {"gpu-0": device_health.Observation(status=H.UNHEALTHY, message="XID 79"),
          "gone": device_health.Observation(status=H.UNHEALTHY)},
         [("gpu-0", H.UNHEALTHY, "XID 79"),
          ("gpu-1", H.UNKNOWN, device_health.NOT_OBSERVED_MESSAGE)]),
    ],
    ids=["nothing-published", "unmonitored-is-healthy", "monitored-unseen-is-unknown"],
)
def test_plan_device_health(
    published: tuple[str, ...],
    observed: dict[str, device_health.Observation] | None,
    want: list[tuple[str, H, str]],
) -> None:
    assert _plan(published, observed) == want


def test_every_entry_carries_pool_time_timeout_and_a_bounded_message() -> None:
    (entry,) = device_health.plan_device_health(
        pool="node-a", published=("gpu-0",), now_s=NOW, timeout_s=90,
        observed={"gpu-0": device_health.Observation(status=H.UNHEALTHY, message="x" * 5000)},
    )
    assert (entry.pool, entry.updated_at_s, entry.timeout_s) == ("node-a", NOW, 90)
    assert len(entry.message) == device_health.MAX_MESSAGE_CHARS


def test_an_empty_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="pool name"):
        device_health.plan_device_health(pool="", published=(), observed=None, now_s=NOW)


@pytest.mark.parametrize("timeout_s", [0, -5])
def test_a_non_positive_timeout_is_refused(timeout_s: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        device_health.plan_device_health(
            pool="p", published=(), observed=None, now_s=NOW, timeout_s=timeout_s)


def test_the_plugin_reports_what_it_last_published_and_signals_changes_once() -> None:
    source: ports.DeviceHealthSource = plugin_device_health.PublishedDeviceHealth(
        pool="node-a", clock=lambda: NOW + 0.7)
    assert isinstance(source, plugin_device_health.PublishedDeviceHealth)
    changes: list[int] = []
    assert source.device_health() == ()
    source.published([{"name": "gpu-0"}])  # no listener yet: nothing to call
    source.on_change = lambda: changes.append(1)
    source.published([{"name": "gpu-1"}, {"name": "gpu-0"}])
    source.published([{"name": "gpu-0"}, {"name": "gpu-1"}])  # same set: no signal
    assert changes == [1]
    assert [(e.device, e.status, e.updated_at_s) for e in source.device_health()] == [
        ("gpu-0", H.HEALTHY, NOW), ("gpu-1", H.HEALTHY, NOW)]
