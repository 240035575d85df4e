"""An answer always has its CDI file: half-done unprepares, lost spec files, kill leftovers.

A kill between an unprepare's two durable steps must never leave a PrepareCompleted entry
without its spec file (a later prepare would answer CDI ids that resolve to nothing); a spec
file lost behind the plugin's back is written again from the entry; the temp files that
kills leave beside the checkpoint and in the CDI root are removed at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare, restart

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import models, names
from core.computedomain import checkpoint_records as cd_records


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


class KilledAtCheckpointWrite(fs_checkpoints.FileCheckpointStore):
    """The file store, as if the process died at its next write (nothing written)."""

    def write(self, data: bytes) -> None:
        raise SystemExit("killed")

    def append(self, records: bytes, *, sync: bool = True) -> None:
        raise SystemExit("killed")


def _cdi(env: embedded.Embedded) -> fs_cdi.CDIDirectory:
    return fs_cdi.CDIDirectory(node(env).settings.cdi_root)


def _entries(env: embedded.Embedded) -> Mapping[names.ClaimUID, models.CheckpointEntry]:
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    return current.entries


def test_a_kill_during_unprepare_never_leaves_a_completed_entry_without_its_file(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    settings = node(env).settings
    dying = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=KilledAtCheckpointWrite(settings.checkpoint_path),
            cdi=_cdi(env),
        ),
        node=node(env).plugin.node,
        config=env.config,
    )
    with pytest.raises(SystemExit):
        dying.node_unprepare((ref,))
    entry = _entries(env).get(ref.uid)
    if entry is not None and entry.state is models.ClaimState.PREPARE_COMPLETED:
        assert ref.uid in _cdi(env).claim_uids(), "completed entry left without its CDI file"


def test_unprepare_drops_the_entry_before_deleting_the_file(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    seen: list[tuple[bool, bool]] = []

    class Watching(fs_cdi.CDIDirectory):
        def delete(self, claim_uid: names.ClaimUID) -> None:
            seen.append((claim_uid in _entries(env), claim_uid in self.claim_uids()))
            super().delete(claim_uid)

    settings = node(env).settings
    driver = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=Watching(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
    )
    assert not driver.node_unprepare((ref,))[ref.uid].error
    assert seen == [(False, True)], "the file went before the entry"


def test_a_completed_claim_whose_cdi_file_was_lost_gets_it_back_on_prepare(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    first = prepare(env, ref)
    assert not first.error
    path = _cdi(env).spec_path(ref.uid)
    with open(path, "rb") as f:
        written = f.read()
    os.unlink(path)
    again = prepare(env, ref)
    assert again == first
    with open(path, "rb") as f:
        assert f.read() == written


def test_a_completed_claim_whose_cdi_file_is_garbage_gets_it_rewritten(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    path = _cdi(env).spec_path(ref.uid)
    with open(path, "rb") as f:
        written = f.read()
    with open(path, "wb") as f:
        f.write(b"{torn")
    assert not prepare(env, ref).error
    with open(path, "rb") as f:
        assert f.read() == written


def test_temp_files_left_by_a_kill_are_removed_at_start_up(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    settings = node(env).settings
    plugin_dir = os.path.dirname(settings.checkpoint_path)
    leftovers = [
        os.path.join(plugin_dir, f".{os.path.basename(settings.checkpoint_path)}.abc123.tmp"),
        os.path.join(settings.cdi_root, f".{names.cdi_spec_file_name(ref.uid)}.xyz.tmp"),
    ]
    foreign = os.path.join(settings.cdi_root, ".someone-elses.tmp")
    for path in (*leftovers, foreign):
        with open(path, "wb") as f:
            f.write(b"half")
    restart(env)
    assert [p for p in leftovers if os.path.exists(p)] == []
    assert os.path.exists(foreign), "only our own temp files are removed"
    assert ref.uid in _cdi(env).claim_uids()
