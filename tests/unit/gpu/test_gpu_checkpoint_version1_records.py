"""The GPU record in a format version 1 checkpoint (the snapshot of a graceful stop).

Covers: a version 1 snapshot keeps a claim's dynamic MIG placements and MPS daemons, so an
unprepare after the restart still destroys its MIG devices (found by `make faults`, mode
mig: a kill after the stop's snapshot left the MIG device of an unprepared claim); items
without integer fields are dropped, as elsewhere in a version 1 record.
"""

from __future__ import annotations

from core import checkpoint, models, names
from core.gpu import checkpoint_records as records
from core.gpu import devices

UID = names.ClaimUID("11111111-2222-3333-4444-555555555555")
PLACEMENT = devices.MigPlacement(parent_minor=0, gi_profile_id=19, placement_start=0)


def _checkpoint(record: records.GpuClaimRecord) -> records.Checkpoint:
    entry = models.CheckpointEntry(
        claim_uid=UID, namespace="ns", name="claim", state=models.ClaimState.PREPARE_COMPLETED,
        record=record,
    )
    empty = checkpoint.empty(boot_id="boot", codec=records.CODEC)
    return checkpoint.with_entry(empty, entry)


def test_a_version_1_snapshot_keeps_the_dynamic_mig_placements_and_mps_daemons() -> None:
    record = records.GpuClaimRecord(
        held=(records.held_from_name("gpu-0-mig-1g10gb-19-0"),),
        dynamic_migs=(PLACEMENT,),
        mps=(records.MpsRecord(daemon_id="d1", gpu_uuids=("GPU-1",), devices=("gpu-1",)),),
    )

    decoded = checkpoint.decode(checkpoint.encode(_checkpoint(record), version=1), records.CODEC)

    assert decoded.entries[UID].record == record


def test_a_version_1_placement_without_integer_fields_is_dropped() -> None:
    raw = {"gpu": {"devices": [], "timeSliced": [], "vfioAPIDevice": "", "dynamicMIG": [
        {"gpuMinor": 0, "giProfileID": 19, "placementStart": 0},
        {"gpuMinor": True, "giProfileID": 19, "placementStart": 0}, "junk"]}}

    assert records.CODEC.decode_legacy(raw).dynamic_migs == (PLACEMENT,)
