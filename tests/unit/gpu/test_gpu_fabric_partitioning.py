"""Fabric Manager partitions at prepare, unprepare, rollback, the stale sweep and start-up
(gate FabricManagerPartitioning), on an 8-GPU board's table (`ZERO_BASED_BOARD`).

Covers: `plan_fabric_partitions` (no GPU, each partition size, a set that forms none, unknown
module ids); the prepare plan records the partition in PrepareStarted and activates it right
after, before any other GPU step, for full GPUs and VFIO functions (by their GPU), not for MIG
devices or admin access, not without the gate; every refusal leaves no step; the record's
`fabricPartitions` member (written only when set, strict and tolerant decoding); unprepare,
the stale undo and rollback deactivate it last, only when no other claim holding GPUs records
it; the start-up orphans; a checkpoint rebuilt from CDI specs, or entries taken over from
upstream's checkpoint, get the partition their GPUs form.
"""

from __future__ import annotations

import dataclasses
import json
import re

import gpu_prep_fixtures as f
import pytest

from core import errors, gates, models, names
from core.gpu import actions, configs, devices, fabric_partitioning, fm_partitions
from core.gpu import checkpoint_records as records
from core.gpu import preparing as gpu_preparing

TABLE = f.ZERO_BASED_BOARD
FM_GATES = models.FeatureGates(values={
    gates.TIME_SLICING_SETTINGS: True, gates.PASSTHROUGH_SUPPORT: True,
    gates.FABRIC_MANAGER_PARTITIONING: True,
})
# An HGX board: gpu-<i> sits at module i+1; vfio-0 is the function of gpu-7 (module 8).
HGX = devices.GpuInventory(
    gpus=tuple(f.gpu(i, module_id=i + 1) for i in range(8)),
    migs=(f.mig(5, 0, parent_uuid=f.gpu(5).uuid),),
    vfios=(f.vfio(0, parent_minor=7),),
)
MINE = names.ClaimUID("c0ffee00-0000-4000-8000-0000000000bb")
OTHER = names.ClaimUID("c0ffee00-0000-4000-8000-0000000000aa")


def _gpus(*modules: int) -> tuple[fabric_partitioning.ClaimGpu, ...]:
    return tuple(
        fabric_partitioning.ClaimGpu(device=f"gpu-{m - 1}", module_id=m) for m in modules
    )


def _prepare(
    claim: models.ResourceClaim,
    checkpoint: models.Checkpoint[records.GpuClaimRecord] | None = None,
    *,
    gate_values: models.FeatureGates = FM_GATES,
    table: tuple[fm_partitions.Partition, ...] | None = TABLE,
    inventory: devices.GpuInventory = HGX,
) -> gpu_preparing.GpuClaimOutcome:
    return gpu_preparing.plan_gpu_prepare(
        claim, checkpoint=checkpoint or gpu_preparing.empty_gpu_checkpoint(boot_id="b"),
        inventory=inventory, files=f.FILES, gates=gate_values, now=1.0,
        fabric_partitions=table,
    )


def _fabric_steps(steps: tuple[object, ...]) -> list[object]:
    return [s for s in steps if isinstance(
        s, actions.ActivateFabricPartition | actions.DeactivateFabricPartition
    )]


# ------------------------------------------------------------------ the decision


@pytest.mark.parametrize(("modules", "partition"), [
    ((1, 3), 3), ((6, 8), 6), ((1, 2, 3, 4), 1), ((5, 6, 7, 8), 2),
    (tuple(range(1, 9)), 0), ((4,), 10),
])
def test_the_partition_is_the_one_whose_modules_are_exactly_the_claims(
    modules: tuple[int, ...], partition: int
) -> None:
    assert fabric_partitioning.plan_fabric_partitions(
        _gpus(*modules), partitions=TABLE, claim="ml/train"
    ) == (partition,)


def test_a_claim_without_whole_gpus_activates_nothing() -> None:
    assert fabric_partitioning.plan_fabric_partitions((), partitions=TABLE, claim="ml/x") == ()


