"""Start-up teardown of unknown MIG devices (upstream's DestroyUnknownMIGDevices).

Covers: devices held by PrepareCompleted claims are kept (named in the prepared devices or
only in the GPU record); devices of PrepareStarted or PrepareAborted claims and devices no
claim names are destroyed; an empty checkpoint destroys all; no MIG devices, nothing to do.
"""

from __future__ import annotations

from adapters import nvml
from core import models, names
from core.gpu import checkpoint_records as records
from core.gpu import devices, dynamic_mig

# The a100-mig node's GPU 0: 2g.10gb at 0, 1g.5gb at 2 and 3, 3g.20gb at 4.
_2G = "gpu-0-mig-2g10gb-14-0"
_1G_2 = "gpu-0-mig-1g5gb-19-2"
_1G_3 = "gpu-0-mig-1g5gb-19-3"
_3G = "gpu-0-mig-3g20gb-9-4"


def _inventory() -> devices.GpuInventory:
    return nvml.simulated_gpus("a100-mig").gpu_inventory()


def _entry(
    uid: str, state: models.ClaimState, *, prepared: tuple[str, ...] = (),
    held: tuple[str, ...] = (),
) -> records.Entry:
    return models.CheckpointEntry(
        claim_uid=names.ClaimUID(uid), namespace="ns", name=uid, state=state,
        record=records.GpuClaimRecord(held=tuple(records.held_from_name(n) for n in held)),
        devices=tuple(
            models.PreparedDevice(
                request_names=("r",), pool_name="node", device_name=n, cdi_device_ids=()
            )
            for n in prepared
        ),
    )


def _checkpoint(*entries: records.Entry) -> records.Checkpoint:
    empty = records.empty(boot_id="boot")
    return models.Checkpoint(
        boot_id=empty.boot_id, codec=empty.codec,
        entries={entry.claim_uid: entry for entry in entries},
    )


def _names(placements: tuple[devices.MigPlacement, ...]) -> list[str]:
    by_placement = {devices.MigPlacement.of(m): m.name for m in _inventory().migs}
    return [by_placement[p] for p in placements]


def test_only_completed_claims_keep_their_mig_devices() -> None:
    checkpoint = _checkpoint(
        _entry("a", models.ClaimState.PREPARE_COMPLETED, prepared=(_1G_2,), held=(_1G_2,)),
        _entry("b", models.ClaimState.PREPARE_COMPLETED, held=(_3G,)),
        _entry("c", models.ClaimState.PREPARE_STARTED, prepared=(_2G,), held=(_2G,)),
        _entry("d", models.ClaimState.PREPARE_ABORTED, held=(_1G_3,)),
    )
    assert dynamic_mig.kept_mig_names(checkpoint) == {_1G_2, _3G}
    assert _names(dynamic_mig.unknown_mig_devices(_inventory(), checkpoint)) == [_2G, _1G_3]


def test_an_empty_checkpoint_destroys_every_mig_device() -> None:
    unknown = dynamic_mig.unknown_mig_devices(_inventory(), _checkpoint())
    assert unknown == tuple(sorted(devices.MigPlacement.of(m) for m in _inventory().migs))
    assert len(unknown) == 4


def test_a_node_without_mig_devices_has_nothing_to_destroy() -> None:
    inventory = nvml.simulated_gpus("hgx-h100").gpu_inventory()
    assert dynamic_mig.unknown_mig_devices(inventory, _checkpoint()) == ()


def test_full_gpus_held_by_completed_claims_change_nothing() -> None:
    checkpoint = _checkpoint(_entry("a", models.ClaimState.PREPARE_COMPLETED, held=("gpu-1",)))
    assert len(dynamic_mig.unknown_mig_devices(_inventory(), checkpoint)) == 4
