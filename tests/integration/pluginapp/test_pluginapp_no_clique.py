"""A host-managed node without an NVLink clique offers no channel, and says so once.

Seen on a real H100 host: the node advertised `channel-0`, every prepare there failed
permanently, and the scheduler kept placing ComputeDomain pods on it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare

from apps.cli import embedded
from apps.kubeletplugin import devices as plugin_devices
from core import kinds, names


@pytest.fixture
def h100() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", profile="h100", node_limit=1) as env:
        yield env


def _published(env: embedded.Embedded) -> list[str]:
    return [
        d["name"]
        for s in env.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"]["nodeName"] == node(env).name and s["spec"]["driver"] == names.DRIVER_NAME
        for d in s["spec"]["devices"]
    ]


def _events(env: embedded.Embedded, reason: str) -> list[str]:
    return [
        e["message"] for e in env.cluster.list(kinds.EVENT.kind, namespace="default").items
        if e["reason"] == reason
    ]


def test_a_node_without_a_clique_publishes_no_channel_and_emits_one_node_event(
    h100: embedded.Embedded,
) -> None:
    assert node(h100).plugin.node.clique_id == ""
    assert _published(h100) == []
    node(h100).plugin.slices.published.clear()
    node(h100).plugin.slices.registered()  # a re-registration publishes again
    assert node(h100).plugin.slices.published.wait(10)
    (message,) = _events(h100, "NoNVLinkClique")
    assert "publishes no IMEX channel device" in message


def test_the_channel_is_published_and_prepared_once_a_clique_appears(
    h100: embedded.Embedded,
) -> None:
    clique = ""
    offered = plugin_devices.NodeDevices(
        driver=node(h100).plugin.driver, config=h100.config, cluster=h100.cluster,
        probe_clique=lambda: clique,
    )
    assert offered.current() == ()
    ref = create_claim(h100, "a", domain_id=create_domain(h100))
    assert "no NVLink clique" in prepare(h100, ref).error

    clique = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.1"
    assert [d["name"] for d in offered.current()] == ["channel-0"]
    assert node(h100).plugin.driver.node.clique_id == clique
    assert _events(h100, "NVLinkCliqueFound")
    assert not prepare(h100, ref).error


def test_a_failing_clique_probe_keeps_publishing_nothing(h100: embedded.Embedded) -> None:
    def broken() -> str:
        raise RuntimeError("NVML probe crashed")

    offered = plugin_devices.NodeDevices(
        driver=node(h100).plugin.driver, config=h100.config, cluster=h100.cluster,
        probe_clique=broken,
    )
    assert offered.current() == ()
