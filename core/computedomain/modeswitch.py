"""Mode-switch safety for installs and upgrades (DESIGN §6), pure.

The controller stamps every ComputeDomain with the IMEX mode/isolation that admitted it.
Before an install or upgrade the Helm hook asks what the new mode would strand:

- ComputeDomains admitted under another mode/isolation;
- ComputeDomains another driver manages: they carry the ComputeDomain finalizer but no stamp
  (our controller adds both in one patch; the upstream Go driver adds only the finalizer);
- claims of this driver still in use (allocated by compute-domain.nvidia.com and reserved by
  a pod) when the mode changes. The installed mode is read from what the node plugins
  publish: a `daemon` device in their ResourceSlices means driverManaged, channel devices
  only mean hostManaged, no slice means it cannot be told (and in-use claims block).

Any blocker refuses the change.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import Final

from core import models, names

# Where the refusal sends the operator: (file, section heading). A test checks it exists.
DOCS_SECTION: Final = ("docs/operations.md", "Switching modes")
_LISTED: Final = 20


class Reason(enum.StrEnum):
    """Why one object blocks the change."""

    OTHER_MODE = "admitted under another mode"
    UNSTAMPED = "managed by another driver"
    CLAIM_IN_USE = "claim still in use"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blocker:
    """One object that would be stranded; `admitted` is `<mode>/<isolation>` when known."""

    namespace: str
    name: str
    admitted: str = ""
    reason: Reason = Reason.OTHER_MODE


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublishedSlice:
    """What preflight needs of one ResourceSlice of this driver."""

    device_types: frozenset[str]


def admitted_as(cd: models.ComputeDomain) -> str:
    """`<mode>/<isolation>` that admitted the CD, or "" if the controller never admitted it."""
    mode = cd.meta.annotations.get(names.ADMITTED_MODE_ANNOTATION, "")
    isolation = cd.meta.annotations.get(names.ADMITTED_ISOLATION_ANNOTATION, "")
    return f"{mode}/{isolation}" if mode else ""


def installed_modes(slices: Iterable[PublishedSlice]) -> frozenset[models.IMEXMode]:
    """The IMEX modes the node plugins run in now, judged by the devices they publish."""
    return frozenset(
        models.IMEXMode.DRIVER_MANAGED if "daemon" in s.device_types
        else models.IMEXMode.HOST_MANAGED
        for s in slices
    )


def installed_isolations(slices: Iterable[PublishedSlice]) -> frozenset[models.Isolation]:
    """The isolations the node plugins run with now, judged by the devices they publish
    (slots: channel; a daemon device: domain; channel 0 alone: none; nothing: unknown)."""
    found: set[models.Isolation] = set()
    for s in slices:
        if names.DEVICE_TYPE_SLOT in s.device_types:
            found.add(models.Isolation.CHANNEL)
        elif names.DEVICE_TYPE_DAEMON in s.device_types:
            found.add(models.Isolation.DOMAIN)
        elif names.DEVICE_TYPE_CHANNEL in s.device_types:
            found.add(models.Isolation.NONE)
    return frozenset(found)


def claim_in_use(claim: models.ResourceClaim) -> bool:
    """Allocated by this driver and reserved by someone: prepared, or about to be, on a node."""
    return (
        claim.allocated
        and any(r.driver == names.DRIVER_NAME for r in claim.results)
        and bool(claim.reserved_for)
    )


def find_blockers(
    domains: Iterable[models.ComputeDomain],
    *,
    mode: models.IMEXMode,
    isolation: models.Isolation,
    claims: Iterable[models.ResourceClaim] = (),
    installed: frozenset[models.IMEXMode] = frozenset(),
    installed_isolation: frozenset[models.Isolation] | None = None,
) -> tuple[Blocker, ...]:
    """Everything the requested mode/isolation would strand, sorted by reason, namespace, name.

    A ComputeDomain no driver has touched yet (no stamp, no finalizer) does not block: no
    daemon, label or channel exists for it, so the new controller admits it like any new one.
    Claims in use block only when `installed` is not exactly the requested mode, or (when
    known) `installed_isolation` holds another isolation than the requested one: switching
    isolation is a mode switch (a claim prepared on channel 0 must not meet one on its own
    channel, nor the other way round).
    """
    wanted = f"{mode.value}/{isolation.value}"
    blockers: list[Blocker] = []
    for cd in domains:
        admitted = admitted_as(cd)
        if admitted not in ("", wanted):
            blockers.append(Blocker(namespace=cd.meta.namespace, name=cd.meta.name,
                                    admitted=admitted, reason=Reason.OTHER_MODE))
        elif not admitted and names.COMPUTE_DOMAIN_FINALIZER in cd.meta.finalizers:
            blockers.append(Blocker(namespace=cd.meta.namespace, name=cd.meta.name,
                                    reason=Reason.UNSTAMPED))
    other_isolation = installed_isolation is not None and bool(
        installed_isolation - {isolation}
    )
    if installed != frozenset({mode}) or other_isolation:
        blockers += [
            Blocker(namespace=c.namespace, name=c.name, reason=Reason.CLAIM_IN_USE,
                    admitted=_label(installed))
            for c in claims
            if claim_in_use(c)
        ]
    order = list(Reason)
    return tuple(sorted(blockers, key=lambda b: (order.index(b.reason), b.namespace, b.name)))


def refusal_message(blockers: tuple[Blocker, ...], *, wanted: str) -> str:
    """The operator-facing text of a refused install/upgrade: what blocks it and what to do."""
    parts: list[str] = []
    other = [b for b in blockers if b.reason is Reason.OTHER_MODE]
    if other:
        parts.append(
            f"{len(other)} ComputeDomain(s) exist under another mode: "
            + _listed(other, lambda b: f"{b.namespace}/{b.name} ({b.admitted})")
        )
    unstamped = [b for b in blockers if b.reason is Reason.UNSTAMPED]
    if unstamped:
        parts.append(
            f"{len(unstamped)} ComputeDomain(s) carry no admitted-mode stamp, so another driver "
            "(e.g. the upstream Go driver) manages them and their IMEX daemons may still run: "
            + _listed(unstamped, lambda b: f"{b.namespace}/{b.name}")
        )
    claims = [b for b in blockers if b.reason is Reason.CLAIM_IN_USE]
    if claims:
        installed = claims[0].admitted
        now = (f"the node plugins run {installed}" if installed
               else "no node plugin publishes a ResourceSlice, so the installed mode cannot "
               "be told")
        parts.append(
            f"{len(claims)} ResourceClaim(s) of {names.DRIVER_NAME} are still in use (reserved "
            f"by pods) and {now}: " + _listed(claims, lambda b: f"{b.namespace}/{b.name}")
        )
    docs, section = DOCS_SECTION
    return (
        f"refusing to install or upgrade with IMEX mode/isolation {wanted}: "
        + "; ".join(parts)
        + ". Delete those ComputeDomains and the pods using those claims (and let them finish), "
        f"then upgrade again; see {docs}, '{section}'"
    )


def _label(installed: frozenset[models.IMEXMode]) -> str:
    return " and ".join(sorted(m.value for m in installed))


def _listed(blockers: list[Blocker], show: Callable[[Blocker], str]) -> str:
    shown = ", ".join(show(b) for b in blockers[:_LISTED])
    more = f" and {len(blockers) - _LISTED} more" if len(blockers) > _LISTED else ""
    return shown + more

