"""A GPU and its passthrough function are one device: while one is prepared the other is not
published (gate PassthroughSupport), derived from the checkpoint.

Covers: a held `gpu-vfio-N` hides the full GPU at its PCI address (NVML's and sysfs's
spellings of the address agree), or at its recorded minor; a held full GPU hides its
function; admin access and aborted claims hide nothing; a started claim hides already; the
slice planner leaves hidden devices out and keeps the rest; discovery gives each function the
minor of the GPU NVML shows at its address.
"""

from __future__ import annotations

import dataclasses

import gpu_prep_fixtures as f

from core import models, names
from core.gpu import checkpoint_records as records
from core.gpu import devices, passthrough
from core.gpu import slices as gpu_slices

# gpu-1 (NVML spells 00000000:19:00.0) is the same PCI function as gpu-vfio-0 (sysfs spells
# 0000:19:00.0); gpu-0 has no function published.
GPU0 = f.gpu(0)
GPU1 = f.gpu(1, pci_bus_id="00000000:19:00.0")
VFIO0 = f.vfio(0, pci_bus_id="0000:19:00.0", parent_minor=None)
INVENTORY = devices.GpuInventory(gpus=(GPU0, GPU1), vfios=(VFIO0,))
GATES = models.FeatureGates(values={"PassthroughSupport": True})


def held_vfio(**changes: object) -> records.HeldDevice:
    values: dict[str, object] = {
        "name": VFIO0.name, "kind": devices.VFIO_TYPE, "pci_bus_id": VFIO0.pci_bus_id,
    }
    values.update(changes)
    return records.HeldDevice(**values)  # type: ignore[arg-type]


def held_gpu(gpu: devices.GpuInfo, **changes: object) -> records.HeldDevice:
    values: dict[str, object] = {
        "name": gpu.name, "kind": devices.GPU_TYPE, "gpu_minor": gpu.minor, "uuid": gpu.uuid,
    }
    values.update(changes)
    return records.HeldDevice(**values)  # type: ignore[arg-type]


def checkpoint(*entries: tuple[models.ClaimState, records.HeldDevice]) -> records.Checkpoint:
    cp = records.empty(boot_id="boot-1")
    found = {}
    for i, (state, held) in enumerate(entries):
        uid = names.ClaimUID(f"c0ffee00-0000-4000-8000-00000000000{i}")
        found[uid] = models.CheckpointEntry(
            claim_uid=uid, namespace="ml", name=f"c{i}", state=state,
            record=records.GpuClaimRecord(held=(held,)),
        )
    return dataclasses.replace(cp, entries=found)


def test_a_prepared_passthrough_function_hides_the_gpu_at_its_pci_address() -> None:
    assert passthrough.hidden_siblings(INVENTORY, [held_vfio()]) == {GPU1.name}


def test_a_function_recorded_without_address_hides_the_gpu_of_its_minor() -> None:
    held = held_vfio(pci_bus_id="", gpu_minor=0)
    assert passthrough.hidden_siblings(INVENTORY, [held]) == {GPU0.name}


def test_a_prepared_full_gpu_hides_its_passthrough_function() -> None:
    assert passthrough.hidden_siblings(INVENTORY, [held_gpu(GPU1)]) == {VFIO0.name}
    assert passthrough.hidden_siblings(INVENTORY, [held_gpu(GPU0)]) == frozenset()


def test_admin_access_hides_nothing() -> None:
    held = [held_vfio(admin_access=True), held_gpu(GPU1, admin_access=True)]
    assert passthrough.hidden_siblings(INVENTORY, held) == frozenset()


def test_started_and_completed_claims_hold_aborted_ones_do_not() -> None:
    cp = checkpoint(
        (models.ClaimState.PREPARE_STARTED, held_vfio()),
        (models.ClaimState.PREPARE_ABORTED, held_gpu(GPU1)),
    )
    assert passthrough.held_devices(cp) == (held_vfio(),)
    assert passthrough.hidden_siblings(INVENTORY, passthrough.held_devices(cp)) == {GPU1.name}


def test_the_slice_leaves_hidden_devices_out_and_keeps_the_rest() -> None:
    names_ = [d["name"] for d in gpu_slices.plan_gpu_devices(INVENTORY, gates=GATES)]
    assert names_ == ["gpu-0", "gpu-1", "gpu-vfio-0"]
    hidden = passthrough.hidden_siblings(INVENTORY, [held_vfio()])
    shown = gpu_slices.plan_gpu_devices(INVENTORY, gates=GATES, hidden=hidden)
    assert [d["name"] for d in shown] == ["gpu-0", "gpu-vfio-0"]
    hidden = passthrough.hidden_siblings(INVENTORY, [held_gpu(GPU1)])
    shown = gpu_slices.plan_gpu_devices(INVENTORY, gates=GATES, hidden=hidden)
    assert [d["name"] for d in shown] == ["gpu-0", "gpu-1"]


def test_discovery_gives_each_function_the_minor_of_the_gpu_at_its_address() -> None:
    bound = f.vfio(1, pci_bus_id="0000:77:00.0", parent_minor=None)
    found = passthrough.with_parents((VFIO0, bound), (GPU0, GPU1))
    assert [v.parent_minor for v in found] == [1, None]
