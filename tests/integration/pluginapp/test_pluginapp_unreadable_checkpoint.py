"""A checkpoint the plugin cannot read (PermissionError, as a non-root plugin sees a root-owned
file) is handled like a corrupt one; where nothing can be written, prepares stop, unprepares work.

Running as root here, a real permission error cannot be produced by chmod; the store below
raises what the kernel would for a non-root plugin, on the real files. The process tests in
`tests/integration/apps/test_apps_plugin_process.py` cover a directory in place of the file and
an immutable (chattr +i) path for real.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import kinds, models


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


class NoPermission(fs_checkpoints.FileCheckpointStore):
    """Reads (and, with `writable=False`, moves and writes) fail with EACCES."""

    def __init__(self, path: str, *, writable: bool) -> None:
        super().__init__(path)
        self.writable = writable
        self.readable = False

    def _denied(self) -> PermissionError:
        return PermissionError(errno.EACCES, "Permission denied", self.path)

    def read(self) -> bytes | None:
        if not self.readable:
            raise self._denied()
        return super().read()

    def quarantine(self, *, suffix: str) -> str:
        if not self.writable:
            raise self._denied()
        moved = super().quarantine(suffix=suffix)
        self.readable = True  # the unreadable file is gone; the new one is ours
        return moved

    def write(self, data: bytes) -> None:
        if not self.writable:
            raise self._denied()
        super().write(data)

    def append(self, records: bytes, *, sync: bool = True) -> None:
        if not self.writable:
            raise self._denied()
        super().append(records, sync=sync)


def _driver(env: embedded.Embedded, store: NoPermission) -> plugin_driver.PluginDriver:
    return plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=store,
            cdi=fs_cdi.CDIDirectory(node(env).settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
        retry_budget_s=0.2,
    )


def _events(env: embedded.Embedded, reason: str) -> list[str]:
    return [
        e["message"] for e in env.cluster.list(kinds.EVENT.kind, namespace="default").items
        if e["reason"] == reason
    ]


def _cdi(env: embedded.Embedded) -> frozenset[str]:
    return fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids()


def test_an_unreadable_checkpoint_is_moved_aside_and_rebuilt_from_cdi_files(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    held = create_claim(env, "held", domain_id=domain)
    assert not node(env).kubelet.prepare("compute-domain.nvidia.com", (held,))[held.uid].error
    store = NoPermission(node(env).settings.checkpoint_path, writable=True)
    driver = _driver(env, store)

    recovered = driver.recover()

    assert held.uid in recovered.entries
    (message,) = _events(env, "CheckpointUnreadable")
    assert "Permission denied" in message and "moved to" in message
    fresh = create_claim(env, "fresh", domain_id=domain)
    assert not driver.node_prepare((fresh,))[fresh.uid].error


def test_with_nothing_writable_prepares_are_refused_and_unprepares_still_work(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    held = create_claim(env, "held", domain_id=domain)
    assert not node(env).kubelet.prepare("compute-domain.nvidia.com", (held,))[held.uid].error
    driver = _driver(env, NoPermission(node(env).settings.checkpoint_path, writable=False))

    recovered = driver.recover()  # must not raise: the plugin stays up

    assert held.uid in recovered.entries
    fresh = create_claim(env, "fresh", domain_id=domain)
    refused = driver.node_prepare((fresh,))[fresh.uid].error
    assert "cannot be written" in refused and "serves no prepares" in refused
    assert "restart the plugin pod" in refused
    assert fresh.uid not in _cdi(env)
    assert driver.node_unprepare((held,))[held.uid] == models.ClaimResult()
    assert held.uid not in _cdi(env)
    again = driver.node_prepare((fresh,))[fresh.uid].error
    assert "serves no prepares" in again
    assert len(_events(env, "CheckpointUnwritable")) == 1, "one Node Event, not one per call"
