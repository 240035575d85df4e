"""Checkpoint format version 2 reads every file version 1 wrote, and loses nothing of them.

The files under tests/fixtures/checkpoint_v1 were written by the plugins of the release
before the typed records (commit 21ec6c4), both halves, both IMEX modes: snapshot and journal
as those plugins left them. `manifest.json` says what that release read back from each.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from core import checkpoint, models, names
from core.computedomain import checkpoint_records as cd_records
from core.gpu import checkpoint_records as gpu_records

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoint_v1"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
CD_CASES = ("cd-host-managed", "cd-host-managed-channel", "cd-driver-managed")
GPU_CASES = ("gpu", "gpu-legacy-no-record")


def _read(case: str, codec: models.RecordCodec[Any]) -> models.Checkpoint[Any]:
    directory = FIXTURES / case
    snapshot = (directory / "checkpoint.json").read_bytes()
    journal = (directory / "checkpoint.json.journal").read_bytes()
    replayed = checkpoint.replay(
        checkpoint.decode(snapshot, codec), journal, snapshot=checkpoint.snapshot_id(snapshot)
    )
    assert not replayed.stale and replayed.valid_length == len(journal)
    return replayed.checkpoint


def _shared_fields(entry: models.CheckpointEntry[Any]) -> dict[str, Any]:
    return {
        "namespace": entry.namespace, "name": entry.name, "state": entry.state.value,
        "updatedAt": entry.updated_at,
        "devices": [
            {"requestNames": list(d.request_names), "poolName": d.pool_name,
             "deviceName": d.device_name, "cdiDeviceIDs": list(d.cdi_device_ids)}
            for d in entry.devices
        ],
    }


def _expected_shared(claim: dict[str, Any]) -> dict[str, Any]:
    return {k: claim[k] for k in ("namespace", "name", "state", "updatedAt", "devices")}


@pytest.mark.parametrize("case", CD_CASES)
def test_a_version_1_compute_domain_checkpoint_reads_back_every_claim(case: str) -> None:
    expected = MANIFEST[case]
    cp = _read(case, cd_records.CODEC)
    assert cp.format_version == 1
    assert cp.boot_id == expected["bootID"]
    assert set(cp.entries) == set(expected["claims"])
    for uid, claim in expected["claims"].items():
        entry = cp.entries[names.ClaimUID(uid)]
        assert _shared_fields(entry) == _expected_shared(claim)
        assert entry.record == cd_records.ComputeDomainClaimRecord(
            mode=models.IMEXMode(claim["mode"]), isolation=models.Isolation(claim["isolation"]),
            domain_id=claim["domainID"], channel_ids=tuple(claim["channelIDs"]),
        )
        assert entry.extra == {}  # the legacy fields became the record, not unknown fields
    assert "mode" not in cp.extra and "isolation" not in cp.extra


@pytest.mark.parametrize("case", GPU_CASES)
def test_a_version_1_gpu_checkpoint_reads_back_every_claim_and_its_gpu_record(
    case: str,
) -> None:
    expected = MANIFEST[case]
    cp = _read(case, gpu_records.CODEC)
    assert cp.format_version == 1 and cp.boot_id == expected["bootID"]
    assert set(cp.entries) == set(expected["claims"])
    for uid, claim in expected["claims"].items():
        entry = cp.entries[names.ClaimUID(uid)]
        assert _shared_fields(entry) == _expected_shared(claim)
        if claim["gpu"] is not None:
            assert gpu_records.CODEC.encode(entry.record) == claim["gpu"]
        else:
            # None written (a tombstone) or lost (hand-edited): the device names, each held
            # exclusively, nothing known to undo.
            assert entry.record == gpu_records.GpuClaimRecord(held=tuple(
                gpu_records.held_from_name(d["deviceName"]) for d in claim["devices"]
            ))
        assert entry.extra == {}


def test_the_legacy_entry_without_a_gpu_record_still_blocks_its_gpu() -> None:
    cp = _read("gpu-legacy-no-record", gpu_records.CODEC)
    [held] = [e for e in cp.entries.values() if e.name == "train-timesliced"]
    assert held.record.held == (gpu_records.held_from_name("gpu-0"),)
    assert not held.record.held[0].shared and held.record.time_sliced == ()


@pytest.mark.parametrize(("case", "codec"), [
    *((c, cd_records.CODEC) for c in CD_CASES), *((c, gpu_records.CODEC) for c in GPU_CASES),
])
def test_a_version_1_checkpoint_written_again_is_version_2_and_equal(
    case: str, codec: models.RecordCodec[Any]
) -> None:
    old = _read(case, codec)
    data = checkpoint.encode(old)
    assert json.loads(data)["version"] == checkpoint.VERSION == 2
    again = checkpoint.decode(data, codec)
    assert again == old and again.format_version == 2
    assert checkpoint.encode(again) == data


def test_a_journal_header_record_after_a_version_2_snapshot_carries_no_mode() -> None:
    cp = checkpoint.decode(checkpoint.encode(_read("cd-host-managed", cd_records.CODEC)),
                           cd_records.CODEC)
    header = checkpoint.encode_records(
        cp, models.Checkpoint(codec=cd_records.CODEC, boot_id=cp.boot_id, entries=cp.entries,
                              extra={"note": 1}),
    )
    record = json.loads(header.split(b" ", 1)[1])
    assert record == {"header": {"bootID": cp.boot_id, "note": 1}}


@pytest.mark.parametrize(("case", "codec"), [
    ("cd-host-managed", cd_records.CODEC), ("cd-driver-managed", cd_records.CODEC),
    ("gpu", gpu_records.CODEC),
])
def test_a_snapshot_written_as_version_1_is_byte_for_byte_what_that_release_wrote(
    case: str, codec: models.RecordCodec[Any]
) -> None:
    """What a graceful stop leaves for a downgrade: the previous release reads it as its own."""
    written = (FIXTURES / case / "checkpoint.json").read_bytes()
    assert checkpoint.encode(checkpoint.decode(written, codec), version=1) == written


def test_version_1_is_written_without_a_journal_mark_and_no_other_version_at_all() -> None:
    cp = checkpoint.decode((FIXTURES / "cd-host-managed-channel" / "checkpoint.json")
                           .read_bytes(), cd_records.CODEC)
    assert checkpoint.expects_journal(cp)
    legacy = checkpoint.decode(checkpoint.encode(cp, journaled=True, version=1), cd_records.CODEC)
    assert legacy.format_version == 1 and not checkpoint.expects_journal(legacy)
    with pytest.raises(ValueError, match="version 3"):
        checkpoint.encode(cp, version=3)


def test_records_after_a_version_1_snapshot_are_version_1_records() -> None:
    """So one journal never mixes two formats, and the previous release reads it."""
    before = _read("cd-driver-managed", cd_records.CODEC)
    uid, entry = sorted(before.entries.items())[0]
    after = checkpoint.with_entry(before, dataclasses.replace(entry, name="renamed"))
    lines = checkpoint.encode_records(before, after, changed=(uid,))
    put = json.loads(lines.split(b" ", 1)[1])["put"]
    assert put["mode"] == entry.record.mode.value and "computeDomain" not in put
    assert checkpoint.replay(before, lines).checkpoint.entries == after.entries
    v2 = checkpoint.decode(checkpoint.encode(before), cd_records.CODEC)
    put2 = json.loads(checkpoint.encode_records(v2, checkpoint.with_entry(
        v2, dataclasses.replace(entry, name="renamed"))).split(b" ", 1)[1])["put"]
    assert "computeDomain" in put2 and "mode" not in put2
