"""The plugin checkpoint: its on-disk codec and the transitions that do not come from a claim.

Shared by both halves: nothing here knows a ComputeDomain or a GPU. Each entry holds the
shared fields and the half's own record, written and read by the half's `RecordCodec`
(`computedomain.checkpoint_records`, `gpu.checkpoint_records`).

Format (DESIGN §5), version 2: one JSON object written in canonical form (sorted keys, compact
separators, ASCII only, one trailing newline) holding `version`, `checksum`, `bootID` and
`entries` (a list sorted by claim uid; each `uid`, `namespace`, `name`, `state`, `devices`,
`updatedAt` and the record under the codec's key). `checksum` is the SHA-256 (hex) of the
canonical JSON of the object without `checksum`. A reader accepts only the canonical bytes of
what it parsed, so every change to a valid file, even one that leaves the parsed values equal
(`1e5` vs `1E5`), is detected. Fields a reader does not know are kept in `extra` and written
back (downgrade safety); they are not interpreted.

Version 1 (written by releases before the records were typed) is read too: its header's
`mode`/`isolation` are dropped (nothing decided on them) and each entry's record is read by
the codec's `decode_legacy` from the entry's own fields. The journal's records are in the
format of the snapshot they follow (`encode_records`), so a version-1 snapshot (a graceful
stop writes one, for a downgrade) is followed by version-1 records until the next compaction
writes version 2: one journal never mixes two formats, and no start pays a rewrite.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any, Final, Generic, TypeVar

from core import errors, models, names

# The states in which an entry holds its claim's devices (and CDI spec) on the node.
HOLDING_STATES = (models.ClaimState.PREPARE_STARTED, models.ClaimState.PREPARE_COMPLETED)

VERSION: Final = 2
# Versions this reader accepts (it writes only VERSION).
READABLE_VERSIONS: Final = (1, 2)
TOMBSTONE_TTL_S = 300.0

P = TypeVar("P")

_ENTRY_FIELDS = frozenset({"uid", "namespace", "name", "state", "devices", "updatedAt"})
_TOP_FIELDS = frozenset({"version", "checksum", "bootID", "entries"})
# Members of a version-1 header that version 2 no longer has (the ComputeDomain half's mode,
# which nothing read): dropped, not kept as unknown fields.
_LEGACY_TOP_FIELDS = frozenset({"mode", "isolation"})


class _ShapeError(Exception):
    """Internal: the parsed JSON does not have the checkpoint's shape."""


# ---------------------------------------------------------------- codec


# A top-level snapshot field of ours: a journal starting with this snapshot's base record is
# beside it, so a missing or empty journal means someone else deleted or emptied it. Its value
# is a digest of the snapshot's boot ID and entries, so a snapshot another plugin rewrote with
# other entries (keeping unknown fields, as older plugins do) no longer claims a journal.
# Absent from the snapshot a graceful stop writes (the journal emptied on purpose, for a
# downgrade) and from older plugins' snapshots.
JOURNALED_FIELD: Final = "journaled"


def _journal_mark(boot_id: str, entries: list[Any]) -> str:
    body = _canonical({"bootID": boot_id, "entries": entries})
    return hashlib.sha256(body.encode("ascii")).hexdigest()[:32]


def expects_journal(cp: models.Checkpoint[P]) -> bool:
    """Whether the snapshot `cp` was decoded from says a journal follows it."""
    return cp.journal_expected


def empty(*, boot_id: str, codec: models.RecordCodec[P]) -> models.Checkpoint[P]:
    """A fresh checkpoint of one half for this boot."""
    return models.Checkpoint(boot_id=boot_id, codec=codec)


