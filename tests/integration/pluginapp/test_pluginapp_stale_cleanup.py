"""Checkpoint entries of claims that are gone are cleaned, and never while the API is unreadable.

A `PrepareCompleted` entry whose claim was deleted while the plugin was down, or a
`PrepareStarted` one left by a crash, holds channel 0 for nobody and blocks every other
ComputeDomain on the node. The clean-up asks the API server about each entry's claim and drops
those that are deleted, recreated under another UID or deallocated, with their CDI files.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pluginapp_env import NAMESPACE, create_claim, create_domain, node, prepare

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit import serving
from core import checkpoint as checkpoint_codec
from core import errors, kinds, models, names
from core.computedomain import checkpoint_records as cd_records


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


class UnreadableCluster:
    """The embedded cluster, whose reads fail as if the API server were down."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        raise errors.ClusterError("connection refused (test outage)")

    def list(self, kind: str, **kwargs: Any) -> Any:
        raise errors.ClusterError("connection refused (test outage)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _driver(
    env: embedded.Embedded, *, cluster: Any = None, metrics: Any = None
) -> plugin_driver.PluginDriver:
    settings = node(env).settings
    return plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=cluster or env.cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
        metrics=metrics,
        retry_budget_s=0.2,
    )


def _entries(env: embedded.Embedded) -> Mapping[names.ClaimUID, models.CheckpointEntry]:
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    return current.entries


def _cdi_files(env: embedded.Embedded) -> frozenset[names.ClaimUID]:
    return fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids()


def _events(env: embedded.Embedded) -> list[str]:
    return [
        e["message"] for e in env.cluster.list(kinds.EVENT.kind, namespace="default").items
        if e["reason"] == "StaleClaimCleaned"
    ]


def _delete_claim(env: embedded.Embedded, name: str) -> None:
    env.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name)


def test_a_completed_entry_of_a_deleted_claim_is_cleaned_and_frees_the_channel(
    env: embedded.Embedded,
) -> None:
    gone = create_claim(env, "gone", domain_id=create_domain(env))
    assert not prepare(env, gone).error
    _delete_claim(env, "gone")  # while the plugin was down: nobody unprepared it
    other = create_claim(env, "other", domain_id=create_domain(env, "other-cd"))
    assert "held by" in prepare(env, other).error
    metrics = plugin_metrics.PluginMetrics(node_name="n")

    removed = _driver(env, metrics=metrics).clean_stale_claims()

    assert [r.entry.claim_uid for r in removed] == [gone.uid]
    assert gone.uid not in _entries(env)
    assert gone.uid not in _cdi_files(env)
    (message,) = _events(env)
    assert f"team/gone ({gone.uid})" in message and "no longer exists" in message
    assert b'reason="DELETED",state="PrepareCompleted"' in metrics.exposition()
    assert not prepare(env, other).error


def test_a_started_entry_left_by_a_crash_is_cleaned_when_its_claim_is_gone(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    path = node(env).settings.checkpoint_path
    current = fs_checkpoints.read_checkpoint(path, cd_records.CODEC)
    assert current is not None
    started = dataclasses.replace(
        current.entries[ref.uid], state=models.ClaimState.PREPARE_STARTED, devices=()
    )
    store = fs_checkpoints.FileCheckpointStore(path)
    with store.locked():
        store.write(checkpoint_codec.encode(
            dataclasses.replace(current, entries={ref.uid: started})
        ))
        store.truncate_journal(0)
    _delete_claim(env, "a")
    assert [r.entry.state for r in _driver(env).clean_stale_claims()] == [
        models.ClaimState.PREPARE_STARTED
    ]
    assert ref.uid not in _entries(env)
    assert ref.uid not in _cdi_files(env)


def test_a_claim_recreated_under_the_same_name_leaves_the_old_entry_stale(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    old = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, old).error
    _delete_claim(env, "a")
    env.cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name="a-pod")
    new = create_claim(env, "a", domain_id=domain)
    (removed,) = _driver(env).clean_stale_claims()
    assert removed.reason is checkpoint_codec.StaleReason.RECREATED
    assert old.uid not in _entries(env)
    assert new.uid != old.uid


def test_a_deallocated_claim_is_cleaned(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    env.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="a", subresource="status",
        patch={"status": {"allocation": None, "reservedFor": None}},
    )
    (removed,) = _driver(env).clean_stale_claims()
    assert removed.reason is checkpoint_codec.StaleReason.DEALLOCATED
    assert ref.uid not in _cdi_files(env)


def test_a_claim_still_allocated_is_kept(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    assert _driver(env).clean_stale_claims() == ()
    assert ref.uid in _entries(env)
    assert ref.uid in _cdi_files(env)


def test_an_entry_rebuilt_from_a_cdi_file_is_matched_by_uid(env: embedded.Embedded) -> None:
    domain = create_domain(env)
    kept = create_claim(env, "kept", domain_id=domain)
    gone = create_claim(env, "gone", domain_id=domain)
    assert not prepare(env, kept).error
    assert not prepare(env, gone).error
    with open(node(env).settings.checkpoint_path, "r+b") as f:
        f.seek(20)
        f.write(b"#")  # corrupt: the restart rebuilds nameless entries from the CDI files
    driver = _driver(env)
    driver.recover()
    assert {e.name for e in _entries(env).values()} == {""}
    _delete_claim(env, "gone")
    assert [r.entry.claim_uid for r in driver.clean_stale_claims()] == [gone.uid]
    assert set(_entries(env)) == {kept.uid}


def test_nothing_is_cleaned_while_the_api_server_cannot_be_read(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    _delete_claim(env, "a")
    metrics = plugin_metrics.PluginMetrics(node_name="n")
    driver = _driver(env, cluster=UnreadableCluster(env.cluster), metrics=metrics)
    assert driver.clean_stale_claims() == ()
    assert ref.uid in _entries(env)
    assert ref.uid in _cdi_files(env)
    assert b"nvidia_dra_stale_claim_cleanup_skipped_total{" in metrics.exposition()


def test_an_entry_changed_while_the_api_was_asked_is_kept_for_the_next_round(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    seen = current.entries[ref.uid]
    newer = dataclasses.replace(seen, updated_at=seen.updated_at + 1)
    stale = checkpoint_codec.StaleEntry(entry=seen, reason=checkpoint_codec.StaleReason.DELETED)
    changed = dataclasses.replace(current, entries={ref.uid: newer})
    assert checkpoint_codec.plan_stale_cleanup(changed, stale=[stale]).steps == ()


def test_the_clean_up_loop_runs_at_start_and_then_every_interval() -> None:
    calls: list[int] = []
    loop = serving.StaleClaimCleanup(lambda: calls.append(1), node_name="n", interval_s=0.05)

    stopping = threading.Event()
    loop.start(stopping)
    try:
        assert loop.round_done.wait(5), "no clean-up at start"
        for _ in range(2):
            loop.round_done.clear()
            assert loop.round_done.wait(5), "no periodic clean-up"
    finally:
        stopping.set()
    assert len(calls) >= 3


def test_a_failing_round_does_not_stop_the_loop() -> None:

    def boom() -> None:
        raise OSError(5, "Input/output error")

    loop = serving.StaleClaimCleanup(boom, node_name="n", interval_s=0.01)
    stopping = threading.Event()
    loop.start(stopping)
    try:
        assert loop.round_done.wait(5)
        loop.round_done.clear()
        assert loop.round_done.wait(5)
    finally:
        stopping.set()
