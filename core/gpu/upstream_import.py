"""Upstream's GPU-plugin claims as entries of ours, for a takeover. Pure.

Upstream records, per prepared device, a `gpu` (`info.uuid`), a `mig` or a `vfio` device and,
per device group, `configState.timeSliceApplied` when it set a time-slice on the group's
full GPUs (reset on unprepare, as our own entries record in `time_sliced`).
"""

from __future__ import annotations

from core import models, upstream_checkpoint
from core.gpu import checkpoint_records


def adopt(
    upstream: upstream_checkpoint.UpstreamCheckpoint, *, boot_id: str, now: float
) -> checkpoint_records.Checkpoint:
    """Our checkpoint holding every claim of `upstream` with the devices (and CDI ids) it
    answered; `boot_id` is used where upstream's file names none."""
    entries = {}
    for claim in upstream.claims:
        held = []
        sliced = []
        for device in claim.devices:
            named = checkpoint_records.held_from_name(device.device.device_name)
            uuid = device.info.get("uuid")
            if device.kind == "gpu" and isinstance(uuid, str) and uuid:
                named = checkpoint_records.HeldDevice(
                    name=named.name, kind=named.kind, gpu_minor=named.gpu_minor, uuid=uuid
                )
                if device.config_state.get("timeSliceApplied") is True:
                    sliced.append(uuid)
            held.append(named)
        record = checkpoint_records.GpuClaimRecord(held=tuple(held), time_sliced=tuple(sliced))
        entries[claim.claim_uid] = upstream_checkpoint.entry(claim, record=record, now=now)
    return models.Checkpoint(
        boot_id=upstream.boot_id or boot_id, codec=checkpoint_records.CODEC, entries=entries
    )
