"""Channel isolation (hostManaged + isolation: channel): which IMEX channel IDs are taken.

The table is never stored: it is rebuilt from the cluster, so a restart or a failover of the
controller sees exactly what its predecessor left. An ID is taken while a live ComputeDomain
names it in `status.channelID`, or while a ResourceClaim carries it in its opaque config (the
pods of a deleted ComputeDomain may still run on it). Channel 0 is the host's shared channel
(isolation `none`) and is never assigned here. Pure: observed values in, values out.

Two controllers at once (an upgrade overlap, a stale leader) can still give one channel to two
ComputeDomains: each has its own pending choices and a cache a moment behind. The table then
notices (`duplicate_standing`): of the live ComputeDomains naming one channel the earliest
created (then the lowest UID) keeps it; a later one that no claim uses yet is re-assigned, and
a later one whose claims already carry it is marked so the plugin refuses its new prepares.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final

from core import errors, names

FIRST_ASSIGNABLE: Final = 1
# The kernel's channel minors are 0..2047.
DEFAULT_MAX_CHANNELS: Final = names.MAX_CHANNEL_ID + 1
EXHAUSTED_REASON: Final = "IMEXChannelsExhausted"
DUPLICATE_REASON: Final = "IMEXChannelDuplicate"
# The status condition (type) a later duplicate whose claims already use the channel carries.
UNIQUE_CONDITION: Final = "ChannelUnique"


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelHolder:
    """A live ComputeDomain whose `status.channelID` names a channel, with what orders it."""

    domain_uid: str
    namespace: str
    name: str
    # metadata.creationTimestamp (RFC 3339 in UTC: sorts as time does).
    created: str

    @property
    def order(self) -> tuple[str, str]:
        """Earlier first: creation time, then UID (the same order in every process)."""
        return (self.created, self.domain_uid)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rivals:
    """Channel isolation, observed for one ComputeDomain: the other live ComputeDomains naming
    its status channel, its own creation time, and the channels its ResourceClaims carry."""

    created: str
    others: tuple[ChannelHolder, ...] = ()
    claimed: frozenset[int] = frozenset()


class Standing(enum.Enum):
    UNIQUE = "unique"  # nobody else names the channel, or this CD is the earliest that does
    REASSIGN = "reassign"  # a later duplicate no claim uses yet: give it another channel
    CONFLICT = "conflict"  # a later duplicate its claims already use: refuse new prepares


def duplicate_standing(
    *, domain_uid: str, channel_id: int | None, rivals: Rivals | None
) -> tuple[Standing, ChannelHolder | None]:
    """Whether this ComputeDomain may keep `channel_id` (its status value), and the earliest
    other holder when it may not. Deterministic: every controller judges a pair the same way."""
    if channel_id is None or rivals is None:
        return Standing.UNIQUE, None
    mine = (rivals.created, domain_uid)
    earlier = sorted(
        (r for r in rivals.others if r.domain_uid != domain_uid and r.order < mine),
        key=lambda r: r.order,
    )
    if not earlier:
        return Standing.UNIQUE, None
    standing = Standing.CONFLICT if channel_id in rivals.claimed else Standing.REASSIGN
    return standing, earlier[0]


def duplicate_message(
    *, namespace: str, name: str, channel_id: int, first: ChannelHolder, moved_to: int | None
) -> str:
    """What happened to a later duplicate, for its Events and condition."""
    where = (f"IMEX channel {channel_id} of ComputeDomain {namespace}/{name} is also held by "
             f"ComputeDomain {first.namespace}/{first.name} (created earlier; it keeps it)")
    if moved_to is not None:
        return (f"{where}: no claim used it yet, so {namespace}/{name} now has channel "
                f"{moved_to} (status.channelID) and a new ResourceClaimTemplate carrying it")
    return (f"{where}, and claims of {namespace}/{name} already carry it: new prepares of its "
            "claims are refused, claims already prepared keep running. Delete its pods and "
            "claims and recreate the ComputeDomain to get a channel of its own")


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


def holder_from_k8s(obj: Mapping[str, Any]) -> ChannelHolder:
    """A ComputeDomain's identity and creation time, tolerantly (missing fields: "")."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return ChannelHolder(
        domain_uid=str(meta.get("uid") or ""), namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""), created=str(meta.get("creationTimestamp") or ""),
    )


def rct_channel_from_k8s(obj: Mapping[str, Any]) -> int | None:
    """The channel a ResourceClaimTemplate's channel config carries (None if none)."""
    spec = obj.get("spec")
    inner = spec.get("spec") if isinstance(spec, Mapping) else None
    found = claim_channels_from_k8s({"spec": inner}) if isinstance(inner, Mapping) else ()
    return found[0].channel_id if found else None


def rivals_from_k8s(
    obj: Mapping[str, Any], *, holders: Iterable[Mapping[str, Any]],
    claims: Iterable[ClaimChannel],
) -> Rivals:
    """`Rivals` of the ComputeDomain `obj`: `holders` are live ComputeDomains (any channel;
    those naming another one than `obj`'s are skipped), `claims` any claims' channels."""
    me = domain_channel_from_k8s(obj)
    others = tuple(
        holder_from_k8s(o) for o in holders
        if me.channel_id is not None
        and domain_channel_from_k8s(o).channel_id == me.channel_id
        and domain_channel_from_k8s(o).domain_uid != me.domain_uid
    )
    claimed = frozenset(c.channel_id for c in claims if c.domain_uid == me.domain_uid)
    return Rivals(created=holder_from_k8s(obj).created, others=others, claimed=claimed)


def _channel_or_none(raw: object) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None
    return raw if 0 <= raw <= names.MAX_CHANNEL_ID else None
