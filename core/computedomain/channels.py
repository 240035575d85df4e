"""Channel isolation (hostManaged + isolation: channel): which IMEX channel IDs are taken.

The table is never stored: it is rebuilt from the cluster, so a restart or a failover of the
controller sees exactly what its predecessor left. An ID is taken while a live ComputeDomain
names it in `status.channelID`, or while a ResourceClaim carries it in its opaque config (the
pods of a deleted ComputeDomain may still run on it). Channel 0 is the host's shared channel
(isolation `none`) and is never assigned here. Pure: observed values in, values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from core import errors, names

FIRST_ASSIGNABLE: Final = 1
# The kernel's channel minors are 0..2047.
DEFAULT_MAX_CHANNELS: Final = names.MAX_CHANNEL_ID + 1
EXHAUSTED_REASON: Final = "IMEXChannelsExhausted"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DomainChannel:
    """A live ComputeDomain and the channel its status names (None: not assigned yet)."""

    domain_uid: str
    channel_id: int | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimChannel:
    """A ResourceClaim's reference to a ComputeDomain and the channel its config carries."""

    domain_uid: str
    channel_id: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelTable:
    """Which channels are taken, and the channel of each ComputeDomain known to hold one."""

    max_channels: int
    taken: frozenset[int]
    # domain UID -> its channel (live CDs with an assignment, and gone CDs whose claims remain).
    by_domain: Mapping[str, int]

    def channel_of(self, domain_uid: str) -> int | None:
        """The channel this ComputeDomain (live, or gone with claims left) holds."""
        return self.by_domain.get(domain_uid)

    def lowest_free(self) -> int | None:
        """The lowest ID in [1, max_channels) nobody holds; None when all are taken."""
        for channel in range(FIRST_ASSIGNABLE, self.max_channels):
            if channel not in self.taken:
                return channel
        return None

    @property
    def in_use(self) -> int:
        return sum(1 for c in self.taken if FIRST_ASSIGNABLE <= c < self.max_channels)


def check_max_channels(max_channels: int) -> None:
    """Raise ConfigError when `max_channels` cannot bound IDs in [1, max) of 0..2047."""
    if not FIRST_ASSIGNABLE < max_channels <= DEFAULT_MAX_CHANNELS:
        raise errors.ConfigError(
            f"imex.channels.max is {max_channels}: it must be 2..{DEFAULT_MAX_CHANNELS} "
            f"(channel IDs 1..max-1 are assigned; the kernel has {DEFAULT_MAX_CHANNELS} channels)"
        )


def build_table(
    *,
    domains: Iterable[DomainChannel],
    claims: Iterable[ClaimChannel],
    max_channels: int = DEFAULT_MAX_CHANNELS,
) -> ChannelTable:
    """Rebuild the table from live ComputeDomains and existing ResourceClaims.

    Claims count for their channel whether or not their ComputeDomain still exists; channel 0
    (shared) is ignored. Deterministic: the same inputs give an equal table.
    """
    assigned = [d for d in domains if d.channel_id is not None]
    table = table_from_taken((d.channel_id for d in assigned if d.channel_id is not None),
                             own=claims, max_channels=max_channels)
    by_domain = dict(table.by_domain)
    for domain in assigned:
        if domain.channel_id is not None and domain.channel_id >= FIRST_ASSIGNABLE:
            # The status is the record of a live CD; it wins over what its claims say.
            by_domain[domain.domain_uid] = domain.channel_id
    return dataclasses.replace(table, by_domain=by_domain)


def table_from_taken(
    taken: Iterable[int], *, own: Iterable[ClaimChannel] = (),
    max_channels: int = DEFAULT_MAX_CHANNELS,
) -> ChannelTable:
    """A table from the channel IDs known to be held, plus the channels `own` claims carry
    (the controller: one ComputeDomain's own claims, `taken` read from its informers' indexes;
    `build_table`: every claim)."""
    held = {c for c in taken if c >= FIRST_ASSIGNABLE}
    by_domain: dict[str, int] = {}
    for claim in own:
        if claim.channel_id >= FIRST_ASSIGNABLE:
            held.add(claim.channel_id)
            by_domain.setdefault(claim.domain_uid, claim.channel_id)
    return ChannelTable(max_channels=max_channels, taken=frozenset(held), by_domain=by_domain)


def with_assignment(table: ChannelTable, *, domain_uid: str, channel_id: int) -> ChannelTable:
    """The table after `domain_uid` takes `channel_id` (an assignment not yet observed)."""
    by_domain = dict(table.by_domain)
    by_domain[domain_uid] = channel_id
    return dataclasses.replace(table, taken=table.taken | {channel_id}, by_domain=by_domain)


def exhausted_message(*, namespace: str, name: str, table: ChannelTable) -> str:
    """Why a ComputeDomain got no channel, and what frees one."""
    return (
        f"ComputeDomain {namespace}/{name} gets no IMEX channel: all {table.max_channels - 1} "
        f"channels (1..{table.max_channels - 1}) are held by other ComputeDomains or by "
        "ResourceClaims of deleted ones; it stays NotReady and gets one as soon as one is free. "
        "Delete unused ComputeDomains (their channel is free once their pods' claims are gone), "
        "or raise resources.computeDomains.imex.channels.max (at most "
        f"{DEFAULT_MAX_CHANNELS})"
    )


# ---------------------------------------------------------------- reading the cluster (JSON edge)


def domain_channel_from_k8s(obj: Mapping[str, Any]) -> DomainChannel:
    """A ComputeDomain's UID and `status.channelID`, tolerantly (anything malformed: None)."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    status = obj.get("status")
    raw = status.get("channelID") if isinstance(status, Mapping) else None
    return DomainChannel(domain_uid=str(uid or ""), channel_id=_channel_or_none(raw))


def claim_channels_from_k8s(obj: Mapping[str, Any]) -> tuple[ClaimChannel, ...]:
    """The (domainID, channelID) pairs of a ResourceClaim's ComputeDomainChannelConfigs.

    Tolerant: configs of other drivers or kinds, and malformed ones, are skipped (a claim this
    cannot read holds no channel; prepare refuses such a claim under channel isolation).
    """
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    configs = devices.get("config") if isinstance(devices, Mapping) else None
    found: list[ClaimChannel] = []
    for item in configs if isinstance(configs, list) else ():
        opaque = item.get("opaque") if isinstance(item, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != names.DRIVER_NAME:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping) or params.get("kind") != names.KIND_CHANNEL_CONFIG:
            continue
        domain_id = params.get("domainID")
        channel = _channel_or_none(params.get("channelID"))
        if isinstance(domain_id, str) and domain_id and channel is not None:
            found.append(ClaimChannel(domain_uid=domain_id, channel_id=channel))
    return tuple(found)


def _channel_or_none(raw: object) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None
    return raw if 0 <= raw <= names.MAX_CHANNEL_ID else None