def encode(
    cp: models.Checkpoint[P], *, journaled: bool | None = None, version: int = VERSION
) -> bytes:
    """Canonical bytes of `cp`, checksummed; `decode(encode(cp), cp.codec) == cp`.

    `journaled` sets (True) or drops (False) the `JOURNALED_FIELD` mark; None keeps `cp`'s.
    `version` 1 writes what the release before this format reads (the snapshot of a graceful
    stop, so that a downgrade keeps every claim); it never carries the journal mark.
    """
    if version not in READABLE_VERSIONS:
        raise ValueError(f"cannot write checkpoint format version {version}")
    extra = dict(cp.extra)
    if journaled is not None or version == 1:
        extra.pop(JOURNALED_FIELD, None)
    entries = [
        _entry_to_json(cp.entries[uid], cp.codec, version=version) for uid in sorted(cp.entries)
    ]
    if journaled and version == VERSION:
        extra[JOURNALED_FIELD] = _journal_mark(cp.boot_id, entries)
    content: dict[str, Any] = {
        **extra,
        **(cp.codec.legacy_header([cp.entries[uid].record for uid in sorted(cp.entries)])
           if version == 1 else {}),
        "version": version,
        "bootID": cp.boot_id,
        "entries": entries,
    }
    content.pop("checksum", None)
    document = {**content, "checksum": _checksum(content)}
    return (_canonical(document) + "\n").encode("ascii")


def decode(
    data: bytes, codec: models.RecordCodec[P], *, check_journal_mark: bool = True
) -> models.Checkpoint[P]:
    """Parse checkpoint bytes of the half `codec` belongs to; raises only
    CheckpointCorruptError.

    `check_journal_mark`: also work out `journal_expected` (O(entries) more: the reader
    needs it only when it found no journal beside the snapshot).

    Corrupt means: not canonical JSON, checksum mismatch, wrong shape or an unsupported
    version. The caller must move the file aside, never overwrite it.
    """
    try:
        text = data.decode("ascii")
        document = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _corrupt(f"not valid JSON ({err})") from None
    if not isinstance(document, dict):
        raise _corrupt("the top level is not a JSON object")
    version = document.get("version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise _corrupt(
            f"unsupported version {version!r} (this plugin reads versions "
            f"{', '.join(str(v) for v in READABLE_VERSIONS)})"
        )
    try:
        canonical = _canonical(document) + "\n"
    except (ValueError, RecursionError) as err:
        raise _corrupt(f"not encodable ({err})") from None
    if canonical != text:
        raise _corrupt("the bytes are not in the canonical form this format is written in")
    content = {key: value for key, value in document.items() if key != "checksum"}
    if document.get("checksum") != _content_checksum(canonical, document, content):
        raise _corrupt("checksum mismatch")
    try:
        return _checkpoint_from_json(
            content, codec, version=version, check_journal_mark=check_journal_mark
        )
    except _ShapeError as err:
        raise _corrupt(str(err)) from None
    except (OverflowError, ValueError, TypeError) as err:
        # NB: a valid checksum over values our models cannot hold (a hand-edited or future
        # file, e.g. an integer updatedAt too large for a float) is corrupt too.
        raise _corrupt(f"a value cannot be read ({type(err).__name__}: {err})") from None