def test_gpus_that_form_no_partition_are_refused_naming_the_claim_and_what_fits() -> None:
    with pytest.raises(errors.PermanentError) as caught:
        fabric_partitioning.plan_fabric_partitions(
            _gpus(1, 2), partitions=TABLE, claim="ml/train"
        )
    message = caught.value.message
    assert message.startswith("claim ml/train: GPU modules [1, 2] do not form a Fabric Manager")
    assert "1 (4 GPUs: modules [1, 2, 3, 4])" in message
    assert "matchAttribute gpu.nvidia.com/partition<N>" in message


def test_a_gpu_without_a_module_id_is_refused_naming_it() -> None:
    gpus = (*_gpus(1), fabric_partitioning.ClaimGpu(device="gpu-2", module_id=None))
    with pytest.raises(errors.PermanentError, match=r"claim ml/train: .* GPU\(s\) gpu-2 have no"):
        fabric_partitioning.plan_fabric_partitions(gpus, partitions=TABLE, claim="ml/train")


# ------------------------------------------------------------------ prepare


def test_prepare_records_the_partition_in_prepare_started_then_activates_it_first() -> None:
    outcome = _prepare(f.claim("gpu-0", "gpu-2", configs=[f.config(f.time_slicing("Long"))]))

    assert outcome.error is None
    started, activate, *rest = outcome.steps
    assert isinstance(started, models.WriteCheckpoint)
    assert started.checkpoint.entries[f.claim().uid].state is models.ClaimState.PREPARE_STARTED
    assert started.checkpoint.entries[f.claim().uid].record.fabric_partitions == (3,)
    assert activate == actions.ActivateFabricPartition(partition_id=3)
    assert isinstance(rest[0], actions.SetTimeSlice)
    assert _fabric_steps(tuple(rest)) == []
    assert outcome.checkpoint.entries[f.claim().uid].record.fabric_partitions == (3,)


@pytest.mark.parametrize(("device_names", "partition"), [
    (("gpu-0", "gpu-1", "gpu-2", "gpu-3"), 1),
    (tuple(f"gpu-{i}" for i in range(8)), 0),
    (("gpu-6",), 13),
    # A VFIO function counts as its GPU (gpu-7, module 8): with gpu-5 it forms pair (6, 8).
    (("gpu-5", "gpu-vfio-0"), 6),
])
def test_prepare_activates_the_partition_of_full_gpus_and_vfio_functions(
    device_names: tuple[str, ...], partition: int
) -> None:
    outcome = _prepare(f.claim(*device_names))

    assert outcome.error is None
    assert _fabric_steps(outcome.steps) == [actions.ActivateFabricPartition(partition_id=partition)]


@pytest.mark.parametrize("claim", [
    f.claim(HGX.migs[0].name),
    f.claim("gpu-0", "gpu-1", admin_access=True),
], ids=["mig-device", "admin-access"])
def test_mig_devices_and_admin_access_activate_nothing(claim: models.ResourceClaim) -> None:
    outcome = _prepare(claim)

    assert outcome.error is None
    assert _fabric_steps(outcome.steps) == []
    assert outcome.checkpoint.entries[claim.uid].record.fabric_partitions == ()


@pytest.mark.parametrize(("gate_values", "table"), [
    (f.ALL_GATES, TABLE), (FM_GATES, None),
], ids=["gate-off", "no-fabric"])
def test_without_the_gate_or_a_fabric_nothing_is_activated(
    gate_values: models.FeatureGates, table: tuple[fm_partitions.Partition, ...] | None
) -> None:
    outcome = _prepare(f.claim("gpu-0", "gpu-1"), gate_values=gate_values, table=table)

    assert outcome.error is None
    assert _fabric_steps(outcome.steps) == []


def test_a_claim_whose_gpus_form_no_partition_is_refused_with_no_step() -> None:
    outcome = _prepare(f.claim("gpu-0", "gpu-1", "gpu-2"))

    assert outcome.steps == ()
    assert isinstance(outcome.error, errors.PermanentError)
    assert "claim ml/train: GPU modules [1, 2, 3] do not form a Fabric Manager partition" in (
        outcome.error.message
    )
    assert outcome.checkpoint.entries == {}


