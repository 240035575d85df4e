"""Upstream's ComputeDomain-plugin claims as entries of ours, for a takeover. Pure.

Upstream records, per prepared device, a `channel` (`info.id`: the IMEX channel) or a
`daemon` (an IMEX daemon's own claim, no channel) and, per device group, the ComputeDomain in
`configState.ComputeDomain`. Upstream has no per-claim IMEX mode: an adopted claim counts as
prepared under the mode this plugin runs in (upstream's plugin runs driver-managed IMEX).
"""

from __future__ import annotations

from core import models, upstream_checkpoint
from core.computedomain import checkpoint_records


def adopt(
    upstream: upstream_checkpoint.UpstreamCheckpoint,
    *,
    mode: models.IMEXMode,
    isolation: models.Isolation,
    boot_id: str,
    now: float,
) -> upstream_checkpoint.Adoption[checkpoint_records.ComputeDomainClaimRecord]:
    """Our checkpoint holding every claim of `upstream` with the devices (and CDI ids) it
    answered (nothing here needs a notice); `boot_id` is used where upstream's file names
    none."""
    entries = {}
    for claim in upstream.claims:
        domain = next(
            (str(d.config_state.get("ComputeDomain")) for d in claim.devices
             if d.config_state.get("ComputeDomain")),
            "",
        )
        channels = tuple(sorted(
            int(d.info["id"]) for d in claim.devices
            if d.kind == "channel" and type(d.info.get("id")) is int
        ))
        record = checkpoint_records.ComputeDomainClaimRecord(
            mode=mode, isolation=isolation, domain_id=domain, channel_ids=channels
        )
        entries[claim.claim_uid] = upstream_checkpoint.entry(claim, record=record, now=now)
    return upstream_checkpoint.Adoption(checkpoint=models.Checkpoint(
        boot_id=upstream.boot_id or boot_id, codec=checkpoint_records.CODEC, entries=entries
    ))
