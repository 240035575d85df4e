"""How a prepare the kubelet abandoned part-way is undone (pure).

A prepare stops before its next step once the kubelet gave up on it or an unprepare of the
claim overtook it. Whatever it already made durable must go again, or the node would hold
devices for a claim the kubelet believes unprepared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from core import models, names

# A half's own device action (`core.gpu.actions.GpuAction`; `typing.Never` for none).
ActionT = TypeVar("ActionT")


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


def has_durable_step(done: Sequence[object]) -> bool:
    """Whether any step run so far left something on disk (a checkpoint write or CDI spec)."""
    return any(isinstance(s, models.WriteCheckpoint | models.WriteCDISpec) for s in done)


def plan_prepare_rollback(
    claim_uid: names.ClaimUID,
    *,
    rollback_to: models.Checkpoint[RecordT],
    device_undo: tuple[ActionT, ...],
) -> tuple[models.PluginAction[RecordT] | ActionT, ...]:
    """The steps that undo an abandoned prepare of `claim_uid`, in order.

    Device changes go first, while the entry that records them is still on disk (a kill in
    between leaves it for the unprepare); then the checkpoint before the prepare is written
    back, then the claim's CDI spec deleted (a kill in between leaves only an orphan file,
    removed at start-up). `device_undo` is what the half's planner says undoes its steps.
    """
    return (
        *device_undo,
        models.WriteCheckpoint(checkpoint=rollback_to, changed=(claim_uid,)),
        models.DeleteCDISpec(claim_uid=claim_uid),
    )
