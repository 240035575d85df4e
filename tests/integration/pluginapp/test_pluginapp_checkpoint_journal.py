"""The checkpoint as snapshot + journal on real files: upgrade, downgrade, torn tail, corruption."""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare, unprepare

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import checkpoint as checkpoint_codec
from core import kinds, models
from core.computedomain import checkpoint_records as cd_records


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def _paths(env: embedded.Embedded) -> tuple[str, str]:
    path = node(env).settings.checkpoint_path
    return path, path + fs_checkpoints.JOURNAL_SUFFIX


def _records_of(journal: str, uid: str) -> int:
    with open(journal, "rb") as f:
        return sum(1 for line in f if uid.encode() in line)


def _fresh_driver(env: embedded.Embedded) -> plugin_driver.PluginDriver:
    """A second plugin process on the same node files (what a restart after a kill sees)."""
    settings = node(env).settings
    return plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
    )


def test_a_prepare_appends_to_the_journal_instead_of_rewriting_the_snapshot(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    assert not prepare(env, create_claim(env, "a", domain_id=domain)).error
    snapshot, journal = _paths(env)
    before = os.stat(snapshot)
    ref = create_claim(env, "b", domain_id=domain)
    assert not prepare(env, ref).error
    assert os.stat(snapshot).st_ino == before.st_ino, "the snapshot was not replaced"
    # PrepareStarted, then PrepareCompleted: one record each.
    assert _records_of(journal, ref.uid) == 2


def test_a_node_with_todays_checkpoint_file_keeps_every_claim_after_the_upgrade(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    refs = [create_claim(env, name, domain_id=domain) for name in ("a", "b", "c")]
    first = {ref.uid: prepare(env, ref) for ref in refs}
    snapshot, journal = _paths(env)
    current = fs_checkpoints.read_checkpoint(snapshot, cd_records.CODEC)
    assert current is not None
    node(env).plugin.stop(grace_s=0)
    # What the previous release leaves: checkpoint.json alone, in the same format.
    with open(snapshot, "wb") as f:
        f.write(checkpoint_codec.encode(current))
    os.unlink(journal)
    cdi = fs_cdi.CDIDirectory(node(env).settings.cdi_root)
    written = {ref.uid: os.stat(cdi.spec_path(ref.uid)).st_mtime_ns for ref in refs}
    embedded.start_node(env, node(env).name, profile="gb200-nvl72", retry_budget_s=0.2)
    for ref in refs:
        assert prepare(env, ref).devices == first[ref.uid].devices
        assert os.stat(cdi.spec_path(ref.uid)).st_mtime_ns == written[ref.uid], "not rewritten"
    for ref in refs:
        assert not unprepare(env, ref).error
    assert cdi.claim_uids() == frozenset()


def test_a_graceful_stop_leaves_every_claim_in_the_snapshot_for_a_downgrade(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    snapshot, journal = _paths(env)
    node(env).plugin.stop(grace_s=0)
    # An older plugin reads checkpoint.json only, in format version 1: it must find the
    # claim there.
    with open(snapshot, "rb") as f:
        written = checkpoint_codec.decode(f.read(), cd_records.CODEC)
    assert written.format_version == 1 and ref.uid in written.entries
    assert os.path.getsize(journal) == 0


def test_a_torn_journal_tail_is_cut_and_every_acknowledged_claim_kept(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, ref).error
    _, journal = _paths(env)
    valid = os.path.getsize(journal)
    with open(journal, "ab") as f:  # a kill in the middle of the next append
        f.write(b"0f3a9c")
    later = create_claim(env, "b", domain_id=domain)
    driver = _fresh_driver(env)
    assert ref.uid in driver.recover().entries
    assert os.path.getsize(journal) == valid
    assert not driver.node_prepare((later,))[later.uid].error
    current = fs_checkpoints.read_checkpoint(_paths(env)[0], cd_records.CODEC)
    assert current is not None and {ref.uid, later.uid} <= set(current.entries)


class _UncuttableJournal(fs_checkpoints.FileCheckpointStore):
    def truncate_journal(self, length: int) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", self.path)


def test_a_torn_tail_that_cannot_be_cut_stops_prepares_instead_of_appending_after_it(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, ref).error
    snapshot, journal = _paths(env)
    with open(journal, "ab") as f:  # a kill in the middle of the next append
        f.write(b"0f3a9c")
    with open(journal, "rb") as f:
        torn = f.read()
    settings = node(env).settings
    driver = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=_UncuttableJournal(snapshot),
            cdi=fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
        retry_budget_s=0.2,
    )
    assert ref.uid in driver.recover().entries  # the plugin stays up with what it read
    later = create_claim(env, "b", domain_id=domain)
    refused = driver.node_prepare((later,))[later.uid].error
    assert "cannot be written" in refused and "serves no prepares" in refused
    with open(journal, "rb") as f:
        assert f.read() == torn, "appended after the uncut torn tail"
    assert driver.node_unprepare((ref,))[ref.uid] == models.ClaimResult()


def test_a_corrupt_journal_record_is_quarantined_with_its_snapshot_and_state_rebuilt(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, ref).error
    assert not prepare(env, create_claim(env, "b", domain_id=domain)).error
    snapshot, journal = _paths(env)
    with open(journal, "r+b") as f:
        f.write(b"#")  # the first record: good records follow, so this is no torn tail
    recovered = _fresh_driver(env).recover()
    assert glob.glob(snapshot + ".corrupt-*.journal"), "the journal is kept for inspection"
    assert glob.glob(snapshot + ".corrupt-*[0-9]"), "and the snapshot beside it"
    assert recovered.entries[ref.uid].state is models.ClaimState.PREPARE_COMPLETED
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert any(e["reason"] == "CheckpointCorrupt" for e in events)


def test_a_journal_written_by_another_process_is_read_again(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    assert not _fresh_driver(env).node_unprepare((ref,))[ref.uid].error
    _, journal = _paths(env)
    records = _records_of(journal, ref.uid)
    # The running plugin sees the other writer's delete (its stamps changed) and prepares
    # anew (two records), instead of answering from memory that the claim is prepared.
    assert not prepare(env, ref).error
    assert _records_of(journal, ref.uid) == records + 2


def test_a_journal_left_beside_a_snapshot_rewritten_by_an_older_plugin_is_not_replayed(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    snapshot, journal = _paths(env)
    node(env).plugin.stop(grace_s=0)
    with open(journal, "rb") as f:
        assert f.read() == b"", "compacted at the stop"
    # A downgrade: the older plugin unprepares the claim in the snapshot alone...
    current = fs_checkpoints.read_checkpoint(snapshot, cd_records.CODEC)
    assert current is not None
    # ... while a journal of this release, following an earlier snapshot, is still there.
    earlier = checkpoint_codec.snapshot_id(b"an earlier snapshot")
    with open(journal, "wb") as f:
        f.write(checkpoint_codec.base_record(earlier))
        f.write(checkpoint_codec.encode_records(
            dataclasses.replace(current, entries={}), current))
    with open(snapshot, "wb") as f:
        f.write(checkpoint_codec.encode(dataclasses.replace(current, entries={})))
    # The inspection tool reads it as the plugin does: the stale journal is not applied.
    inspected = fs_checkpoints.read_checkpoint(snapshot, cd_records.CODEC)
    assert inspected is not None
    assert ref.uid not in inspected.entries, "read_checkpoint replayed the stale journal"
    recovered = _fresh_driver(env).recover()
    assert ref.uid not in recovered.entries, "the stale journal brought the claim back"
    assert os.path.getsize(journal) == 0


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_journal_lost_to_someone_else_is_rebuilt_from_the_cdi_specs_with_an_event(
    env: embedded.Embedded, how: str
) -> None:
    # The claims are acknowledged in the journal only (the snapshot predates them); losing
    # it must not lose them, nor let start-up delete their CDI specs as orphans.
    domain = create_domain(env)
    refs = [create_claim(env, name, domain_id=domain) for name in ("a", "b")]
    first = {ref.uid: prepare(env, ref) for ref in refs}
    snapshot, journal = _paths(env)
    with open(snapshot, "rb") as f:
        in_snapshot = set(checkpoint_codec.decode(f.read(), cd_records.CODEC).entries)
    assert not in_snapshot & {r.uid for r in refs}
    if how == "deleted":
        os.unlink(journal)
    else:
        os.truncate(journal, 0)

    recovered = _fresh_driver(env).recover()

    cdi = fs_cdi.CDIDirectory(node(env).settings.cdi_root)
    for ref in refs:
        assert recovered.entries[ref.uid].state is models.ClaimState.PREPARE_COMPLETED
        ids = [d.cdi_device_ids for d in recovered.entries[ref.uid].devices]
        assert ids == [d.cdi_device_ids for d in first[ref.uid].devices]
        assert os.path.exists(cdi.spec_path(ref.uid)), "deleted as an orphan"
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    [event] = [e for e in events if e["reason"] == "CheckpointJournalLost"]
    assert "rebuilt from 2 CDI spec file(s)" in event["message"]


def test_a_journal_lost_while_the_plugin_runs_is_noticed_on_the_next_call(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, ref).error
    _, journal = _paths(env)
    os.unlink(journal)

    again = prepare(env, ref)

    assert not again.error
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert [e["reason"] for e in events].count("CheckpointJournalLost") == 1
    current = fs_checkpoints.read_checkpoint(_paths(env)[0], cd_records.CODEC)
    assert current is not None and ref.uid in current.entries


def test_an_empty_journal_beside_a_gracefully_compacted_snapshot_is_no_loss(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    node(env).plugin.stop(grace_s=0)

    assert ref.uid in _fresh_driver(env).recover().entries

    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert not any(e["reason"] == "CheckpointJournalLost" for e in events)
