"""The clique is read again every interval, and `nvidia.com/gpu.clique` follows it (upstream).

Upstream's ComputeDomain plugin re-reads the clique every 10 minutes (a new one replaces the
known one; none found keeps it) and, with chart value `gpuCliqueLabelEnabled`, labels its Node
at start and after each re-read and removes the label at stop. The tests drive the loop with a
scripted wait (no sleeps) against the embedded cluster's Node and a real plugin driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
from pluginapp_env import node

from apps.cli import embedded
from apps.kubeletplugin import clique_refresh
from apps.kubeletplugin import settings as plugin_settings
from core import kinds, names
from core.computedomain import cliques

CLIQUE_A = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.1"
CLIQUE_B = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.2"


@pytest.fixture
def h100() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", profile="h100", node_limit=1) as env:
        yield env


def _label(env: embedded.Embedded) -> str | None:
    obj = env.cluster.get(kinds.NODE.kind, namespace="", name=node(env).name)
    return (obj["metadata"].get("labels") or {}).get(names.GPU_CLIQUE_LABEL)


def _scripted(ticks: int, waited: list[float]) -> Callable[[float], bool]:
    """A wait that lets `ticks` intervals pass, then says the plugin is stopping."""

    def wait(seconds: float) -> bool:
        waited.append(seconds)
        return len(waited) > ticks

    return wait


def _refresh(
    env: embedded.Embedded, probe: Callable[[], str], *, label: bool
) -> clique_refresh.CliqueRefresh:
    return clique_refresh.CliqueRefresh(
        driver=node(env).plugin.driver, cluster=env.cluster, probe_clique=probe,
        label_enabled=label,
    )


def test_the_clique_is_read_again_every_ten_minutes_and_a_new_one_replaces_it(
    h100: embedded.Embedded,
) -> None:
    seen = iter(["", CLIQUE_A, CLIQUE_B])
    waited: list[float] = []
    refresh = _refresh(h100, lambda: next(seen), label=False)

    refresh.run(_scripted(3, waited))

    assert waited == [600.0] * 4 and refresh.rounds == 3
    assert node(h100).plugin.driver.node.clique_id == CLIQUE_B
    assert _label(h100) is None  # label disabled: the Node is not touched


def test_a_reread_that_finds_no_clique_or_fails_keeps_the_known_one(
    h100: embedded.Embedded,
) -> None:
    answers: list[Callable[[], str]] = [
        lambda: CLIQUE_A, lambda: "", lambda: (_ for _ in ()).throw(RuntimeError("NVML gone")),
    ]
    refresh = _refresh(h100, lambda: answers.pop(0)(), label=True)

    for _ in range(3):
        refresh.refresh_once()

    assert node(h100).plugin.driver.node.clique_id == CLIQUE_A
    assert _label(h100) == CLIQUE_A


def test_the_label_is_set_at_start_follows_the_clique_and_goes_at_stop(
    h100: embedded.Embedded,
) -> None:
    seen = iter([CLIQUE_B])
    driver = node(h100).plugin.driver
    driver.set_node(dataclasses.replace(driver.node, clique_id=CLIQUE_A))
    waited: list[float] = []
    refresh = _refresh(h100, lambda: next(seen), label=True)

    refresh.run(_scripted(0, waited))
    assert _label(h100) == CLIQUE_A and refresh.rounds == 0  # labelled before any tick

    refresh.refresh_once()
    assert _label(h100) == CLIQUE_B

    refresh.stop()
    assert _label(h100) is None


def test_a_node_without_a_clique_gets_no_label(h100: embedded.Embedded) -> None:
    refresh = _refresh(h100, lambda: "", label=True)

    refresh.run(_scripted(2, []))

    assert _label(h100) is None


def test_the_plugins_stop_removes_the_label(h100: embedded.Embedded) -> None:
    refresh = _refresh(h100, lambda: CLIQUE_A, label=True)
    refresh.refresh_once()
    plugin = node(h100).plugin
    plugin.on_stop.append(refresh.stop)
    assert _label(h100) == CLIQUE_A

    plugin.stop(grace_s=0)

    assert _label(h100) is None


def test_settings_default_to_upstream_and_follow_the_charts_env() -> None:
    base = {"NODE_NAME": "n1"}
    default = plugin_settings.parse([], base)
    assert default.gpu_clique_label_enabled is False
    assert default.clique_refresh_interval_s == cliques.CLIQUE_REFRESH_INTERVAL_S == 600.0
    chart = plugin_settings.parse(
        [], {**base, "GPU_CLIQUE_LABEL_ENABLED": "true", "CLIQUE_REFRESH_INTERVAL_SECONDS": "60"}
    )
    assert chart.gpu_clique_label_enabled is True and chart.clique_refresh_interval_s == 60.0
