"""Checkpoint codec (round-trip, corruption, unknown fields) and its non-claim transitions."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import plugin_factories as f
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import cdi, checkpoint, errors, models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import recovery
from core.gpu import checkpoint_records as gpu_records


def _entry(
    uid: str = f.CLAIM_UID,
    *,
    state: models.ClaimState = models.ClaimState.PREPARE_COMPLETED,
    updated_at: float = f.NOW,
) -> models.CheckpointEntry:
    return models.CheckpointEntry(
        claim_uid=names.ClaimUID(uid),
        namespace="ns",
        name="c",
        state=state,
        record=cd_records.ComputeDomainClaimRecord(
            mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
            domain_id="cd", channel_ids=(0,),
        ),
        devices=(
            models.PreparedDevice(
                request_names=("channel",),
                pool_name="n",
                device_name="channel-0",
                cdi_device_ids=(cdi.qualified_device_id(uid, 0),),
            ),
        ),
        updated_at=updated_at,
    )


def _small() -> models.Checkpoint:
    return models.Checkpoint(
        codec=cd_records.CODEC,
        boot_id="b",
        entries={names.ClaimUID("u"): _entry("u", updated_at=1.5)},
    )


def test_checkpoint_round_trips() -> None:
    cp = models.Checkpoint(
        codec=cd_records.CODEC,
        boot_id="b-1",
        entries={f.CLAIM_UID: _entry(), f.OTHER_CLAIM_UID: _entry(f.OTHER_CLAIM_UID)},
    )
    assert cd_records.decode(checkpoint.encode(cp)) == cp


def test_checkpoint_file_carries_version_checksum_boot_and_the_half_record() -> None:
    doc = json.loads(checkpoint.encode(_small()))
    assert doc["version"] == 2
    assert doc["bootID"] == "b"
    assert "mode" not in doc and "isolation" not in doc  # the shared header knows no IMEX
    assert len(doc["checksum"]) == 64
    assert set(doc["entries"][0]) == {
        "uid", "namespace", "name", "state", "devices", "updatedAt", "computeDomain",
    }
    assert doc["entries"][0]["computeDomain"] == {
        "mode": "hostManaged", "isolation": "none", "domainID": "cd", "channelIDs": [0],
    }


def test_every_single_byte_corruption_is_detected() -> None:
    data = checkpoint.encode(_small())
    assert cd_records.decode(data) == _small()
    for position in range(len(data)):
        for value in range(256):
            if value == data[position]:
                continue
            corrupted = data[:position] + bytes([value]) + data[position + 1 :]
            with pytest.raises(errors.CheckpointCorruptError):
                cd_records.decode(corrupted)


def test_corruption_that_parses_to_equal_values_is_detected() -> None:
    cp = models.Checkpoint(
        codec=cd_records.CODEC,
        boot_id="b", entries={names.ClaimUID("u"): _entry("u", updated_at=1e16)},
    )
    data = checkpoint.encode(cp)
    assert b"1e+16" in data
    for same_value in (b"1E+16", b"1e016"):
        with pytest.raises(errors.CheckpointCorruptError):
            cd_records.decode(data.replace(b"1e+16", same_value))


def test_truncated_checkpoint_is_corrupt() -> None:
    data = checkpoint.encode(_small())
    for end in range(len(data)):
        with pytest.raises(errors.CheckpointCorruptError):
            cd_records.decode(data[:end])


def test_corrupt_message_says_the_file_will_be_moved_aside() -> None:
    with pytest.raises(errors.CheckpointCorruptError) as err:
        cd_records.decode(b"{not json")
    assert "corrupt" in err.value.message
    assert "moved aside" in err.value.message


def _rewrite(doc: dict[str, Any]) -> bytes:
    """What a newer writer of format version 2 would produce for `doc`."""
    content = {k: v for k, v in doc.items() if k != "checksum"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    doc = {**content, "checksum": hashlib.sha256(canonical.encode()).hexdigest()}
    return (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()


def test_unsupported_version_is_corrupt() -> None:
    doc = json.loads(checkpoint.encode(_small()))
    doc["version"] = 3
    with pytest.raises(errors.CheckpointCorruptError) as err:
        cd_records.decode(_rewrite(doc))
    assert "version 3" in err.value.message and "reads versions 1, 2" in err.value.message


def test_wrong_shape_with_valid_checksum_is_corrupt() -> None:
    doc = json.loads(checkpoint.encode(_small()))
    doc["entries"][0]["computeDomain"]["channelIDs"] = ["zero"]
    with pytest.raises(errors.CheckpointCorruptError, match=r"computeDomain\.channelIDs"):
        cd_records.decode(_rewrite(doc))


def test_a_file_of_the_other_half_is_corrupt_for_this_one() -> None:
    with pytest.raises(errors.CheckpointCorruptError, match="no 'gpu' record"):
        gpu_records.decode(checkpoint.encode(_small()))


def test_unknown_fields_survive_a_read_write_cycle() -> None:
    doc = json.loads(checkpoint.encode(_small()))
    doc["nodeLease"] = {"holder": "x", "ttl": 1.25}
    doc["entries"][0]["healthChecks"] = [1, 2]
    cp = cd_records.decode(_rewrite(doc))
    assert cp.extra == {"nodeLease": {"holder": "x", "ttl": 1.25}}
    assert cp.entries[names.ClaimUID("u")].extra == {"healthChecks": [1, 2]}
    again = json.loads(checkpoint.encode(cp))
    assert again["nodeLease"] == {"holder": "x", "ttl": 1.25}
    assert again["entries"][0]["healthChecks"] == [1, 2]
    assert cd_records.decode(checkpoint.encode(cp)) == cp


def test_reboot_drops_prepared_state() -> None:
    cp = _small()
    assert checkpoint.after_boot(cp, boot_id="b") is cp
    rebooted = checkpoint.after_boot(cp, boot_id="b-2")
    assert rebooted.entries == {}
    assert rebooted.boot_id == "b-2"


def test_an_empty_checkpoint_is_of_its_half_and_has_no_entries() -> None:
    cp = cd_records.empty(boot_id="b")
    assert (cp.boot_id, cp.codec, cp.entries) == ("b", cd_records.CODEC, {})
    assert cp.format_version == checkpoint.VERSION


def test_tombstones_expire_after_their_ttl() -> None:
    tomb = _entry("t", state=models.ClaimState.PREPARE_ABORTED, updated_at=100.0)
    cp = models.Checkpoint(
        codec=cd_records.CODEC, boot_id="b",
        entries={names.ClaimUID("t"): tomb, names.ClaimUID("u"): _entry("u", updated_at=0.0)},
    )
    assert checkpoint.expire_tombstones(cp, now=399.0) is cp
    assert set(checkpoint.expire_tombstones(cp, now=400.0).entries) == {"u"}


def test_rebuild_from_cdi_proves_completed_channel_claims() -> None:
    spec = cdi.claim_spec(claim_uid=f.CLAIM_UID, channel_ids=[0, 1], major=242, domain_id="cd-7")
    cp = recovery.rebuild_from_cdi(
        boot_id="b", config=f.HOST, claim_specs={f.CLAIM_UID: spec}, now=5.0
    )
    entry = cp.entries[f.CLAIM_UID]
    assert entry.state is models.ClaimState.PREPARE_COMPLETED
    assert (entry.namespace, entry.name) == ("", "")
    assert entry.record.domain_id == "cd-7"  # from the channel devices' COMPUTE_DOMAIN_UUID
    assert entry.record.channel_ids == (0, 1)
    assert entry.devices[0].cdi_device_ids == (
        cdi.qualified_device_id(f.CLAIM_UID, 0), cdi.qualified_device_id(f.CLAIM_UID, 1),
    )
    assert entry.updated_at == 5.0


def test_rebuild_from_cdi_recognises_driver_managed_daemon_claims() -> None:
    spec = cdi.daemon_claim_spec(claim_uid="d", domain_id="cd-9")
    cp = recovery.rebuild_from_cdi(
        boot_id="b", config=f.HOST, claim_specs={names.ClaimUID("d"): spec}, now=5.0
    )
    entry = cp.entries[names.ClaimUID("d")]
    assert entry.record.mode is models.IMEXMode.DRIVER_MANAGED
    assert entry.record.domain_id == "cd-9"
    assert entry.devices[0].cdi_device_ids == (cdi.qualified_daemon_id("d"),)


# ---------------------------------------------------------------- properties

_TEXT = st.text(max_size=12)
_FINITE = st.floats(allow_nan=False, allow_infinity=False)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _FINITE | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_ENTRY_KEYS = {"uid", "namespace", "name", "state", "devices", "updatedAt", "computeDomain"}
_TOP_KEYS = {"version", "checksum", "bootID", "entries"}

_devices = st.builds(
    models.PreparedDevice,
    request_names=st.tuples(_TEXT), pool_name=_TEXT, device_name=_TEXT,
    cdi_device_ids=st.lists(_TEXT, max_size=3).map(tuple),
)


@st.composite
def _entries(draw: st.DrawFn, uid: str) -> models.CheckpointEntry:
    return models.CheckpointEntry(
        claim_uid=names.ClaimUID(uid),
        namespace=draw(_TEXT), name=draw(_TEXT),
        state=draw(st.sampled_from(models.ClaimState)),
        record=cd_records.ComputeDomainClaimRecord(
            mode=draw(st.sampled_from(models.IMEXMode)),
            isolation=draw(st.sampled_from(models.Isolation)),
            domain_id=draw(_TEXT),
            channel_ids=tuple(draw(st.lists(st.integers(0, 2047), max_size=4))),
        ),
        devices=tuple(draw(st.lists(_devices, max_size=2))),
        updated_at=draw(_FINITE),
        extra=draw(st.dictionaries(_TEXT.filter(lambda k: k not in _ENTRY_KEYS), _JSON,
                                   max_size=2)),
    )


@st.composite
def checkpoints(draw: st.DrawFn) -> models.Checkpoint:
    uids = draw(st.lists(_TEXT, max_size=4, unique=True))
    return models.Checkpoint(
        codec=cd_records.CODEC,
        boot_id=draw(_TEXT),
        entries={names.ClaimUID(u): draw(_entries(u)) for u in uids},
        extra=draw(st.dictionaries(_TEXT.filter(lambda k: k not in _TOP_KEYS), _JSON,
                                   max_size=2)),
    )


@given(checkpoints())
def test_property_any_checkpoint_round_trips(cp: models.Checkpoint) -> None:
    data = checkpoint.encode(cp)
    assert cd_records.decode(data) == cp
    assert checkpoint.encode(cd_records.decode(data)) == data


@given(checkpoints(), st.data())
@settings(max_examples=200)
def test_property_any_byte_change_is_detected(cp: models.Checkpoint, data: st.DataObject) -> None:
    encoded = checkpoint.encode(cp)
    position = data.draw(st.integers(0, len(encoded) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != encoded[position]))
    with pytest.raises(errors.CheckpointCorruptError):
        cd_records.decode(encoded[:position] + bytes([value]) + encoded[position + 1 :])


@given(st.binary(max_size=200) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_property_decode_raises_only_its_typed_error(data: bytes) -> None:
    with contextlib.suppress(errors.CheckpointCorruptError):
        cd_records.decode(data)


def test_rebuild_from_cdi_of_a_channel_spec_without_domain_env_leaves_the_domain_empty() -> None:
    spec = cdi.claim_spec(claim_uid=f.CLAIM_UID, channel_ids=[0], major=242, domain_id="x")
    for device in spec["devices"]:
        del device["containerEdits"]["env"]
    cp = recovery.rebuild_from_cdi(
        boot_id="b", config=f.HOST, claim_specs={f.CLAIM_UID: spec}, now=5.0
    )
    assert cp.entries[f.CLAIM_UID].record.domain_id == ""


def test_rebuild_from_cdi_holds_every_channel_for_an_unreadable_spec() -> None:
    cp = recovery.rebuild_from_cdi(
        boot_id="b", config=f.HOST, claim_specs={}, now=5.0, unreadable=(f.CLAIM_UID,)
    )
    entry = cp.entries[f.CLAIM_UID]
    assert entry.state is models.ClaimState.PREPARE_COMPLETED
    assert entry.record.channel_ids == tuple(range(names.MAX_CHANNEL_ID + 1))
    assert entry.record.domain_id == "" and entry.devices == ()


def test_orphan_cdi_specs_are_those_without_a_holding_entry() -> None:
    tomb = _entry("t", state=models.ClaimState.PREPARE_ABORTED)
    started = _entry("s", state=models.ClaimState.PREPARE_STARTED)
    cp = models.Checkpoint(
        codec=cd_records.CODEC, boot_id="b",
        entries={names.ClaimUID(e.claim_uid): e for e in (tomb, started, _entry("u"))},
    )
    uids = [names.ClaimUID(u) for u in ("z", "u", "t", "s", "a")]
    assert checkpoint.orphan_cdi_specs(cp, spec_claim_uids=uids) == ("a", "t", "z")


def test_huge_integer_timestamp_with_a_valid_checksum_is_corrupt() -> None:
    document = json.loads(checkpoint.encode(_small()))
    document["entries"][0]["updatedAt"] = 10**400
    content = {k: v for k, v in document.items() if k != "checksum"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    document["checksum"] = hashlib.sha256(canonical.encode("ascii")).hexdigest()
    data = (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")
    with pytest.raises(errors.CheckpointCorruptError, match="cannot be read"):
        cd_records.decode(data)