def _corrupt(reason: str) -> errors.CheckpointCorruptError:
    return errors.CheckpointCorruptError(
        f"the plugin checkpoint file is corrupt: {reason}; it will be moved aside (kept for "
        "inspection, never deleted) and prepared claims rebuilt from the CDI specs on disk"
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _canonical(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def _content_checksum(
    canonical: str, document: Mapping[str, Any], content: Mapping[str, Any]
) -> str:
    """`_checksum(content)`, reusing the document's canonical text when that is exact.

    Keys are sorted, so the content's canonical text is the document's without its
    `"checksum":"..."` member, provided that member's text occurs exactly once (otherwise
    the content is serialised again). Saves one full serialisation at start-up.
    """
    member = '"checksum":' + json.dumps(document.get("checksum"), ensure_ascii=True)
    text = canonical.rstrip("\n")
    if text.count(member) != 1:
        return _checksum(content)
    if f",{member}" in text:
        text = text.replace(f",{member}", "", 1)
    else:
        text = text.replace(f"{member},", "", 1).replace(member, "", 1)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _checksum(content: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(content).encode("ascii")).hexdigest()


def _entry_to_json(
    entry: models.CheckpointEntry[P], codec: models.RecordCodec[P], *, version: int = VERSION
) -> dict[str, Any]:
    record = (
        codec.encode_legacy(entry.record) if version == 1
        else {codec.key: codec.encode(entry.record)}
    )
    known = {
        "uid": entry.claim_uid,
        "namespace": entry.namespace,
        "name": entry.name,
        "state": entry.state.value,
        "devices": [_device_to_json(d) for d in entry.devices],
        "updatedAt": entry.updated_at,
        **record,
    }
    return {**{k: v for k, v in entry.extra.items() if k not in known}, **known}


def _device_to_json(device: models.PreparedDevice) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "requestNames": list(device.request_names),
        "poolName": device.pool_name,
        "deviceName": device.device_name,
        "cdiDeviceIDs": list(device.cdi_device_ids),
    }
    if device.share_id:
        raw["shareID"] = device.share_id  # NB: only when set: entries without stay byte-identical
    return raw


def _checkpoint_from_json(
    content: Mapping[str, Any], codec: models.RecordCodec[P], *, version: int,
    check_journal_mark: bool,
) -> models.Checkpoint[P]:
    raw_entries = content.get("entries")
    if not isinstance(raw_entries, list):
        raise _ShapeError("'entries' is not a list")
    entries: dict[names.ClaimUID, models.CheckpointEntry[P]] = {}
    known = _known_entry_fields(codec, version=version)
    for raw in raw_entries:
        entry = _entry_from_json(raw, codec, version=version, known=known)
        if entry.claim_uid in entries:
            raise _ShapeError(f"claim {entry.claim_uid} appears twice")
        entries[entry.claim_uid] = entry
    boot_id = _str(content, "bootID")
    mark = content.get(JOURNALED_FIELD)
    return models.Checkpoint(
        boot_id=boot_id,
        codec=codec,
        entries=entries,
        extra=_header_extra(content, version=version),
        format_version=version,
        journal_expected=(
            check_journal_mark and isinstance(mark, str)
            and mark == _journal_mark(boot_id, raw_entries)
        ),
    )


def _known_entry_fields(codec: models.RecordCodec[P], *, version: int) -> frozenset[str]:
    """The members of an entry that are not kept as unknown fields in its `extra`."""
    return _ENTRY_FIELDS | (codec.legacy_fields if version == 1 else frozenset({codec.key}))


def _header_extra(content: Mapping[str, Any], *, version: int) -> dict[str, Any]:
    dropped = _TOP_FIELDS | (_LEGACY_TOP_FIELDS if version == 1 else frozenset())
    return {k: v for k, v in content.items() if k not in dropped}


def _entry_from_json(
    raw: Any, codec: models.RecordCodec[P], *, version: int, known: frozenset[str]
) -> models.CheckpointEntry[P]:
    if not isinstance(raw, dict):
        raise _ShapeError("an entry is not a JSON object")
    updated_at = raw.get("updatedAt")
    if not isinstance(updated_at, int | float) or isinstance(updated_at, bool):
        raise _ShapeError("an entry's 'updatedAt' is not a number")
    devices = raw.get("devices")
    if not isinstance(devices, list):
        raise _ShapeError("an entry's 'devices' is not a list")
    if version == 1:
        record = codec.decode_legacy(raw)
    else:
        own = raw.get(codec.key)
        if own is None:
            raise _ShapeError(f"an entry has no {codec.key!r} record (a file of the other "
                              "half's plugin?)")
        record = codec.decode(own)
    return models.CheckpointEntry(
        claim_uid=names.ClaimUID(_str(raw, "uid")),
        namespace=_str(raw, "namespace"),
        name=_str(raw, "name"),
        state=_state(raw, "state"),
        record=record,
        devices=tuple(_device_from_json(d) for d in devices),
        updated_at=float(updated_at),
        # NB: the subset test runs in C; most entries have no unknown field.
        extra={} if raw.keys() <= known else {k: v for k, v in raw.items() if k not in known},
    )


def _device_from_json(raw: Any) -> models.PreparedDevice:
    if not isinstance(raw, dict):
        raise _ShapeError("a device is not a JSON object")
    return models.PreparedDevice(
        request_names=_strs(raw, "requestNames"),
        pool_name=_str(raw, "poolName"),
        device_name=_str(raw, "deviceName"),
        cdi_device_ids=_strs(raw, "cdiDeviceIDs"),
        share_id=str(raw.get("shareID") or ""),
    )


def _str(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise _ShapeError(f"{key!r} is not a string")
    return value


def _strs(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    # NB: loops, not all(<generator>): this runs for every entry at start-up.
    value = raw.get(key)
    if type(value) is not list:
        raise _ShapeError(f"{key!r} is not a list of strings")
    for item in value:
        if type(item) is not str:
            raise _ShapeError(f"{key!r} is not a list of strings")
    return tuple(value)


# Value -> member: a dict lookup is several times cheaper than `Enum(value)`, which runs for
# every entry at start-up.
_STATES: dict[str, models.ClaimState] = {member.value: member for member in models.ClaimState}


def _state(raw: Mapping[str, Any], key: str) -> models.ClaimState:
    value = _str(raw, key)
    member = _STATES.get(value)
    if member is None:
        raise _ShapeError(f"{key!r} has the unknown value {value!r}")
    return member


# ---------------------------------------------------------------- transitions


def after_boot(cp: models.Checkpoint[P], *, boot_id: str) -> models.Checkpoint[P]:
    """`cp` unchanged on the same boot; without entries after a reboot (devices are gone)."""
    if cp.boot_id == boot_id:
        return cp
    return dataclasses.replace(cp, boot_id=boot_id, entries={})


def orphan_cdi_specs(
    cp: models.Checkpoint[P], *, spec_claim_uids: Iterable[names.ClaimUID]
) -> tuple[names.ClaimUID, ...]:
    """Claims whose CDI spec is on disk but whom no PrepareStarted/Completed entry holds, sorted.

    Such a file is left over (a reboot dropped its entry, or an unprepare of a claim we did
    not know); kept, it could later be rebuilt into an entry that blocks other domains forever.
    """
    return tuple(
        sorted(
            uid
            for uid in set(spec_claim_uids)
            if (entry := cp.entries.get(uid)) is None or entry.state not in HOLDING_STATES
        )
    )


def expire_tombstones(
    cp: models.Checkpoint[P], *, now: float, ttl_s: float = TOMBSTONE_TTL_S
) -> models.Checkpoint[P]:
    """`cp` without PrepareAborted tombstones older than `ttl_s` (same object if none expired)."""
    expired = [
        uid for uid in index_of(cp).tombstones
        if is_expired_tombstone(cp.entries[uid], now=now, ttl_s=ttl_s)
    ]
    for uid in sorted(expired):
        cp = without_entry(cp, uid)
    return cp


def is_expired_tombstone(
    entry: models.CheckpointEntry[P], *, now: float, ttl_s: float = TOMBSTONE_TTL_S
) -> bool:
    return entry.state is models.ClaimState.PREPARE_ABORTED and now - entry.updated_at >= ttl_s


# ---------------------------------------------------------------- stale entries


class StaleReason(enum.StrEnum):
    """Why a checkpoint entry no longer belongs to a live claim (what the API server said)."""

    DELETED = "the ResourceClaim no longer exists"
    RECREATED = "a ResourceClaim of the same name now has another UID"
    DEALLOCATED = "the ResourceClaim is no longer allocated"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaleEntry(Generic[P]):
    """An entry found stale, as it was when its claim was looked up."""

    entry: models.CheckpointEntry[P]
    reason: StaleReason


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaleCleanup(Generic[P]):
    """Steps that drop stale entries (checkpoint first, then their CDI files) and what went."""

    steps: tuple[models.PluginAction[P], ...]
    removed: tuple[StaleEntry[P], ...]


def entries_to_check(cp: models.Checkpoint[P]) -> tuple[models.CheckpointEntry[P], ...]:
    """The PrepareStarted/PrepareCompleted entries whose claims the API server must confirm."""
    return tuple(e for _, e in sorted(cp.entries.items()) if e.state in HOLDING_STATES)


def plan_stale_cleanup(
    cp: models.Checkpoint[P], *, stale: Iterable[StaleEntry[P]]
) -> StaleCleanup[P]:
    """Drop the entries found stale, if they are still exactly as they were when looked up.

    An entry that changed since (a prepare or unprepare ran while the API was asked) is kept
    for the next round: what the API said may no longer be about it. The checkpoint is
    written before the CDI files are deleted, so a kill in between leaves orphan files
    (deleted at start-up), never an entry whose file is gone.
    """
    removed = tuple(
        s for s in sorted(stale, key=lambda s: s.entry.claim_uid)
        if cp.entries.get(s.entry.claim_uid) == s.entry
    )
    if not removed:
        return StaleCleanup(steps=(), removed=())
    gone = {s.entry.claim_uid for s in removed}
    after = cp
    for uid in sorted(gone):
        after = without_entry(after, uid)
    steps: tuple[models.PluginAction[P], ...] = (
        models.WriteCheckpoint(checkpoint=after, changed=tuple(sorted(gone))),
        *(models.DeleteCDISpec(claim_uid=uid) for uid in sorted(gone)),
    )
    return StaleCleanup(steps=steps, removed=removed)


def stale_reason(
    entry: models.CheckpointEntry[P], claim: models.ResourceClaim | None
) -> StaleReason | None:
    """Whether `claim` (None: not found), as the API server returned it, leaves `entry` stale."""
    if claim is None:
        return StaleReason.DELETED
    if claim.uid != entry.claim_uid:
        return StaleReason.RECREATED
    if not claim.allocated:
        return StaleReason.DEALLOCATED
    return None


# ---------------------------------------------------------------- index


def index_of(cp: models.Checkpoint[P]) -> models.CheckpointIndex[P]:
    """The counts over `cp.entries`: kept by the transitions below, else built (O(claims))."""
    if cp.index is not None and cp.index.entries is cp.entries:
        return cp.index
    tallies: dict[Hashable, int] = {}
    tombstones: set[names.ClaimUID] = set()
    devices = 0
    for uid, entry in cp.entries.items():
        if entry.state is models.ClaimState.PREPARE_ABORTED:
            tombstones.add(uid)
            continue
        if entry.state is models.ClaimState.PREPARE_COMPLETED:
            devices += len(entry.devices)
        if entry.state in HOLDING_STATES:
            for key in cp.codec.tallies(entry.record):
                tallies[key] = tallies.get(key, 0) + 1
    return models.CheckpointIndex(
        entries=cp.entries, tallies=tallies, tombstones=frozenset(tombstones),
        prepared_devices=devices,
    )


def tally(cp: models.Checkpoint[P], key: Hashable) -> int:
    """How many holding entries of `cp` count `key` (see `RecordCodec.tallies`). O(1)."""
    return index_of(cp).tallies.get(key, 0)


def indexed(cp: models.Checkpoint[P]) -> models.Checkpoint[P]:
    """`cp` carrying a valid index (build it once after a load; transitions keep it)."""
    index = index_of(cp)
    return cp if cp.index is index else dataclasses.replace(cp, index=index)


def with_entry(cp: models.Checkpoint[P], entry: models.CheckpointEntry[P]) -> models.Checkpoint[P]:
    """`cp` with `entry` set, in O(1) amortised: the index is updated for the one claim and
    the entries share their bulk with `cp`'s (`_Entries`)."""
    old = cp.entries.get(entry.claim_uid)
    return _changed(cp, _Entries.changed(cp.entries, entry.claim_uid, entry), old=old, new=entry)


def is_reusable(entry: models.CheckpointEntry[P]) -> bool:
    """A completed entry with the full kubelet answer (not one rebuilt from a CDI file)."""
    return (
        entry.state is models.ClaimState.PREPARE_COMPLETED
        and bool(entry.devices)
        and all(d.request_names and d.pool_name and d.device_name for d in entry.devices)
    )


def check_not_aborted(entry: models.CheckpointEntry[P] | None, *, now: float) -> None:
    """Refuse to prepare a claim whose tombstone says an unprepare overtook its prepare."""
    if (
        entry is not None
        and entry.state is models.ClaimState.PREPARE_ABORTED
        and not is_expired_tombstone(entry, now=now)
    ):
        raise errors.PermanentError(
            f"claim {entry.namespace}/{entry.name} was unprepared while its prepare was in "
            "flight; recreate the claim (delete and recreate the pod that uses it)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepareWrites(Generic[P]):
    """The two checkpoint writes of a prepare and the claims they change."""

    started: models.Checkpoint[P]
    completed: models.Checkpoint[P]
    changed: tuple[names.ClaimUID, ...]


def prepare_writes(
    cp: models.Checkpoint[P],
    *,
    started: models.CheckpointEntry[P],
    completed: models.CheckpointEntry[P],
    now: float,
) -> PrepareWrites[P]:
    """`cp` after the claim's PrepareStarted and after its PrepareCompleted entry.

    Tombstones that expired by `now` go in the same writes, so `changed` names them too.
    """
    unexpired = expire_tombstones(cp, now=now)
    expired = () if unexpired is cp else tuple(sorted(
        uid for uid in index_of(cp).tombstones if uid not in unexpired.entries
    ))
    return PrepareWrites(
        started=with_entry(unexpired, started),
        completed=with_entry(unexpired, completed),
        changed=(started.claim_uid, *expired),
    )


def without_entry(cp: models.Checkpoint[P], uid: names.ClaimUID) -> models.Checkpoint[P]:
    """`cp` without the claim's entry (same object if it has none)."""
    old = cp.entries.get(uid)
    if old is None:
        return cp
    return _changed(cp, _Entries.changed(cp.entries, uid, None), old=old, new=None)


class _Entries(Mapping[names.ClaimUID, models.CheckpointEntry[P]], Generic[P]):
    """An immutable entries mapping: a shared base plus this version's changes.

    Deriving a checkpoint that differs in one claim copies only the changes (at most about
    sqrt(claims), then they are folded into a new base), not every entry of the node.
    Neither the base nor the changes are ever modified after construction.
    """

    __slots__ = ("_base", "_changes", "_len")

    def __init__(
        self,
        base: Mapping[names.ClaimUID, models.CheckpointEntry[P]],
        changes: dict[names.ClaimUID, models.CheckpointEntry[P] | None],
        length: int,
    ) -> None:
        self._base = base
        self._changes = changes  # None: the claim's entry was removed
        self._len = length

    @classmethod
    def changed(
        cls,
        entries: Mapping[names.ClaimUID, models.CheckpointEntry[P]],
        uid: names.ClaimUID,
        entry: models.CheckpointEntry[P] | None,
    ) -> _Entries[P]:
        if isinstance(entries, _Entries):
            base, changes = entries._base, dict(entries._changes)
        else:
            base, changes = entries, {}
        length = len(entries) + (entry is not None) - (uid in entries)
        changes[uid] = entry
        if len(changes) > max(64, int(len(base) ** 0.5)):
            folded = {k: v for k, v in base.items() if k not in changes}
            folded.update((k, v) for k, v in changes.items() if v is not None)
            return cls(folded, {}, length)
        return cls(base, changes, length)

    def __getitem__(self, uid: names.ClaimUID) -> models.CheckpointEntry[P]:
        if uid in self._changes:
            entry = self._changes[uid]
            if entry is None:
                raise KeyError(uid)
            return entry
        return self._base[uid]

    def __contains__(self, uid: object) -> bool:
        if uid in self._changes:
            return self._changes[uid] is not None  # type: ignore[index]
        return uid in self._base

    def __iter__(self) -> Iterator[names.ClaimUID]:
        changes = self._changes
        yield from (uid for uid in self._base if uid not in changes)
        yield from (uid for uid, entry in changes.items() if entry is not None)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return repr(dict(self))


def _changed(
    cp: models.Checkpoint[P],
    entries: Mapping[names.ClaimUID, models.CheckpointEntry[P]],
    *,
    old: models.CheckpointEntry[P] | None,
    new: models.CheckpointEntry[P] | None,
) -> models.Checkpoint[P]:
    index = index_of(cp)
    tallies = dict(index.tallies)
    tombstones = set(index.tombstones)
    devices = index.prepared_devices
    for entry, step in ((old, -1), (new, 1)):
        if entry is None:
            continue
        if entry.state is models.ClaimState.PREPARE_ABORTED:
            (tombstones.add if step > 0 else tombstones.discard)(entry.claim_uid)
            continue
        if entry.state is models.ClaimState.PREPARE_COMPLETED:
            devices += step * len(entry.devices)
        for key in cp.codec.tallies(entry.record):
            _bump(tallies, key, step)
    index = models.CheckpointIndex(
        entries=entries, tallies=tallies, tombstones=frozenset(tombstones),
        prepared_devices=devices,
    )
    return dataclasses.replace(cp, entries=entries, index=index)


_K = TypeVar("_K")


def _bump(counts: dict[_K, int], key: _K, step: int) -> None:
    count = counts.get(key, 0) + step
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)


# ---------------------------------------------------------------- journal
#
# The durable log of transitions written after the snapshot (the file `encode` writes): one
# line per record, `<sha256 hex of the JSON> <canonical JSON>\n`. A record sets one claim's
# entry (`put`), removes it (`delete`), or sets the header (`header`: bootID and unknown
# top-level fields; version 1 also wrote mode and isolation). Records are in the format
# version of the snapshot they follow. Every record holds absolute values, so replaying
# records the snapshot already contains changes nothing: compaction (new snapshot, then an
# empty journal) is safe to interrupt at any point.


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replayed(Generic[P]):
    """A snapshot with its journal applied, and how much of the journal was valid."""

    checkpoint: models.Checkpoint[P]
    records: int
    # Bytes of the journal that hold whole, valid records; anything after is a torn tail.
    valid_length: int
    # The journal follows another snapshot than this one: ignored, to be emptied.
    stale: bool = False


def encode_records(
    before: models.Checkpoint[P],
    after: models.Checkpoint[P],
    *,
    changed: Iterable[names.ClaimUID] | None = None,
) -> bytes:
    """The journal lines that turn `before` into `after` (b"" if nothing changed), in the
    format version of `before` (that of the snapshot the journal follows).

    `changed` names the claims that may differ (what the planner touched); None compares
    every entry.
    """
    version = before.format_version
    lines: list[str] = []
    if (after.boot_id, after.extra) != (before.boot_id, before.extra):
        legacy = (
            after.codec.legacy_header([e.record for _, e in sorted(after.entries.items())])
            if version == 1 else {}
        )
        header = {**after.extra, **legacy, "bootID": after.boot_id}
        lines.append(_record_line({"header": header}))
    if changed is None:
        uids: Iterable[names.ClaimUID] = sorted(set(before.entries) | set(after.entries))
    else:
        uids = sorted(set(changed))
    for uid in uids:
        old, new = before.entries.get(uid), after.entries.get(uid)
        if new is None and old is not None:
            lines.append(_record_line({"delete": uid}))
        elif new is not None and new is not old and new != old:
            lines.append(_record_line({"put": _entry_to_json(new, after.codec, version=version)}))
    return "".join(lines).encode("ascii")


def _record_line(record: Mapping[str, Any]) -> str:
    body = _canonical(record)
    return f"{hashlib.sha256(body.encode('ascii')).hexdigest()} {body}\n"


def snapshot_id(snapshot: bytes) -> str:
    """What names one snapshot's bytes; a journal's first record (`base`) holds it."""
    return hashlib.sha256(snapshot).hexdigest()


def base_record(snapshot: str) -> bytes:
    """The line that starts a journal: the id of the snapshot its records follow."""
    return _record_line({"base": snapshot}).encode("ascii")


def replay(cp: models.Checkpoint[P], journal: bytes, *, snapshot: str | None = None) -> Replayed[P]:
    """Apply the journal's records to the snapshot `cp`; raises only CheckpointCorruptError.

    A last line that is incomplete or fails its checksum is a torn tail (a kill or power
    loss during the append that wrote it, never acknowledged): it is ignored and
    `valid_length` tells the caller where to cut. A bad record followed by good ones is
    corruption, as is a good checksum over a record of the wrong shape.

    A journal whose `base` record names another snapshot than `snapshot` (the id of the
    snapshot's bytes) is stale: left by a compaction killed before it emptied the journal,
    or by an older plugin that rewrote the snapshot without knowing the journal. Nothing of
    it is applied and `valid_length` is 0.
    """
    first = _record(journal.split(b"\n", 1)[0]) if snapshot is not None else None
    if first is not None and "base" in first and first["base"] != snapshot:
        return Replayed(checkpoint=cp, records=0, valid_length=0, stale=True)
    entries = dict(cp.entries)
    header: dict[str, Any] | None = None
    offset = records = 0
    lines = journal.split(b"\n")
    complete = lines[:-1]  # the last piece, if any, is a partial (torn) line
    for number, line in enumerate(complete, start=1):
        record = _record(line)
        if record is None:
            torn = not _MERGED_RECORDS.search(line) and not any(
                _record(later) is not None for later in complete[number:]
            )
            if torn:
                break  # a prefix of the last append, nothing valid after it: a torn tail
            raise _corrupt(f"journal record {number} fails its checksum")
        try:
            header = _apply(record, entries, cp) or header
        except _ShapeError as err:
            raise _corrupt(f"journal record {number}: {err}") from None
        except (OverflowError, ValueError, TypeError) as err:
            raise _corrupt(f"journal record {number}: a value cannot be read ({err})") from None
        offset += len(line) + 1
        records += 1
    result = dataclasses.replace(cp, entries=entries, index=None)
    if header is not None:
        try:
            result = dataclasses.replace(
                result,
                boot_id=_str(header, "bootID"),
                extra=_header_extra(header, version=cp.format_version),
            )
        except _ShapeError as err:
            raise _corrupt(f"journal header: {err}") from None
    return Replayed(checkpoint=result, records=records, valid_length=offset)


# Two records joined by a damaged newline: corruption of acknowledged records, never a tear.
_MERGED_RECORDS = re.compile(rb"}.[0-9a-f]{64} {")


def _record(line: bytes) -> dict[str, Any] | None:
    digest, _, body = line.partition(b" ")
    try:
        if hashlib.sha256(body).hexdigest().encode("ascii") != digest:
            return None
        record = json.loads(body.decode("ascii"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and len(record) == 1 else None


def _apply(
    record: Mapping[str, Any],
    entries: dict[names.ClaimUID, models.CheckpointEntry[P]],
    snapshot: models.Checkpoint[P],
) -> dict[str, Any] | None:
    if "put" in record:
        entry = _entry_from_json(
            record["put"], snapshot.codec, version=snapshot.format_version,
            known=_known_entry_fields(snapshot.codec, version=snapshot.format_version),
        )
        entries[entry.claim_uid] = entry
        return None
    if "base" in record:
        return None
    if "delete" in record:
        uid = record["delete"]
        if not isinstance(uid, str):
            raise _ShapeError("'delete' is not a claim uid")
        entries.pop(names.ClaimUID(uid), None)
        return None
    header = record.get("header")
    if not isinstance(header, dict):
        raise _ShapeError("unknown record kind")
    return header
