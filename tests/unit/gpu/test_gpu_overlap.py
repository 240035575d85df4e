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


PLAIN = '{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}'
SLICED = ('{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":'
          '{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}')


def share(held: records.HeldDevice, config: str = PLAIN) -> records.HeldDevice:
    """`held` as a consumable share (its result had a shareID) under `config`."""
    return records.HeldDevice(**{**held.__dict__, "consumable": True, "config": config})


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
    # consumable shares: equal normalized configs share, others do not
    (share(GPU0), share(GPU0), None),
    (share(MIG0A), share(MIG0A), None),
    (share(shared(GPU0), SLICED), share(shared(GPU0), SLICED), None),
    (share(GPU0), share(GPU0, SLICED), Conflict.CONFIG_DIFFERS),
    (share(shared(GPU0), SLICED), share(shared(GPU0), SLICED.replace("Long", "Short")),
     Conflict.CONFIG_DIFFERS),
    (share(GPU0), GPU0, Conflict.EXCLUSIVE),
    (GPU0, share(GPU0), Conflict.EXCLUSIVE),
    (share(shared(GPU0), SLICED), shared(GPU0), None),
    (admin(GPU0), share(GPU0), None),
    (share(GPU0), share(GPU1), None),
    (share(GPU0), share(MIG0A), Conflict.WHOLE_AND_PART),
    (share(MIG0A), share(MIG0B), None),
    (share(MIG0A), VFIO0, Conflict.PASSTHROUGH),
]


def label(held: records.HeldDevice) -> str:
    return (f"{held.name}{'+s' if held.shared else ''}{'+a' if held.admin_access else ''}"
            f"{'+c' + str(len(held.config)) if held.consumable else ''}")


@pytest.mark.parametrize(("mine", "theirs", "verdict"), TABLE,
                         ids=[f"{label(m)}-vs-{label(t)}" for m, t, _ in TABLE])
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


def test_every_conflict_the_rules_know_appears_in_the_table() -> None:
    assert {verdict for _, _, verdict in TABLE} == {*Conflict, None}


def test_the_message_for_shares_with_different_configs_names_both_and_the_fix() -> None:
    text = overlap.message(overlap.Overlap(mine=share(GPU0), theirs=share(GPU0, SLICED),
                                           conflict=Conflict.CONFIG_DIFFERS),
                           holder="claim ml/first")
    assert text.startswith("device gpu-0 is already prepared on this node for claim ml/first "
                           "as a consumable share with another config (")
    assert SLICED in text and f"this claim's: {PLAIN}" in text
    assert "give this claim the same opaque config" in text
