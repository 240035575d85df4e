"""Prepare and unprepare of dynamic MIG partitions (gate DynamicMIG), planned and executed.

Covers: a partition is recorded in PrepareStarted, then created, then its spec written from the
created device, then PrepareCompleted; the spec holds the created device's parent and
capability nodes (CDI schema checked) beside a full GPU of the same claim; refusals (gate off,
a placement the GPU does not offer, a GPU that is not partitionable, no nvidia-caps major, a
partition another claim holds) leave no step; unprepare of a completed or started claim, the
rollback of an abandoned prepare and the stale sweep destroy it; records without it encode
byte for byte as before, with it round-trip, malformed ones are refused; the executor's
wiring errors, a create that replaces a leftover, and a spec step with no created device.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import gpu_prep_fixtures as f
import pytest

from adapters import nvml
from core import checkpoint as checkpoints
from core import errors, executing, gates, models, names
from core.gpu import actions, devices, dynamic_mig
from core.gpu import checkpoint_records as records
from core.gpu import preparing as p

EMPTY = p.empty_gpu_checkpoint(boot_id="boot-1")
GATES = models.FeatureGates(values={gates.DYNAMIC_MIG: True})
_1G = "gpu-0-mig-1g10gb-19-3"
_1G_PLACEMENT = devices.MigPlacement(parent_minor=0, gi_profile_id=19, placement_start=3)


def _node() -> nvml.SimulatedGpus:
    return nvml.simulated_gpus("hgx-h100")


def _prepare(
    claim: models.ResourceClaim,
    *,
    sim: nvml.SimulatedGpus | None = None,
    checkpoint: records.Checkpoint = EMPTY,
    the_gates: models.FeatureGates = GATES,
    files: devices.DriverFiles = f.FILES,
) -> p.GpuClaimOutcome:
    return p.plan_gpu_prepare(
        claim, checkpoint=checkpoint, inventory=(sim or _node()).gpu_inventory(), files=files,
        gates=the_gates, now=100.0,
    )


def _kinds(steps: tuple[object, ...]) -> list[str]:
    return [type(s).__name__ for s in steps]


class _CDI:
    def __init__(self) -> None:
        self.specs: dict[str, dict[str, Any]] = {}

    def write(self, claim_uid: names.ClaimUID, spec: dict[str, Any]) -> None:
        self.specs[claim_uid] = f.check_cdi(spec)

    def delete(self, claim_uid: names.ClaimUID) -> None:
        self.specs.pop(claim_uid, None)


def _run(
    steps: tuple[object, ...], sim: nvml.SimulatedGpus, cdi: _CDI,
    created: dict[devices.MigPlacement, devices.MigDeviceInfo],
) -> None:
    gpu_steps = [s for s in steps if isinstance(s, actions.GpuAction)]
    executing.execute_gpu_actions(
        gpu_steps, time_slicer=None, vfio=None, mig=sim, cdi=cdi,  # type: ignore[arg-type]
        created=created,
    )


def _placements(sim: nvml.SimulatedGpus) -> set[devices.MigPlacement]:
    return {devices.MigPlacement.of(m) for m in sim.gpu_inventory().migs}


# ---------------------------------------------------------------- prepare


def test_placement_is_recorded_then_created_then_its_spec_then_completed() -> None:
    outcome = _prepare(f.claim(_1G))
    assert outcome.error is None, outcome.error
    assert _kinds(outcome.steps) == [
        "WriteCheckpoint", "CreateMigDevice", "WriteMigCDISpec", "WriteCheckpoint",
    ]
    started = outcome.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    entry = started.checkpoint.entries[f.claim(_1G).uid]
    assert entry.state is models.ClaimState.PREPARE_STARTED
    assert entry.record.dynamic_migs == (_1G_PLACEMENT,)
    assert [(h.name, h.kind, h.gpu_minor) for h in entry.record.held] == [(_1G, "mig", 0)]
    assert outcome.steps[1] == actions.CreateMigDevice(placement=_1G_PLACEMENT)
    assert [d.device_name for d in outcome.devices] == [_1G]


def test_executed_plan_creates_the_device_and_gives_its_nodes() -> None:
    sim, cdi, created = _node(), _CDI(), {}
    claim = f.claim(_1G, "gpu-1")
    outcome = _prepare(claim, sim=sim)
    _run(outcome.steps, sim, cdi, created)
    mig = created[_1G_PLACEMENT]
    assert _placements(sim) == {_1G_PLACEMENT}
    spec = cdi.specs[claim.uid]
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert list(by_name) == [f"{claim.uid}-{_1G}", f"{claim.uid}-gpu-1"]  # request order
    assert [n["path"] for n in by_name[f"{claim.uid}-{_1G}"]] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
        f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
    ]
    assert spec["containerEdits"]["deviceNodes"]  # the control nodes, as for static MIG


def test_a_completed_claim_prepared_again_creates_nothing() -> None:
    claim = f.claim(_1G)
    outcome = _prepare(claim)
    again = _prepare(claim, checkpoint=outcome.checkpoint)
    assert again.steps == ()
    assert again.devices == outcome.devices


@pytest.mark.parametrize(("claim", "the_gates", "words"), [
    (f.claim(_1G), models.FeatureGates(values={}), "not on this node"),
    (f.claim("gpu-0-mig-1g10gb-19-7"), GATES, "not on this node"),  # no such placement
    (f.claim("gpu-9-mig-1g10gb-19-0"), GATES, "not on this node"),  # no such GPU
])
def test_a_partition_the_node_does_not_offer_is_refused(
    claim: models.ResourceClaim, the_gates: models.FeatureGates, words: str
) -> None:
    outcome = _prepare(claim, the_gates=the_gates)
    assert isinstance(outcome.error, errors.PermanentError)
    assert words in str(outcome.error)
    assert outcome.steps == ()


def test_a_gpu_that_is_not_partitionable_offers_no_partition() -> None:
    # The a100-mig node's GPU 1: Ampere, MIG off (turning it on needs a reset).
    sim = nvml.simulated_gpus("a100-mig")
    outcome = _prepare(f.claim("gpu-1-mig-1g5gb-19-0"), sim=sim)
    assert isinstance(outcome.error, errors.PermanentError)
    assert outcome.steps == ()


def test_without_the_nvidia_caps_major_nothing_is_created() -> None:
    outcome = _prepare(f.claim(_1G), files=dataclasses.replace(f.FILES, caps_major=None))
    assert isinstance(outcome.error, errors.PermanentError)
    assert "nvidia-caps major" in str(outcome.error)
    assert outcome.steps == ()


def test_a_partition_another_claim_holds_is_refused() -> None:
    theirs = _prepare(f.claim(_1G, uid="c0ffee00-0000-4000-8000-000000000002", name="other"))
    outcome = _prepare(f.claim(_1G), checkpoint=theirs.checkpoint)
    assert isinstance(outcome.error, errors.PermanentError)
    assert "ml/other" in str(outcome.error)
    assert outcome.steps == ()


# ---------------------------------------------------------------- undo


def test_unprepare_destroys_the_created_device_before_dropping_the_entry() -> None:
    sim, cdi, created = _node(), _CDI(), {}
    claim = f.claim(_1G)
    outcome = _prepare(claim, sim=sim)
    _run(outcome.steps, sim, cdi, created)
    undo = p.plan_gpu_unprepare(
        models.ClaimRef(uid=claim.uid, namespace="ml", name="train"),
        checkpoint=outcome.checkpoint, inventory=sim.gpu_inventory(), now=200.0,
    )
    assert _kinds(undo.steps) == ["DestroyMigDevice", "WriteCheckpoint", "DeleteCDISpec"]
    _run(undo.steps, sim, cdi, created)
    assert _placements(sim) == set()
    assert created == {}
    _run(undo.steps, sim, cdi, created)  # idempotent: nothing there counts as done


def test_unprepare_of_a_started_claim_destroys_and_leaves_a_tombstone() -> None:
    claim = f.claim(_1G)
    started = _prepare(claim).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    undo = p.plan_gpu_unprepare(
        models.ClaimRef(uid=claim.uid, namespace="ml", name="train"),
        checkpoint=started.checkpoint, inventory=_node().gpu_inventory(), now=200.0,
    )
    assert undo.steps[0] == actions.DestroyMigDevice(placement=_1G_PLACEMENT)
    tombstone = undo.checkpoint.entries[claim.uid]
    assert tombstone.state is models.ClaimState.PREPARE_ABORTED
    assert tombstone.record.dynamic_migs == ()


def test_rollback_destroys_what_the_abandoned_prepare_created() -> None:
    claim = f.claim(_1G)
    steps = _prepare(claim).steps
    undo = p.plan_gpu_rollback(claim.uid, done=steps[:2], rollback_to=EMPTY)
    assert undo == (actions.DestroyMigDevice(placement=_1G_PLACEMENT),)
    assert p.plan_gpu_rollback(claim.uid, done=steps[:1], rollback_to=EMPTY) == ()


def test_stale_sweep_destroys_the_device_of_a_stale_entry() -> None:
    claim = f.claim(_1G)
    checkpoint = _prepare(claim).checkpoint
    entry = checkpoint.entries[claim.uid]
    after = checkpoints.without_entry(checkpoint, claim.uid)
    undo = p.plan_gpu_undo(entry, after=after, inventory=_node().gpu_inventory())
    assert undo == (actions.DestroyMigDevice(placement=_1G_PLACEMENT),)


# ---------------------------------------------------------------- records


def test_records_without_dynamic_mig_encode_byte_for_byte_as_before() -> None:
    record = records.GpuClaimRecord(
        held=(records.held_from_name("gpu-0"),), time_sliced=("GPU-0",), vfio_api="",
    )
    assert json.dumps(records.CODEC.encode(record)) == json.dumps({
        "devices": [{"name": "gpu-0", "type": "gpu", "shared": False, "gpuMinor": 0}],
        "timeSliced": ["GPU-0"],
        "vfioAPIDevice": "",
    })


def test_records_with_dynamic_mig_round_trip() -> None:
    record = records.GpuClaimRecord(
        held=(records.held_from_name(_1G),), dynamic_migs=(_1G_PLACEMENT,),
    )
    encoded = records.CODEC.encode(record)
    assert encoded["dynamicMIG"] == [{"gpuMinor": 0, "giProfileID": 19, "placementStart": 3}]
    assert records.CODEC.decode(json.loads(json.dumps(encoded))) == record


@pytest.mark.parametrize("created", [
    {"gpuMinor": 0},
    [{"gpuMinor": True, "giProfileID": 19, "placementStart": 3}],
    [{"gpuMinor": 0, "giProfileID": "19", "placementStart": 3}],
    ["gpu-0-mig-1g10gb-19-3"],
])
def test_a_malformed_dynamic_mig_record_is_refused(created: object) -> None:
    raw = {"devices": [], "timeSliced": [], "vfioAPIDevice": "", "dynamicMIG": created}
    with pytest.raises(ValueError, match="dynamicMIG"):
        records.CODEC.decode(raw)


# ---------------------------------------------------------------- executor


def test_a_create_replaces_a_device_an_earlier_try_left_at_the_placement() -> None:
    sim, created = _node(), {}
    sim.create_mig_device(_1G_PLACEMENT)
    _run((actions.CreateMigDevice(placement=_1G_PLACEMENT),), sim, _CDI(), created)
    assert _placements(sim) == {_1G_PLACEMENT}
    assert created[_1G_PLACEMENT].placement_start == 3


def test_a_create_nvml_refuses_propagates() -> None:
    sim = _node()
    overlapping = devices.MigPlacement(parent_minor=0, gi_profile_id=0, placement_start=0)
    sim.create_mig_device(_1G_PLACEMENT)
    with pytest.raises(errors.PermanentError):
        _run((actions.CreateMigDevice(placement=overlapping),), sim, _CDI(), {})


def test_a_spec_step_without_its_created_device_fails_before_writing() -> None:
    cdi = _CDI()
    step = _prepare(f.claim(_1G)).steps[2]
    assert isinstance(step, actions.WriteMigCDISpec)
    with pytest.raises(errors.PermanentError, match="was not created"):
        _run((step,), _node(), cdi, {})
    assert cdi.specs == {}


def test_created_spec_refuses_a_device_without_capability_minors() -> None:
    step = _prepare(f.claim(_1G)).steps[2]
    assert isinstance(step, actions.WriteMigCDISpec)
    mig = dataclasses.replace(f.mig(0, 3), gi_cap_minor=None)
    with pytest.raises(errors.PermanentError, match="capability minors"):
        dynamic_mig.created_spec(step, {_1G_PLACEMENT: mig})


@pytest.mark.parametrize("action", [
    actions.CreateMigDevice(placement=_1G_PLACEMENT),
    actions.DestroyMigDevice(placement=_1G_PLACEMENT),
    actions.WriteMigCDISpec(claim_uid=names.ClaimUID("u"), cdi_devices=(), files=f.FILES),
])
def test_a_mig_step_without_its_port_wired_is_a_type_error(action: actions.GpuAction) -> None:
    with pytest.raises(TypeError, match="wired"):
        executing.execute_gpu_actions((action,), time_slicer=None, vfio=None)


def test_a_checkpoint_rebuilt_from_specs_destroys_dynamic_mig_devices_at_unprepare() -> None:
    sim, cdi, created = _node(), _CDI(), {}
    claim = f.claim(_1G, "gpu-1")
    _run(_prepare(claim, sim=sim).steps, sim, cdi, created)
    specs = {names.ClaimUID(claim.uid): cdi.specs[claim.uid]}

    static = p.gpu_checkpoint_from_cdi(specs, boot_id="b").entries[claim.uid]
    assert static.record.dynamic_migs == ()  # the gate off: a MIG device made out of band
    rebuilt = p.gpu_checkpoint_from_cdi(specs, boot_id="b", dynamic_mig=True)
    assert rebuilt.entries[claim.uid].record.dynamic_migs == (_1G_PLACEMENT,)
    undo = p.plan_gpu_unprepare(
        models.ClaimRef(uid=claim.uid, namespace="ml", name="train"),
        checkpoint=rebuilt, inventory=sim.gpu_inventory(), now=200.0,
    )
    assert undo.steps[0] == actions.DestroyMigDevice(placement=_1G_PLACEMENT)
