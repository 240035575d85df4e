"""`plan_gpu_rollback`: what undoes an abandoned GPU prepare, by the same rule as unprepare.

Covers: vfio functions bound are unbound; time-slices set are reset to Default only on GPUs no
other claim of the checkpoint holds; nothing done, nothing undone.
"""

from __future__ import annotations

import gpu_prep_fixtures as f

from core import models, names
from core.gpu import actions, configs
from core.gpu import preparing as gpu_preparing

OTHER = names.ClaimUID("c0ffee00-0000-4000-8000-0000000000aa")
MINE = names.ClaimUID("c0ffee00-0000-4000-8000-0000000000bb")
GPU_0 = f.gpu(0).uuid
GPU_1 = f.gpu(1).uuid


def _holding_gpu_0() -> models.Checkpoint:
    """A checkpoint where another claim holds gpu-0, time-sliced (shared)."""
    empty = gpu_preparing.empty_gpu_checkpoint(boot_id="b")
    outcome = gpu_preparing.plan_gpu_prepare(
        f.claim("gpu-0", uid=OTHER, configs=[f.config(f.time_slicing("Long"))]),
        checkpoint=empty, inventory=f.INVENTORY, files=f.FILES, gates=f.ALL_GATES, now=1.0,
    )
    assert outcome.error is None
    return outcome.checkpoint


def test_a_time_slice_on_a_gpu_another_claim_holds_is_left_alone() -> None:
    done = (actions.SetTimeSlice(gpu_uuids=(GPU_0, GPU_1),
                                 interval=configs.TimeSliceInterval.LONG),)

    undo = gpu_preparing.plan_gpu_rollback(MINE, done=done, rollback_to=_holding_gpu_0())

    assert undo == (actions.SetTimeSlice(gpu_uuids=(GPU_1,),
                                         interval=configs.TimeSliceInterval.DEFAULT),)


def test_bound_functions_are_unbound_in_reverse_and_nothing_done_is_nothing_undone() -> None:
    empty = gpu_preparing.empty_gpu_checkpoint(boot_id="b")
    done = (actions.BindVfio(pci_bus_id="0000:40:00.0"),
            actions.BindVfio(pci_bus_id="0000:41:00.0"))

    assert gpu_preparing.plan_gpu_rollback(MINE, done=done, rollback_to=empty) == (
        actions.UnbindVfio(pci_bus_id="0000:41:00.0"),
        actions.UnbindVfio(pci_bus_id="0000:40:00.0"),
    )
    assert gpu_preparing.plan_gpu_rollback(MINE, done=(), rollback_to=empty) == ()
