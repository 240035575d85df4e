"""Upstream's GPU-plugin claims as entries of ours, for a takeover. Pure.

Upstream records, per prepared device, a `gpu` (`info.uuid`), a `mig` or a `vfio` device and,
per device group, `configState.timeSliceApplied` when it set a time-slice on the group's
full GPUs (reset on unprepare, as our own entries record in `time_sliced`).

A `vfio` device's `info` holds the function's UUID (upstream derives it from the PCI address,
as our discovery does) and, only in releases after 25.12.0, its `pciBusID`. Our unprepare
gives the function back to the nvidia driver by PCI address, so the address is recovered at
adoption: upstream's, else the discovered function with that UUID, else (no UUID recorded)
the one with that device name. A function found nowhere is still adopted (its devices stay
held) with a Notice saying what to rebind by hand.

MPS (`configState.mpsControlDaemonID`): upstream runs a control daemon per claim (Deployment
`mps-control-daemon-<id>` in the driver's namespace, pipe/shm/log directories under
`<plugin dir>/mps/<id>`, the GPUs in compute mode EXCLUSIVE_PROCESS). This driver does not
manage MPS yet, so such a claim is adopted as prepared and a Notice says that its MPS sharing
stays as upstream left it, and what to clean up once its pods are gone.
"""

from __future__ import annotations

from typing import Final

from core import models, upstream_checkpoint
from core.gpu import checkpoint_records, devices

VFIO_ADDRESS_UNKNOWN_REASON: Final = "UpstreamVfioAddressUnknown"
MPS_LEFT_AS_IS_REASON: Final = "UpstreamMPSLeftAsIs"


def adopt(
    upstream: upstream_checkpoint.UpstreamCheckpoint,
    *,
    inventory: devices.GpuInventory,
    boot_id: str,
    now: float,
) -> upstream_checkpoint.Adoption[checkpoint_records.GpuClaimRecord]:
    """Our checkpoint holding every claim of `upstream` with the devices (and CDI ids) it
    answered, and the notices about what is adopted but not managed; `boot_id` is used where
    upstream's file names none. `inventory` is what discovery finds now (VFIO addresses)."""
    entries = {}
    notices: list[upstream_checkpoint.Notice] = []
    by_uuid = {v.uuid: v for v in inventory.vfios if v.uuid}
    by_name = {v.name: v for v in inventory.vfios}
    for claim in upstream.claims:
        held = []
        sliced = []
        unresolved = []
        for device in claim.devices:
            named = checkpoint_records.held_from_name(device.device.device_name)
            uuid = device.info.get("uuid")
            if device.kind == "gpu" and isinstance(uuid, str) and uuid:
                named = checkpoint_records.HeldDevice(
                    name=named.name, kind=named.kind, gpu_minor=named.gpu_minor, uuid=uuid
                )
                if device.config_state.get("timeSliceApplied") is True:
                    sliced.append(uuid)
            elif device.kind == "vfio":
                named = _vfio_held(device, by_uuid=by_uuid, by_name=by_name)
                if not named.pci_bus_id:
                    unresolved.append(device)
            held.append(named)
        record = checkpoint_records.GpuClaimRecord(held=tuple(held), time_sliced=tuple(sliced))
        entries[claim.claim_uid] = upstream_checkpoint.entry(claim, record=record, now=now)
        if unresolved:
            notices.append(_vfio_notice(claim, unresolved))
        mps = sorted({
            str(d.config_state.get("mpsControlDaemonID")) for d in claim.devices
            if d.config_state.get("mpsControlDaemonID")
        })
        if mps:
            notices.append(_mps_notice(claim, mps))
    return upstream_checkpoint.Adoption(
        checkpoint=models.Checkpoint(
            boot_id=upstream.boot_id or boot_id, codec=checkpoint_records.CODEC, entries=entries
        ),
        notices=tuple(notices),
    )


def _vfio_held(
    device: upstream_checkpoint.UpstreamDevice,
    *,
    by_uuid: dict[str, devices.VfioDeviceInfo],
    by_name: dict[str, devices.VfioDeviceInfo],
) -> checkpoint_records.HeldDevice:
    name = device.device.device_name
    recorded = device.info.get("pciBusID")
    uuid = device.info.get("uuid")
    # NB: the name only where upstream recorded no UUID: a UUID found nowhere means the
    # function is not discovered now, and the one of that name here may be another's.
    found = by_uuid.get(uuid) if isinstance(uuid, str) and uuid else by_name.get(name)
    if isinstance(recorded, str) and recorded:
        found_here = found if found is not None and found.pci_bus_id == recorded else None
        return checkpoint_records.HeldDevice(
            name=name, kind=devices.VFIO_TYPE, pci_bus_id=recorded,
            gpu_minor=found_here.parent_minor if found_here is not None else None,
        )
    if found is None:
        return checkpoint_records.HeldDevice(name=name, kind=devices.VFIO_TYPE)
    return checkpoint_records.HeldDevice(
        name=name, kind=devices.VFIO_TYPE, pci_bus_id=found.pci_bus_id,
        gpu_minor=found.parent_minor,
    )


def _vfio_notice(
    claim: upstream_checkpoint.UpstreamClaim,
    unresolved: list[upstream_checkpoint.UpstreamDevice],
) -> upstream_checkpoint.Notice:
    listed = ", ".join(
        f"{d.device.device_name} (upstream UUID {d.info.get('uuid') or 'none'})"
        for d in unresolved
    )
    return upstream_checkpoint.Notice(
        claim_uid=claim.claim_uid,
        reason=VFIO_ADDRESS_UNKNOWN_REASON,
        message=(
            f"adopted claim {upstream_checkpoint.claim_label(claim)} from the upstream plugin "
            f"holds VFIO function(s) {listed} that discovery does not find on this node, so "
            "unprepare cannot give them back to the nvidia driver: once the claim is "
            "unprepared, unbind each from vfio-pci and bind it to nvidia by hand "
            "(/sys/bus/pci/drivers/vfio-pci/unbind, then /sys/bus/pci/drivers/nvidia/bind)"
        ),
    )


def _mps_notice(
    claim: upstream_checkpoint.UpstreamClaim, daemon_ids: list[str]
) -> upstream_checkpoint.Notice:
    deployments = ", ".join(f"mps-control-daemon-{i}" for i in daemon_ids)
    dirs = ", ".join(f"<plugin dir>/mps/{i}" for i in daemon_ids)
    return upstream_checkpoint.Notice(
        claim_uid=claim.claim_uid,
        reason=MPS_LEFT_AS_IS_REASON,
        message=(
            f"adopted claim {upstream_checkpoint.claim_label(claim)} from the upstream plugin "
            f"uses MPS sharing: this driver does not manage MPS yet, so the claim stays "
            f"prepared and its MPS sharing stays as upstream left it (Deployment {deployments} "
            f"in the driver's namespace, directories {dirs}); unprepare removes its CDI spec "
            "but not these: once its pods are gone, delete the Deployment, unmount the shm "
            "directory, remove the directory and set the GPUs' compute mode back to DEFAULT"
        ),
    )
