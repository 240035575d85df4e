"""Mode-switch safety for installs and upgrades (DESIGN §6), pure.

The controller stamps every ComputeDomain with the IMEX mode/isolation that admitted it.
Before an upgrade changes either, the Helm pre-upgrade hook asks which existing
ComputeDomains would be stranded; any blocker refuses the change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from core import models, names


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blocker:
    namespace: str
    name: str
    admitted: str


def admitted_as(cd: models.ComputeDomain) -> str:
    """`<mode>/<isolation>` that admitted the CD, or "" if the controller never admitted it."""
    mode = cd.meta.annotations.get(names.ADMITTED_MODE_ANNOTATION, "")
    isolation = cd.meta.annotations.get(names.ADMITTED_ISOLATION_ANNOTATION, "")
    return f"{mode}/{isolation}" if mode else ""


def find_blockers(
    domains: Iterable[models.ComputeDomain], *, mode: models.IMEXMode, isolation: models.Isolation
) -> tuple[Blocker, ...]:
    """ComputeDomains that exist under a different mode/isolation than the one requested.

    A CD not admitted yet does not block: no daemon, label or channel exists for it, so the
    new controller admits it under the new mode like any new CD.
    """
    wanted = f"{mode.value}/{isolation.value}"
    blockers = [
        Blocker(namespace=cd.meta.namespace, name=cd.meta.name, admitted=admitted_as(cd))
        for cd in domains
        if admitted_as(cd) not in ("", wanted)
    ]
    return tuple(sorted(blockers, key=lambda b: (b.namespace, b.name)))


def refusal_message(blockers: tuple[Blocker, ...], *, wanted: str) -> str:
    """The operator-facing text of a refused mode/isolation change."""
    listed = ", ".join(f"{b.namespace}/{b.name} ({b.admitted})" for b in blockers[:20])
    more = f" and {len(blockers) - 20} more" if len(blockers) > 20 else ""
    return (
        f"refusing to switch IMEX mode/isolation to {wanted}: {len(blockers)} ComputeDomain(s) "
        f"exist under another mode: {listed}{more}. Delete them (and let their pods finish), "
        "then upgrade again; see docs/operations.md, 'Migration'"
    )