def test_a_vfio_function_whose_gpu_is_unknown_is_refused_with_no_step() -> None:
    inventory = dataclasses.replace(HGX, vfios=(f.vfio(0, parent_minor=None),))

    outcome = _prepare(f.claim("gpu-vfio-0"), inventory=inventory)

    assert outcome.steps == ()
    assert isinstance(outcome.error, errors.PermanentError)
    assert "gpu-vfio-0 have no module id" in outcome.error.message


def test_a_completed_claim_prepared_again_activates_nothing_more() -> None:
    first = _prepare(f.claim("gpu-0", "gpu-2"))

    again = _prepare(f.claim("gpu-0", "gpu-2"), first.checkpoint)

    assert again.steps == ()


# ------------------------------------------------------------------ the record


def test_the_record_writes_fabric_partitions_only_when_set_and_reads_them_back() -> None:
    plain = records.GpuClaimRecord(held=(records.held_from_name("gpu-0"),))
    with_fm = dataclasses.replace(plain, fabric_partitions=(3,))

    assert "fabricPartitions" not in records.CODEC.encode(plain)
    assert records.CODEC.encode(with_fm)["fabricPartitions"] == [3]
    assert records.CODEC.decode(records.CODEC.encode(with_fm)) == with_fm
    assert records.CODEC.decode(records.CODEC.encode(plain)) == plain
    legacy = records.CODEC.encode_legacy(with_fm)
    assert records.CODEC.decode_legacy(json.loads(json.dumps(legacy))) == with_fm


@pytest.mark.parametrize("bad", ["3", [3, "4"], [True]])
def test_a_record_whose_fabric_partitions_are_not_integers_is_refused(bad: object) -> None:
    raw = {**records.CODEC.encode(records.GpuClaimRecord()), "fabricPartitions": bad}

    with pytest.raises(ValueError, match=r"'gpu\.fabricPartitions' is not a list of integers"):
        records.CODEC.decode(raw)


# ------------------------------------------------------------------ undo


def _prepared(
    *device_names: str, uid: str = MINE,
    checkpoint: models.Checkpoint[records.GpuClaimRecord] | None = None,
) -> models.Checkpoint[records.GpuClaimRecord]:
    shared = [f.config(f.time_slicing("Long"))]
    outcome = _prepare(f.claim(*device_names, uid=uid, configs=shared), checkpoint)
    assert outcome.error is None, outcome.error
    return outcome.checkpoint


def _unprepare(
    uid: str, checkpoint: models.Checkpoint[records.GpuClaimRecord]
) -> gpu_preparing.GpuClaimOutcome:
    ref = models.ClaimRef(uid=names.ClaimUID(uid), namespace="ml", name="train")
    return gpu_preparing.plan_gpu_unprepare(ref, checkpoint=checkpoint, inventory=HGX, now=2.0)


def test_unprepare_deactivates_the_partition_last() -> None:
    outcome = _unprepare(MINE, _prepared("gpu-0", "gpu-2"))

    assert outcome.steps[-3:-2] == (actions.DeactivateFabricPartition(partition_id=3),)
    assert isinstance(outcome.steps[-2], models.WriteCheckpoint)


def test_unprepare_keeps_a_partition_another_claim_records_until_the_last_one_goes() -> None:
    both = _prepared("gpu-0", "gpu-2", uid=OTHER, checkpoint=_prepared("gpu-0", "gpu-2"))

    first = _unprepare(MINE, both)
    last = _unprepare(OTHER, first.checkpoint)

    assert _fabric_steps(first.steps) == []
    assert _fabric_steps(last.steps) == [actions.DeactivateFabricPartition(partition_id=3)]


