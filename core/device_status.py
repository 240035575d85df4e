"""What a kubelet plugin writes into `ResourceClaim.status.devices` (KEP-4817), planned purely.

After a prepare, each device the claim got from this driver has an entry
(`AllocatedDeviceStatus`: driver, pool, device, shareID, conditions, data) with a `Ready`
condition and the data an operator looks for (the GPU or MIG UUID, the PCI address, the IMEX
channel and ComputeDomain; each half supplies its own, see `core.gpu.device_status` and
`core.computedomain.device_status`). An unprepare clears them.

The list is shared: entries are owned by their drivers (the API keys them by driver, pool,
device and shareID), and another driver's entries of the same claim are kept as they are.
`merged_devices` returns the list to write back, or None when nothing would change, so a
retried write is idempotent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from core import models

READY: Final = "Ready"
# The reason of our Ready condition (a CamelCase word, as `metav1.Condition` requires).
CONDITION_PREPARED: Final = "Prepared"

# A JSON object the status carries as `data` (RawExtension; at most 10 KiB on the wire).
DeviceData = Mapping[str, object]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceStatus:
    """This driver's status of one prepared device of a claim."""

    pool: str
    device: str
    # The allocation result's shareID ("" none).
    share_id: str = ""
    data: DeviceData = dataclasses.field(default_factory=dict)


def planned(
    devices: Sequence[models.PreparedDevice], data: Mapping[str, DeviceData]
) -> tuple[DeviceStatus, ...]:
    """One status per distinct prepared device (several requests may share one), sorted;
    `data` maps a device name to what the half says about it (none: empty data)."""
    keys = sorted({(d.pool_name, d.device_name, d.share_id) for d in devices})
    return tuple(
        DeviceStatus(pool=pool, device=device, share_id=share, data=data.get(device, {}))
        for pool, device, share in keys
    )


def _key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        str(entry.get("pool") or ""), str(entry.get("device") or ""),
        str(entry.get("shareID") or ""),
    )


def _ready_since(entry: Mapping[str, Any] | None, *, now: str) -> str:
    """When the entry became Ready: kept from an entry already Ready, else `now`."""
    for condition in (entry or {}).get("conditions") or ():
        if condition.get("type") == READY and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or now)
    return now


def _other_conditions(entry: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The entry's conditions besides Ready: binding conditions set before the pod was bound
    (`core.computedomain.binding`) stay as they were."""
    return [dict(c) for c in (entry or {}).get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") != READY]


def _entry(
    status: DeviceStatus, *, driver: str, since: str, message: str,
    before: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": driver, "pool": status.pool, "device": status.device}
    if status.share_id:
        out["shareID"] = status.share_id
    out["conditions"] = [*_other_conditions(before), {
        "type": READY, "status": "True", "reason": CONDITION_PREPARED, "message": message,
        "lastTransitionTime": since,
    }]
    out["data"] = dict(status.data)
    return out


def merged_devices(
    current: Sequence[Mapping[str, Any]],
    *,
    driver: str,
    ours: Sequence[DeviceStatus],
    now: str,
    message: str,
) -> list[dict[str, Any]] | None:
    """`status.devices` with this driver's entries replaced by `ours` (none: cleared).

    Other drivers' entries keep their place and content, and our entries their conditions
    other than Ready. `now` (RFC 3339) stamps a Ready condition that was not Ready before.
    None when the result equals `current`.
    """
    others = [dict(e) for e in current if e.get("driver") != driver]
    before = {_key(e): e for e in current if e.get("driver") == driver}
    mine = [
        _entry(
            s, driver=driver, message=message,
            since=_ready_since(before.get((s.pool, s.device, s.share_id)), now=now),
            before=before.get((s.pool, s.device, s.share_id)),
        )
        for s in ours
    ]
    if sorted(before) == sorted(_key(e) for e in mine) and all(
        before[_key(e)] == e for e in mine
    ):
        return None
    return others + mine
