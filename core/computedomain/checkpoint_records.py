"""What the ComputeDomain half records about a prepared claim, and how it is written.

An entry of the kubelet plugin's checkpoint holds the shared fields (`core.checkpoint`) and
a `ComputeDomainClaimRecord`: the IMEX mode and isolation it was prepared under, its
ComputeDomain and the channels it holds. Entry member `computeDomain` (format version 2);
version 1 kept these four as members of the entry itself.

The index counts, for every holding entry: its (mode, isolation), each channel it holds,
each (channel, ComputeDomain) pair, and its ComputeDomain when it holds channels. The
planner's checks read these in O(1) (`holders_under`, `channel_holders_besides`,
`channel_claims_of`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from core import checkpoint as checkpoints
from core import models

KEY: Final = "computeDomain"
_LEGACY_FIELDS: Final = frozenset({"mode", "isolation", "domainID", "channelIDs"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainClaimRecord:
    """The ComputeDomain half's part of a checkpoint entry."""

    # The IMEX mode and isolation the claim was prepared under (a mode switch is refused
    # while claims of another mode are held).
    mode: models.IMEXMode
    isolation: models.Isolation
    # The ComputeDomain's uid ("" when unknown: an entry rebuilt from an unreadable spec).
    domain_id: str = ""
    # The IMEX channels the claim holds (none for an IMEX daemon's own claim).
    channel_ids: tuple[int, ...] = ()


Entry = models.CheckpointEntry[ComputeDomainClaimRecord]
Checkpoint = models.Checkpoint[ComputeDomainClaimRecord]
ClaimOutcome = models.ClaimOutcome[ComputeDomainClaimRecord]
PluginAction = models.PluginAction[ComputeDomainClaimRecord]

# Value -> member: a dict lookup is several times cheaper than `Enum(value)`, which would run
# twice for every entry at start-up.
_MODES: Final = {m.value: m for m in models.IMEXMode}
_ISOLATIONS: Final = {i.value: i for i in models.Isolation}


class _Codec:
    """The `models.RecordCodec` of `ComputeDomainClaimRecord`."""

    key: Final = KEY
    legacy_fields: Final = _LEGACY_FIELDS

    def encode(self, record: ComputeDomainClaimRecord) -> dict[str, Any]:
        return {
            "mode": record.mode.value,
            "isolation": record.isolation.value,
            "domainID": record.domain_id,
            "channelIDs": list(record.channel_ids),
        }

    def decode(self, raw: Any) -> ComputeDomainClaimRecord:
        if not isinstance(raw, dict):
            raise ValueError(f"an entry's {KEY!r} record is not a JSON object")
        return _record_from(raw, where=f"{KEY}.")

    def decode_legacy(self, entry: Mapping[str, Any]) -> ComputeDomainClaimRecord:
        return _record_from(entry, where="")

    def encode_legacy(self, record: ComputeDomainClaimRecord) -> dict[str, Any]:
        return self.encode(record)  # version 1 had these four as the entry's own members

    def legacy_header(self, records: Sequence[ComputeDomainClaimRecord]) -> Mapping[str, Any]:
        # Version 1's header held the plugin's mode. Nothing read it back (each entry holds
        # its own), so the entries' mode does, or any valid pair on a node with none.
        first = records[0] if records else ComputeDomainClaimRecord(
            mode=models.IMEXMode.DRIVER_MANAGED, isolation=models.Isolation.DOMAIN
        )
        return {"mode": first.mode.value, "isolation": first.isolation.value}

    def tallies(self, record: ComputeDomainClaimRecord) -> tuple[Hashable, ...]:
        keys: list[Hashable] = [("mode", record.mode, record.isolation)]
        for channel in record.channel_ids:
            keys.append(("channel", channel))
            keys.append(("channel-domain", channel, record.domain_id))
        if record.channel_ids:
            keys.append(("domain-channel-claims", record.domain_id))
        return tuple(keys)


CODEC: Final[models.RecordCodec[ComputeDomainClaimRecord]] = _Codec()


def _record_from(raw: Mapping[str, Any], *, where: str) -> ComputeDomainClaimRecord:
    mode = _MODES.get(raw.get("mode"))  # type: ignore[arg-type]
    isolation = _ISOLATIONS.get(raw.get("isolation"))  # type: ignore[arg-type]
    if mode is None:
        raise ValueError(f"'{where}mode' has the unknown value {raw.get('mode')!r}")
    if isolation is None:
        raise ValueError(f"'{where}isolation' has the unknown value {raw.get('isolation')!r}")
    domain_id = raw.get("domainID")
    if not isinstance(domain_id, str):
        raise ValueError(f"'{where}domainID' is not a string")
    channel_ids = raw.get("channelIDs")
    if type(channel_ids) is not list:
        raise ValueError(f"'{where}channelIDs' is not a list of integers")
    for channel in channel_ids:  # NB: a loop, not any(<generator>): runs for every entry
        if type(channel) is not int:
            raise ValueError(f"'{where}channelIDs' is not a list of integers")
    return ComputeDomainClaimRecord(
        mode=mode, isolation=isolation, domain_id=domain_id, channel_ids=tuple(channel_ids)
    )


def empty(*, boot_id: str) -> Checkpoint:
    """A fresh ComputeDomain-plugin checkpoint for this boot."""
    return checkpoints.empty(boot_id=boot_id, codec=CODEC)


def decode(data: bytes) -> Checkpoint:
    """`checkpoint.decode` for the ComputeDomain plugin's file."""
    return checkpoints.decode(data, CODEC)


# ---------------------------------------------------------------- index queries


def holders_under(cp: Checkpoint, *, mode: models.IMEXMode, isolation: models.Isolation) -> int:
    """Holding entries prepared under `mode`/`isolation`. O(1)."""
    return checkpoints.tally(cp, ("mode", mode, isolation))


def channel_holders_besides(cp: Checkpoint, *, channel: int, domain_id: str) -> int:
    """Holding entries that hold `channel` for another ComputeDomain than `domain_id`. O(1)."""
    return (checkpoints.tally(cp, ("channel", channel))
            - checkpoints.tally(cp, ("channel-domain", channel, domain_id)))


def channel_claims_of(cp: Checkpoint, *, domain_id: str) -> int:
    """Holding entries of ComputeDomain `domain_id` that hold channels (workload claims). O(1).

    NB: the domain's IMEX daemon claim holds no channel and is not counted.
    """
    return checkpoints.tally(cp, ("domain-channel-claims", domain_id))
