"""Which devices two prepared claims may hold at once on one node: the GPU half's overlap
rules, in one place.

Checked at prepare against every claim the checkpoint says holds devices, rule by rule:

| mine / theirs                          | verdict                                   |
|----------------------------------------|-------------------------------------------|
| either has admin access                | never a conflict (as upstream)            |
| same device, both consumable shares,   | no conflict (as upstream: the scheduler   |
| equal normalized configs               | counted the capacity each consumes)       |
| same device, both consumable shares,   | conflict: one device runs one config      |
| configs differ                         |                                           |
| same device, both shared (TimeSlicing) | no conflict                               |
| same device, otherwise                 | conflict: exclusive by default            |
| same physical GPU, one side VFIO       | conflict: a GPU given to a VM serves no   |
|                                        | container, nor the reverse                |
| same physical GPU, one side the full   | conflict: the full GPU and a MIG device   |
| GPU                                    | of it cannot both be in use               |
| two MIG devices of one GPU, or         | no conflict                               |
| different GPUs                         |                                           |
"""

from __future__ import annotations

import dataclasses
import enum

from core.gpu import checkpoint_records as records
from core.gpu import devices


class Conflict(enum.Enum):
    """Why two held devices cannot be prepared at once."""

    EXCLUSIVE = "exclusive"
    PASSTHROUGH = "passthrough"
    WHOLE_AND_PART = "whole and part"
    CONFIG_DIFFERS = "config differs"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Overlap:
    """`mine` cannot be prepared while `theirs` is held, for `conflict`."""

    mine: records.HeldDevice
    theirs: records.HeldDevice
    conflict: Conflict


def conflict(mine: records.HeldDevice, theirs: records.HeldDevice) -> Conflict | None:
    """The rule (see the module's table) that keeps `mine` from being prepared beside
    `theirs`, or None when both may be held at once."""
    if mine.admin_access or theirs.admin_access:
        return None
    if mine.name == theirs.name:
        if mine.consumable and theirs.consumable:
            return None if mine.config == theirs.config else Conflict.CONFIG_DIFFERS
        return None if mine.shared and theirs.shared else Conflict.EXCLUSIVE
    if mine.gpu_minor is None or mine.gpu_minor != theirs.gpu_minor:
        return None
    if devices.VFIO_TYPE in (mine.kind, theirs.kind):
        return Conflict.PASSTHROUGH
    if devices.GPU_TYPE in (mine.kind, theirs.kind):
        return Conflict.WHOLE_AND_PART
    return None


def message(overlap: Overlap, *, holder: str) -> str:
    """The prepare error for `overlap`: what is held, by whom, and what to do."""
    mine, theirs = overlap.mine, overlap.theirs
    what = (
        f"device {mine.name}" if mine.name == theirs.name
        else f"device {mine.name} (the same physical GPU as {theirs.name})"
    )
    if overlap.conflict is Conflict.CONFIG_DIFFERS:
        return (
            f"{what} is already prepared on this node for {holder} as a consumable share "
            f"with another config ({theirs.config or 'unknown'}; this claim's: "
            f"{mine.config}); two claims share a device only with equal configs: give this "
            "claim the same opaque config (or none on both), or wait until that claim is "
            "unprepared"
        )
    if overlap.conflict is Conflict.EXCLUSIVE and mine.kind != devices.VFIO_TYPE:
        fix = (
            "to share it, give both claims a config with sharing (strategy TimeSlicing); "
            "otherwise wait until that claim is unprepared"
        )
    else:
        fix = "it cannot be shared: wait until that claim is unprepared"
    return f"{what} is already prepared on this node for {holder}; {fix}"
