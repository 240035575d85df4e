"""What the ComputeDomain half can prove about prepared claims when its checkpoint is lost.

The CDI spec files the plugin wrote are the evidence: each names the claim (file name), the
channels it holds (device names), and its ComputeDomain (`COMPUTE_DOMAIN_UUID` in the
devices' env, `core.cdi.DOMAIN_ENV`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core import cdi, models, names
from core.computedomain import checkpoint_records as records


def rebuild_from_cdi(
    *,
    boot_id: str,
    config: models.DriverConfig,
    claim_specs: Mapping[names.ClaimUID, Mapping[str, Any]],
    now: float,
    unreadable: Iterable[names.ClaimUID] = (),
) -> records.Checkpoint:
    """Entries provable from the CDI specs on disk after the checkpoint was lost or corrupt.

    Each spec proves a PrepareCompleted claim with the channels, CDI ids and ComputeDomain
    (`COMPUTE_DOMAIN_UUID`) it names. What a spec cannot prove stays empty: namespace, name
    and the allocation (pool, device, request). Such an entry blocks its channels for other
    domains until the kubelet unprepares it, and a repeated prepare of it is planned afresh.
    A spec file of ours that cannot be read (`unreadable`) proves only that something was
    prepared: its entry holds every channel until the claim is unprepared.
    """
    entries = {
        uid: _entry_from_spec(uid, spec, config=config, now=now)
        for uid, spec in sorted(claim_specs.items())
    }
    for uid in sorted(unreadable):
        entries[uid] = models.CheckpointEntry(
            claim_uid=uid, namespace="", name="", state=models.ClaimState.PREPARE_COMPLETED,
            record=records.ComputeDomainClaimRecord(
                mode=config.mode, isolation=config.isolation, domain_id="",
                channel_ids=tuple(range(names.MAX_CHANNEL_ID + 1)),
            ),
            updated_at=now,
        )
    return models.Checkpoint(boot_id=boot_id, codec=records.CODEC, entries=entries)


def _entry_from_spec(
    uid: names.ClaimUID, spec: Mapping[str, Any], *, config: models.DriverConfig, now: float
) -> records.Entry:
    channel_ids: list[int] = []
    cdi_ids: list[str] = []
    domain_id = ""
    mode = config.mode
    for device in _spec_devices(spec):
        name = str(device.get("name", ""))
        channel = _channel_of(uid, name)
        if channel is not None:
            channel_ids.append(channel)
        elif name == cdi.daemon_device_name(uid):
            # Only driver-managed mode prepares daemon claims.
            mode = models.IMEXMode.DRIVER_MANAGED
        else:
            continue
        domain_id = _device_domain(device) or domain_id
        cdi_ids.append(cdi.qualified_name(name))
    isolation = config.isolation
    if mode is not config.mode:
        isolation = models.Isolation.DOMAIN
    devices = (
        (models.PreparedDevice(request_names=(), pool_name="", device_name="",
                               cdi_device_ids=tuple(cdi_ids)),)
        if cdi_ids else ()
    )
    return models.CheckpointEntry(
        claim_uid=uid, namespace="", name="", state=models.ClaimState.PREPARE_COMPLETED,
        record=records.ComputeDomainClaimRecord(
            mode=mode, isolation=isolation, domain_id=domain_id,
            channel_ids=tuple(sorted(set(channel_ids))),
        ),
        devices=devices, updated_at=now,
    )


def _spec_devices(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return ()
    return [d for d in devices if isinstance(d, Mapping)]


def _channel_of(uid: str, device_name: str) -> int | None:
    prefix = cdi.channel_device_name(uid, 0)[:-1]
    suffix = device_name.removeprefix(prefix)
    if suffix == device_name or not suffix.isdigit() or not suffix.isascii():
        return None
    channel = int(suffix)
    return channel if channel <= names.MAX_CHANNEL_ID else None


def _device_domain(device: Mapping[str, Any]) -> str:
    edits = device.get("containerEdits")
    env = edits.get("env") if isinstance(edits, Mapping) else None
    for item in env if isinstance(env, list) else ():
        key, _, value = str(item).partition("=")
        if key == cdi.DOMAIN_ENV:
            return value
    return ""
