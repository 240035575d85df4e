"""The GPU half's overlap rules as one table: which two held devices may be prepared at once."""

from __future__ import annotations

import pytest

from core.gpu import checkpoint_records as records
from core.gpu import devices, overlap
from core.gpu.overlap import Conflict

GPU0 = records.HeldDevice(name="gpu-0", kind=devices.GPU_TYPE, gpu_minor=0)
GPU1 = records.HeldDevice(name="gpu-1", kind=devices.GPU_TYPE, gpu_minor=1)
MIG0A = records.HeldDevice(name="gpu-0-mig-a", kind=devices.MIG_TYPE, gpu_minor=0)
MIG0B = records.HeldDevice(name="gpu-0-mig-b", kind=devices.MIG_TYPE, gpu_minor=0)
VFIO0 = records.HeldDevice(name="gpu-vfio-0", kind=devices.VFIO_TYPE, gpu_minor=0)
UNKNOWN = records.HeldDevice(name="recovered", kind="")


def shared(held: records.HeldDevice) -> records.HeldDevice:
    return records.HeldDevice(**{**held.__dict__, "shared": True})


def admin(held: records.HeldDevice) -> records.HeldDevice:
    return records.HeldDevice(**{**held.__dict__, "admin_access": True})


TABLE = [
    # (mine, theirs, verdict)
    (GPU0, GPU0, Conflict.EXCLUSIVE),
    (shared(GPU0), GPU0, Conflict.EXCLUSIVE),
    (GPU0, shared(GPU0), Conflict.EXCLUSIVE),
    (shared(GPU0), shared(GPU0), None),
    (admin(GPU0), GPU0, None),
    (GPU0, admin(GPU0), None),
    (admin(GPU0), VFIO0, None),
    (VFIO0, VFIO0, Conflict.EXCLUSIVE),
    (VFIO0, GPU0, Conflict.PASSTHROUGH),
    (MIG0A, VFIO0, Conflict.PASSTHROUGH),
    (GPU0, MIG0A, Conflict.WHOLE_AND_PART),
    (MIG0A, GPU0, Conflict.WHOLE_AND_PART),
    (shared(GPU0), shared(MIG0A), Conflict.WHOLE_AND_PART),
    (MIG0A, MIG0B, None),
    (MIG0A, MIG0A, Conflict.EXCLUSIVE),
    (GPU0, GPU1, None),
    (UNKNOWN, GPU0, None),
    (UNKNOWN, UNKNOWN, Conflict.EXCLUSIVE),
]


@pytest.mark.parametrize(("mine", "theirs", "verdict"), TABLE,
                         ids=[f"{m.name}{'+s' if m.shared else ''}{'+a' if m.admin_access else ''}"
                              f"-vs-{t.name}{'+s' if t.shared else ''}"
                              f"{'+a' if t.admin_access else ''}" for m, t, _ in TABLE])
def test_overlap_rules(mine: records.HeldDevice, theirs: records.HeldDevice,
                       verdict: Conflict | None) -> None:
    assert overlap.conflict(mine, theirs) is verdict


@pytest.mark.parametrize(("mine", "theirs"), [(m, t) for m, t, _ in TABLE])
def test_the_rules_are_symmetric(mine: records.HeldDevice, theirs: records.HeldDevice) -> None:
    assert overlap.conflict(mine, theirs) is overlap.conflict(theirs, mine)


def test_the_message_names_the_holder_and_the_fix() -> None:
    text = overlap.message(overlap.Overlap(mine=GPU0, theirs=GPU0, conflict=Conflict.EXCLUSIVE),
                           holder="claim ml/other")
    assert text == ("device gpu-0 is already prepared on this node for claim ml/other; to share "
                    "it, give both claims a config with sharing (strategy TimeSlicing); otherwise "
                    "wait until that claim is unprepared")
    text = overlap.message(overlap.Overlap(mine=MIG0A, theirs=VFIO0,
                                           conflict=Conflict.PASSTHROUGH), holder="claim ml/vm")
    assert "the same physical GPU as gpu-vfio-0" in text and "cannot be shared" in text