def test_unprepare_of_a_started_claim_deactivates_what_it_recorded() -> None:
    outcome = _prepare(f.claim("gpu-4", "gpu-6", uid=MINE))
    started = outcome.steps[0]
    assert isinstance(started, models.WriteCheckpoint)

    undone = _unprepare(MINE, started.checkpoint)

    assert _fabric_steps(undone.steps) == [actions.DeactivateFabricPartition(partition_id=5)]
    tombstone = undone.checkpoint.entries[MINE]
    assert tombstone.state is models.ClaimState.PREPARE_ABORTED
    assert tombstone.record.fabric_partitions == ()


def test_the_stale_sweep_undoes_the_partition_as_unprepare_does() -> None:
    checkpoint = _prepared("gpu-1", "gpu-3")
    after = _unprepare(MINE, checkpoint).checkpoint

    undo = gpu_preparing.plan_gpu_undo(checkpoint.entries[MINE], after=after, inventory=HGX)

    assert _fabric_steps(undo) == [actions.DeactivateFabricPartition(partition_id=4)]


def test_rollback_deactivates_what_the_prepare_activated_last_unless_another_claim_records_it(
) -> None:
    done = (actions.ActivateFabricPartition(partition_id=3),
            actions.SetTimeSlice(gpu_uuids=(f.gpu(0).uuid,),
                                 interval=configs.TimeSliceInterval.LONG))
    empty = gpu_preparing.empty_gpu_checkpoint(boot_id="b")

    undo = gpu_preparing.plan_gpu_rollback(MINE, done=done, rollback_to=empty)
    kept = gpu_preparing.plan_gpu_rollback(
        MINE, done=done, rollback_to=_prepared("gpu-0", "gpu-2", uid=OTHER)
    )

    assert undo[-1] == actions.DeactivateFabricPartition(partition_id=3)
    assert _fabric_steps(kept) == []


# ------------------------------------------------------------------ start-up


def test_orphans_are_the_active_partitions_no_holding_claim_records() -> None:
    checkpoint = _prepared("gpu-0", "gpu-2")
    active = tuple(
        dataclasses.replace(p, active=p.partition_id in {2, 3, 13}) for p in TABLE
    )

    assert fabric_partitioning.orphans(active, checkpoint=checkpoint) == (2, 13)
    assert fabric_partitioning.orphans(TABLE, checkpoint=checkpoint) == ()


def test_a_started_claim_owns_its_partition_and_an_aborted_one_owns_none() -> None:
    outcome = _prepare(f.claim("gpu-4", "gpu-6", uid=MINE))
    started = outcome.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    aborted = _unprepare(MINE, started.checkpoint).checkpoint

    assert fabric_partitioning.owned(started.checkpoint) == {5}
    assert fabric_partitioning.owned(aborted) == frozenset()


def test_a_checkpoint_rebuilt_from_cdi_specs_infers_each_claims_partition() -> None:
    four = f.claim("gpu-0", "gpu-1", "gpu-2", "gpu-3", uid=MINE)
    spec = f.check_cdi(_written_spec(_prepare(four)))
    odd = f.check_cdi(_written_spec(_prepare(f.claim("gpu-4", uid=OTHER), gate_values=f.ALL_GATES)))
    modules = {g.minor: g.module_id for g in HGX.gpus if g.module_id}

    rebuilt = gpu_preparing.gpu_checkpoint_from_cdi(
        {MINE: spec, OTHER: odd}, boot_id="b", fabric_partitions=TABLE, module_ids=modules,
    )
    unknown = gpu_preparing.gpu_checkpoint_from_cdi(
        {MINE: spec}, boot_id="b", fabric_partitions=TABLE, module_ids={},
    )

    assert rebuilt.entries[MINE].record.fabric_partitions == (1,)
    assert rebuilt.entries[OTHER].record.fabric_partitions == (11,)
    assert unknown.entries[MINE].record.fabric_partitions == ()
    assert gpu_preparing.gpu_checkpoint_from_cdi(
        {MINE: spec}, boot_id="b"
    ).entries[MINE].record.fabric_partitions == ()


def _written_spec(outcome: gpu_preparing.GpuClaimOutcome) -> dict[str, object]:
    [spec] = [dict(s.spec) for s in outcome.steps if isinstance(s, models.WriteCDISpec)]
    return spec


