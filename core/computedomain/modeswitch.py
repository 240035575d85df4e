"""Mode-switch safety for installs and upgrades (DESIGN §6), pure.

The controller stamps every ComputeDomain with the IMEX mode/isolation that admitted it.
Before an install or upgrade the Helm hook asks what the new mode would strand:

- ComputeDomains admitted under another mode/isolation;
- ComputeDomains another driver manages (the ComputeDomain finalizer but no stamp: our
  controller adds both in one patch, the upstream Go driver only the finalizer) that cannot be
  adopted in place. Upstream's controller builds what ours builds for a CD in the same mode
  (same finalizer, RCTs, DaemonSet name and namespace, node label, status), so the controller
  adopts such a CD when the node plugins already run the requested mode/isolation; it refuses
  when that mode is unknown, mixed or another one, under channel isolation (upstream never
  gave a CD a channel of its own), and when the CD's IMEX DaemonSet runs in another namespace
  than the one being installed (a second daemon would be started beside it);
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
ADOPTION_DOCS_SECTION: Final = ("docs/operations.md", "ComputeDomains of the upstream driver")
_LISTED: Final = 20


class Reason(enum.StrEnum):
    """Why one object blocks the change."""

    OTHER_MODE = "admitted under another mode"
    UNSTAMPED = "managed by another driver"
    UNSTAMPED_CHANNEL = "made without a channel of its own"
    DAEMONS_ELSEWHERE = "IMEX daemons in another namespace"
    CLAIM_IN_USE = "claim still in use"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blocker:
    """One object that would be stranded; `admitted` is `<mode>/<isolation>` when known (for
    UNSTAMPED and CLAIM_IN_USE: what the node plugins run; for DAEMONS_ELSEWHERE: the
    namespace the CD's DaemonSet is in)."""

    namespace: str
    name: str
    admitted: str = ""
    reason: Reason = Reason.OTHER_MODE


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaemonSetSeen:
    """A DaemonSet carrying the computeDomain label: where one CD's IMEX daemons run."""

    namespace: str
    cd_uid: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublishedSlice:
    """What preflight needs of one ResourceSlice of this driver."""

    device_types: frozenset[str]


_ADOPTION_REASONS: Final = frozenset(
    {Reason.UNSTAMPED, Reason.UNSTAMPED_CHANNEL, Reason.DAEMONS_ELSEWHERE}
)


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


def made_by_another_driver(cd: models.ComputeDomain) -> bool:
    """True for a CD another driver (upstream's) admitted: our finalizer, no stamp of ours."""
    return not admitted_as(cd) and names.COMPUTE_DOMAIN_FINALIZER in cd.meta.finalizers


def adoption_refusal(
    *,
    mode: models.IMEXMode,
    isolation: models.Isolation,
    installed: frozenset[models.IMEXMode],
    installed_isolation: frozenset[models.Isolation] | None,
) -> Reason | None:
    """Why ComputeDomains another driver made cannot be adopted under `mode`/`isolation`
    (None: they can).

    Upstream's CDs are adoptable exactly when every node plugin publishes the requested
    mode/isolation: then the CD, its RCTs and (driver-managed) its DaemonSet are what ours
    would have built in that mode. Channel isolation never: upstream's workload RCTs hand out
    channel 0 by the default channel class, and an RCT's spec is immutable.
    """
    if isolation is models.Isolation.CHANNEL:
        return Reason.UNSTAMPED_CHANNEL
    if not _runs(mode, isolation, installed=installed, installed_isolation=installed_isolation):
        return Reason.UNSTAMPED
    return None


def find_blockers(
    domains: Iterable[models.ComputeDomain],
    *,
    mode: models.IMEXMode,
    isolation: models.Isolation,
    claims: Iterable[models.ResourceClaim] = (),
    installed: frozenset[models.IMEXMode] = frozenset(),
    installed_isolation: frozenset[models.Isolation] | None = None,
    daemonsets: Iterable[DaemonSetSeen] = (),
    namespace: str = "",
) -> tuple[Blocker, ...]:
    """Everything the requested mode/isolation would strand, sorted by reason, namespace, name.

    A ComputeDomain no driver has touched yet (no stamp, no finalizer) does not block: no
    daemon, label or channel exists for it, so the new controller admits it like any new one.
    One another driver made blocks unless it can be adopted (`adoption_refusal`), or, in
    driver-managed mode with `namespace` (the driver namespace being installed) given, when
    one of `daemonsets` runs its IMEX daemons in another namespace.
    Claims in use block only when `installed` is not exactly the requested mode, or (when
    known) `installed_isolation` holds another isolation than the requested one: switching
    isolation is a mode switch (a claim prepared on channel 0 must not meet one on its own
    channel, nor the other way round).
    """
    wanted = f"{mode.value}/{isolation.value}"
    runs = _label(installed, installed_isolation)
    refusal = adoption_refusal(mode=mode, isolation=isolation, installed=installed,
                               installed_isolation=installed_isolation)
    elsewhere: dict[str, str] = {}
    if namespace and mode is models.IMEXMode.DRIVER_MANAGED:
        elsewhere = {d.cd_uid: d.namespace for d in sorted(
            daemonsets, key=lambda d: d.namespace) if d.namespace != namespace}
    blockers: list[Blocker] = []
    for cd in domains:
        admitted = admitted_as(cd)
        where = {"namespace": cd.meta.namespace, "name": cd.meta.name}
        if admitted not in ("", wanted):
            blockers.append(Blocker(**where, admitted=admitted, reason=Reason.OTHER_MODE))
        elif not made_by_another_driver(cd):
            continue
        elif refusal is not None:
            blockers.append(Blocker(**where, admitted=runs, reason=refusal))
        elif cd.meta.uid in elsewhere:
            blockers.append(Blocker(**where, admitted=elsewhere[cd.meta.uid],
                                    reason=Reason.DAEMONS_ELSEWHERE))
    if not _runs(mode, isolation, installed=installed, installed_isolation=installed_isolation):
        blockers += [
            Blocker(namespace=c.namespace, name=c.name, reason=Reason.CLAIM_IN_USE,
                    admitted=runs)
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
            "(e.g. the upstream Go driver) manages them and their IMEX daemons may still run; "
            f"they are adopted in place only when every node plugin already runs {wanted}, "
            f"but {_installed_text(unstamped[0].admitted)}: "
            + _listed(unstamped, lambda b: f"{b.namespace}/{b.name}")
            + ". Install with the IMEX mode the node plugins run (upstream's "
            "resources.computeDomains.imex.mode) while they still run, to adopt them, or "
            "delete them"
        )
    channel = [b for b in blockers if b.reason is Reason.UNSTAMPED_CHANNEL]
    if channel:
        parts.append(
            f"{len(channel)} ComputeDomain(s) carry no admitted-mode stamp (another driver, e.g. "
            "the upstream Go driver, made them) and cannot be adopted under channel isolation: "
            "their ResourceClaimTemplates hand out channel 0 and cannot be changed in place: "
            + _listed(channel, lambda b: f"{b.namespace}/{b.name}")
            + ". Install with isolation domain to adopt them, or delete them"
        )
    elsewhere = [b for b in blockers if b.reason is Reason.DAEMONS_ELSEWHERE]
    if elsewhere:
        parts.append(
            f"{len(elsewhere)} ComputeDomain(s) made by another driver have their IMEX "
            "DaemonSet in another namespace than this install's, so the new controller would "
            "start a second daemon beside it: "
            + _listed(elsewhere, lambda b: f"{b.namespace}/{b.name} (DaemonSet in {b.admitted})")
            + ". Install into the namespace their DaemonSets run in, or delete them"
        )
    claims = [b for b in blockers if b.reason is Reason.CLAIM_IN_USE]
    if claims:
        now = _installed_text(claims[0].admitted)
        parts.append(
            f"{len(claims)} ResourceClaim(s) of {names.DRIVER_NAME} are still in use (reserved "
            f"by pods) and {now}: " + _listed(claims, lambda b: f"{b.namespace}/{b.name}")
        )
    docs, section = DOCS_SECTION
    upstream = ""
    if any(b.reason in _ADOPTION_REASONS for b in blockers):
        adoption_docs, adoption_section = ADOPTION_DOCS_SECTION
        upstream = f" (the upstream driver's: {adoption_docs}, '{adoption_section}')"
    return (
        f"refusing to install or upgrade with IMEX mode/isolation {wanted}: "
        + "; ".join(parts)
        + ". Delete those ComputeDomains and the pods using those claims (and let them finish), "
        f"then upgrade again; see {docs}, '{section}'{upstream}"
    )


def _runs(
    mode: models.IMEXMode,
    isolation: models.Isolation,
    *,
    installed: frozenset[models.IMEXMode],
    installed_isolation: frozenset[models.Isolation] | None,
) -> bool:
    """Every node plugin publishing runs `mode` (and, when known, `isolation`); some do."""
    return installed == frozenset({mode}) and (
        installed_isolation is None or not (installed_isolation - {isolation})
    )


def _label(
    installed: frozenset[models.IMEXMode],
    installed_isolation: frozenset[models.Isolation] | None = None,
) -> str:
    """What the node plugins run, as `<mode>/<isolation>` when one of each is known."""
    if len(installed) == 1 and installed_isolation is not None and len(installed_isolation) == 1:
        (mode,), (isolation,) = installed, installed_isolation
        return f"{mode.value}/{isolation.value}"
    return " and ".join(sorted(m.value for m in installed))


def _installed_text(installed: str) -> str:
    if not installed:
        return ("no node plugin publishes a ResourceSlice, so the installed mode cannot "
                "be told")
    if " and " in installed:
        return f"the node plugins run a mix of {installed}"
    return f"the node plugins run {installed}"


def _listed(blockers: list[Blocker], show: Callable[[Blocker], str]) -> str:
    shown = ", ".join(show(b) for b in blockers[:_LISTED])
    more = f" and {len(blockers) - _LISTED} more" if len(blockers) > _LISTED else ""
    return shown + more

