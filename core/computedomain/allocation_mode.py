"""Which `allocationMode` a claim's ComputeDomainChannelConfig may ask for (DESIGN §1).

The admission webhook (at `kubectl apply`) and prepare (on the node) must refuse exactly the
same values with the same reason, or a claim the webhook let through would fail later with a
different story; both ask `refusal` here. The decoder keeps the value raw because whether it
is acceptable depends on the IMEX mode in force, not on the JSON.
"""

from __future__ import annotations

from typing import Final

from core import models
from core.computedomain import modes

# An empty allocationMode means Single (the CRD's default).
_SINGLE_MODES: Final = ("", models.AllocationMode.SINGLE.value)
_KNOWN_MODES: Final = (*_SINGLE_MODES, models.AllocationMode.ALL.value)


def refusal(mode: str, *, config: models.DriverConfig) -> str:
    """Why a ComputeDomainChannelConfig's raw `allocationMode` cannot be served under
    `config`, and what to set instead; "" when it can.

    Driver-managed IMEX serves Single and All (every channel of the CD's own IMEX domain).
    Host-managed IMEX serves Single only: All would hand one workload every channel of the
    host's IMEX domain, i.e. every other workload's too (what one workload gets instead
    depends on the isolation, see `modes.host_managed_channel_grant`).

    NB: the text starts with the quoted value (`'All' is not supported ...`) so each caller
    puts its own name for the field in front: admission its JSON path and a colon, prepare
    the word `allocationMode`.
    """
    if config.host_managed and mode not in _SINGLE_MODES:
        return (
            f"'{mode}' is not supported in host-managed IMEX mode: host-managed IMEX gives "
            f"{modes.host_managed_channel_grant(config)}; set allocationMode: "
            f"{models.AllocationMode.SINGLE.value} (or leave it out), or use the "
            "ResourceClaimTemplate the ComputeDomain generates (it always says "
            f"{models.AllocationMode.SINGLE.value})"
        )
    if mode not in _KNOWN_MODES:
        return (
            f"'{mode}' is not valid: use {models.AllocationMode.SINGLE.value} or "
            f"{models.AllocationMode.ALL.value}"
        )
    return ""