def test_entries_taken_over_without_a_partition_get_the_one_their_gpus_form() -> None:
    recorded = _prepared("gpu-0", "gpu-2")
    bare = _prepare(f.claim("gpu-4", "gpu-5", "gpu-6", "gpu-7", uid=OTHER),
                    recorded, gate_values=f.ALL_GATES).checkpoint
    modules = {g.minor: g.module_id for g in HGX.gpus if g.module_id}

    taken = fabric_partitioning.with_inferred(bare, module_ids=modules, partitions=TABLE)

    assert bare.entries[OTHER].record.fabric_partitions == ()
    assert taken.entries[OTHER].record.fabric_partitions == (2,)
    assert taken.entries[MINE] == bare.entries[MINE]
    assert fabric_partitioning.with_inferred(
        bare, module_ids={}, partitions=TABLE
    ).entries[OTHER].record.fabric_partitions == ()


# ------------------------------------------------------------------ fabricTopologyConfig

TOPOLOGY_GATES = models.FeatureGates(values={
    **FM_GATES.values, gates.FABRIC_TOPOLOGY_SUPPORT: True,
})


def _topology_claim(*gpus: str, **topology: object) -> models.ResourceClaim:
    return f.claim(*gpus, configs=[f.config(f.gpu_config(fabricTopologyConfig=topology))])


@pytest.mark.parametrize(("topology", "activated"), [
    ({"strategy": "Auto", "partitionSize": 2}, [3]),
    ({"strategy": "Auto", "virtualizationModel": "SharedNVSwitch"}, [3]),
    ({"strategy": "Manual", "partitionIDs": [3]}, [3]),
    ({"strategy": "Disabled"}, []),
    ({"strategy": "Auto", "virtualizationModel": "FullPassthrough"}, []),
    ({"strategy": "Auto", "virtualizationModel": "VGPU"}, []),
])
def test_prepare_activates_what_the_claims_fabric_topology_config_says(
    topology: dict[str, object], activated: list[int]
) -> None:
    outcome = _prepare(_topology_claim("gpu-0", "gpu-2", **topology), gate_values=TOPOLOGY_GATES)

    assert outcome.error is None
    assert _fabric_steps(outcome.steps) == [
        actions.ActivateFabricPartition(partition_id=p) for p in activated
    ]
    record = outcome.checkpoint.entries[f.claim().uid].record
    assert record.fabric_partitions == tuple(activated)


@pytest.mark.parametrize(("topology", "message"), [
    ({"strategy": "Auto", "partitionSize": 4}, "request exactly 4 GPUs"),
    ({"strategy": "Manual", "partitionIDs": [4]}, r"partitionIDs \[4\] hold GPU modules \[2, 4\]"),
    ({"strategy": "Auto", "virtualizationModel": "FullPassthrough", "partitionSize": 4},
     "request exactly 4 GPUs"),
])
def test_prepare_refuses_an_allocation_its_fabric_topology_config_does_not_fit(
    topology: dict[str, object], message: str
) -> None:
    outcome = _prepare(_topology_claim("gpu-0", "gpu-2", **topology), gate_values=TOPOLOGY_GATES)

    assert isinstance(outcome.error, errors.PermanentError)
    assert outcome.error.message.startswith("claim ")
    assert re.search(message, outcome.error.message)
    assert outcome.steps == ()


def test_two_different_fabric_topology_configs_in_one_claim_are_refused() -> None:
    claim = f.claim(("a", "gpu-0"), ("b", "gpu-2"), configs=[
        f.config(f.gpu_config(fabricTopologyConfig={"strategy": "Disabled"}), requests=["a"]),
        f.config(f.gpu_config(fabricTopologyConfig={"strategy": "Auto"}), requests=["b"]),
    ])
    outcome = _prepare(claim, gate_values=TOPOLOGY_GATES)

    assert isinstance(outcome.error, errors.PermanentError)
    assert "2 different fabricTopologyConfigs" in outcome.error.message
    assert outcome.steps == ()
