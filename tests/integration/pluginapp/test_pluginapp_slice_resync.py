"""ResourceSlices are published once the kubelet registers the plugin, and kept published.

The kubelet wipes a node's slices when it starts and after a plugin deregisters; the plugin
republishes on every registration and periodically.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from pluginapp_env import node

from apps.cli import embedded
from apps.pluginkit import serving
from core import errors, kinds, names


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def _node_slices(env: embedded.Embedded) -> list[str]:
    return [
        s["metadata"]["name"]
        for s in env.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"]["nodeName"] == node(env).name and s["spec"]["driver"] == names.DRIVER_NAME
    ]


def _wipe(env: embedded.Embedded) -> None:
    for name in _node_slices(env):
        env.cluster.delete(kinds.RESOURCE_SLICE.kind, namespace="", name=name)


def _eventually(predicate: object, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_slices_are_published_again_when_the_kubelet_registers_the_plugin_again(
    env: embedded.Embedded,
) -> None:
    assert _node_slices(env)
    _wipe(env)  # what a restarting kubelet does
    current = node(env)
    current.kubelet.forget(names.DRIVER_NAME)
    current.kubelet.wait_for_plugin(names.DRIVER_NAME, timeout_s=10)
    _eventually(lambda: _node_slices(env), "the slices to be republished after registration")


def test_the_slices_are_owned_by_the_node_and_the_garbage_collector_deletes_them_with_it(
    env: embedded.Embedded,
) -> None:
    """A deleted Node's slices stayed forever when they had no owner (seen on a real cluster)."""
    here = node(env).name
    node_uid = env.cluster.get(kinds.NODE.kind, namespace="", name=here)["metadata"]["uid"]
    published = [
        s for s in env.cluster.list(kinds.RESOURCE_SLICE.kind).items
        if s["spec"]["nodeName"] == here
    ]
    assert published
    assert all(s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": here, "uid": node_uid, "controller": True}
    ] for s in published)
    env.cluster.delete(kinds.NODE.kind, namespace="", name=here)
    assert _node_slices(env) == []


def test_resync_waits_for_registration_then_republishes_periodically() -> None:
    published: list[float] = []
    stopping = threading.Event()
    resync = serving.SliceResync(
        lambda: published.append(time.monotonic()), node_name="n", period_s=0.1
    )
    resync.start(stopping)
    try:
        assert resync.waiting_for_registration.wait(5), "the loop never started waiting"
        assert published == [], "nothing may be published before the kubelet registered us"
        resync.registered()
        _eventually(lambda: len(published) >= 3, "periodic republishing")
    finally:
        stopping.set()


def test_resync_keeps_trying_after_a_failed_publish() -> None:
    calls: list[int] = []

    def publish() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise errors.ClusterError("the API server is down")

    stopping = threading.Event()
    resync = serving.SliceResync(publish, node_name="n", period_s=60, retry_s=0.05)
    resync.start(stopping)
    try:
        resync.registered()
        assert resync.published.wait(5)
        assert len(calls) == 2
    finally:
        stopping.set()
