"""The GPU prepare/unprepare planner: devices, configs, sharing, checkpoint transitions.

Covers: full GPU, MIG and VFIO prepares and their steps; config precedence (class before
claim, last wins, per-type defaults, a named request of the wrong type refused); sharing
allowed only when both claims allow it; idempotent re-prepare; unprepare, tombstones and
the undo of GPU actions; restore of a lost spec; rebuild from CDI specs; every error path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gpu_prep_fixtures as f
import pytest

from core import checkpoint as checkpoints
from core import errors, models, names
from core.gpu import actions, configs, devices
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as records
from core.gpu import preparing as p

EMPTY = p.empty_gpu_checkpoint(boot_id="boot-1")
OTHER_UID = "c0ffee00-0000-4000-8000-000000000002"


def prepare(
    claim: models.ResourceClaim,
    *,
    checkpoint: models.Checkpoint = EMPTY,
    inventory: devices.GpuInventory = f.INVENTORY,
    files: devices.DriverFiles = f.FILES,
    gates: models.FeatureGates = f.ALL_GATES,
    now: float = 100.0,
    **kw: object,
) -> p.GpuClaimOutcome:
    return p.plan_gpu_prepare(
        claim, checkpoint=checkpoint, inventory=inventory, files=files, gates=gates, now=now,
        **kw,  # type: ignore[arg-type]
    )


def ok(outcome: p.GpuClaimOutcome) -> p.GpuClaimOutcome:
    assert outcome.error is None, outcome.error
    return outcome


def spec_of(outcome: p.GpuClaimOutcome) -> dict[str, Any]:
    [spec] = [s.spec for s in outcome.steps if isinstance(s, models.WriteCDISpec)]
    return f.check_cdi(spec)


def error_of(outcome: p.GpuClaimOutcome) -> str:
    assert isinstance(outcome.error, errors.PermanentError), outcome.error
    assert outcome.steps == ()
    return str(outcome.error)


def ref(claim: models.ResourceClaim) -> models.ClaimRef:
    return models.ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name)


def kinds(outcome: p.GpuClaimOutcome) -> list[str]:
    return [type(s).__name__ for s in outcome.steps]


# ---------------------------------------------------------------- full GPU, MIG, VFIO


def test_full_gpu_prepare_writes_started_then_spec_then_completed() -> None:
    claim = f.claim("gpu-1")
    outcome = ok(prepare(claim))
    assert kinds(outcome) == ["WriteCheckpoint", "WriteCDISpec", "WriteCheckpoint"]
    started, _, completed = outcome.steps
    assert isinstance(started, models.WriteCheckpoint)
    assert isinstance(completed, models.WriteCheckpoint)
    assert started.checkpoint.entries[claim.uid].state is models.ClaimState.PREPARE_STARTED
    assert completed.checkpoint.entries[claim.uid].state is models.ClaimState.PREPARE_COMPLETED
    assert started.changed == completed.changed == (claim.uid,)
    assert outcome.checkpoint is completed.checkpoint
    assert outcome.devices == (models.PreparedDevice(
        request_names=("r0",), pool_name=f.NODE, device_name="gpu-1",
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={claim.uid}-gpu-1",),
    ),)


def test_full_gpu_spec_gives_its_node_the_control_nodes_and_the_driver_files() -> None:
    claim = f.claim("gpu-1")
    spec = spec_of(ok(prepare(claim)))
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert spec["devices"] == [{
        "name": f"{claim.uid}-gpu-1",
        "containerEdits": {"deviceNodes": [
            {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 0o666},
        ]},
    }]
    common = spec["containerEdits"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert [n["path"] for n in common["deviceNodes"]] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
    ]
    mounted = {m["containerPath"]: m for m in common["mounts"]}
    assert set(mounted) == {c for _, c in (*f.FILES.libraries, *f.FILES.binaries,
                                          *f.FILES.firmware)}
    assert all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in mounted.values())


def test_mig_prepare_gives_the_parent_node_and_both_capability_nodes() -> None:
    name = f.mig(3, 1).name
    claim = f.claim(name)
    spec = spec_of(ok(prepare(claim)))
    [device] = spec["devices"]
    assert device["name"] == f"{claim.uid}-{name}"
    assert device["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3, "fileMode": 0o666},
        {"path": "/dev/nvidia-caps/nvidia-cap102", "type": "c", "major": 511, "minor": 102,
         "fileMode": 0o666},
        {"path": "/dev/nvidia-caps/nvidia-cap103", "type": "c", "major": 511, "minor": 103,
         "fileMode": 0o666},
    ]


def test_mig_prepare_is_refused_when_the_node_shows_no_capability_minors() -> None:
    broken = dataclasses.replace(f.INVENTORY, migs=(f.mig(3, 0, gi_cap_minor=None),))
    message = error_of(prepare(f.claim(f.mig(3, 0).name), inventory=broken))
    assert "capability minors" in message and "restart" in message


def test_mig_prepare_is_refused_without_the_nvidia_caps_major() -> None:
    files = dataclasses.replace(f.FILES, caps_major=None)
    assert "nvidia-caps major" in error_of(prepare(f.claim(f.mig(3, 0).name), files=files))


def test_vfio_prepare_binds_before_the_spec_and_gives_only_vfio_nodes() -> None:
    claim = f.claim("gpu-vfio-0")
    outcome = ok(prepare(claim))
    assert kinds(outcome) == ["WriteCheckpoint", "BindVfio", "WriteCDISpec", "WriteCheckpoint"]
    assert outcome.steps[1] == actions.BindVfio(pci_bus_id=f.vfio(0).pci_bus_id)
    spec = spec_of(outcome)
    assert spec["devices"] == [{
        "name": f"{claim.uid}-gpu-vfio-0",
        "containerEdits": {"deviceNodes": [{"path": "/dev/vfio/30"}]},
    }]
    # A VM's GPU is driven by its guest: no host driver files, no nvidia control nodes.
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}


def test_vfio_nodes_from_discovery_replace_the_group_path() -> None:
    node = devices.DeviceNode(path="/dev/vfio/devices/vfio0", major=234, minor=0)
    outcome = ok(prepare(f.claim("gpu-vfio-0"),
                         vfio_nodes={f.vfio(0).pci_bus_id: (node,)}))
    [device] = spec_of(outcome)["devices"]
    assert device["containerEdits"]["deviceNodes"] == [gpu_cdi.node_json(node)]


@pytest.mark.parametrize(("policy", "iommufd", "api"), [
    ("LegacyOnly", True, "/dev/vfio/vfio"),
    ("PreferIommuFD", False, "/dev/vfio/vfio"),
    ("PreferIommuFD", True, "/dev/iommu"),
])
def test_vfio_config_asking_for_the_api_device_adds_it(
    policy: str, iommufd: bool, api: str
) -> None:
    inventory = dataclasses.replace(f.INVENTORY, vfios=(f.vfio(0, iommu_fd_enabled=iommufd),))
    cfg = f.config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
                    "iommu": {"backendPolicy": policy, "enableAPIDevice": True}})
    spec = spec_of(ok(prepare(f.claim("gpu-vfio-0", configs=[cfg]), inventory=inventory)))
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": [{"path": api}],
    }


def test_vfio_device_is_refused_with_gate_passthrough_support_off() -> None:
    message = error_of(prepare(f.claim("gpu-vfio-0"), gates=f.NO_GATES))
    assert "PassthroughSupport" in message


def test_claim_with_several_devices_lists_each_in_request_order() -> None:
    claim = f.claim(("b", "gpu-0"), ("a", "gpu-2"))
    outcome = ok(prepare(claim))
    assert [d.device_name for d in outcome.devices] == ["gpu-2", "gpu-0"]
    assert [d["name"] for d in spec_of(outcome)["devices"]] == [
        f"{claim.uid}-gpu-2", f"{claim.uid}-gpu-0",
    ]


# ---------------------------------------------------------------- bad claims


def test_device_not_on_this_node_is_refused_naming_it_and_the_fix() -> None:
    message = error_of(prepare(f.claim("gpu-7")))
    assert "gpu-7" in message and "not on this node" in message
    assert "allocated again" in message


def test_result_of_another_pool_is_refused_when_the_pool_is_known() -> None:
    message = error_of(prepare(f.claim("gpu-0", pool="node-b"), pool=f.NODE))
    assert "node-b" in message and "another node" in message


def test_results_of_other_drivers_are_ignored() -> None:
    claim = f.claim("gpu-0")
    foreign = models.DeviceResult(request="x", driver="other.example.com", pool="p", device="d")
    outcome = ok(prepare(dataclasses.replace(claim, results=(*claim.results, foreign))))
    assert [d.device_name for d in outcome.devices] == ["gpu-0"]


@pytest.mark.parametrize("claim", [f.claim("gpu-0", allocated=False), f.claim()])
def test_claim_without_an_allocation_of_ours_is_refused(claim: models.ResourceClaim) -> None:
    assert "no allocation for gpu.nvidia.com" in error_of(prepare(claim))


def test_an_invalid_config_is_refused_naming_the_field_even_when_overridden() -> None:
    bad = f.config(f.gpu_config(sharing={"strategy": "TimeSlicing", "bogus": 1}))
    good = f.config(f.gpu_config())
    outcome = prepare(f.claim("gpu-0", configs=[bad, good]))
    assert isinstance(outcome.error, errors.DecodeError)
    assert "bogus" in str(outcome.error) and outcome.steps == ()


def test_mps_is_refused_without_its_gate() -> None:
    cfg = f.config(f.gpu_config(sharing={"strategy": "MPS"}))
    assert "needs feature gate MPSSupport" in error_of(prepare(f.claim("gpu-0", configs=[cfg])))


def test_a_prepare_retried_after_an_unprepare_overtook_it_is_refused() -> None:
    claim = f.claim("gpu-0")
    started = prepare(claim).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    aborted = p.plan_gpu_unprepare(ref(claim), checkpoint=started.checkpoint,
                                   inventory=f.INVENTORY, now=101.0)
    message = error_of(prepare(claim, checkpoint=aborted.checkpoint, now=102.0))
    assert "unprepared while its prepare was in flight" in message
    # After the tombstone's time the claim may be prepared again, and the tombstone goes.
    late = ok(prepare(claim, checkpoint=aborted.checkpoint,
                      now=101.0 + checkpoints.TOMBSTONE_TTL_S))
    assert late.checkpoint.entries[claim.uid].state is models.ClaimState.PREPARE_COMPLETED


def test_expired_tombstones_of_other_claims_go_in_the_same_write() -> None:
    other = f.claim("gpu-2", uid=OTHER_UID, name="other")
    started = prepare(other).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    aborted = p.plan_gpu_unprepare(ref(other), checkpoint=started.checkpoint,
                                   inventory=f.INVENTORY, now=0.0).checkpoint
    outcome = ok(prepare(f.claim("gpu-0"), checkpoint=aborted, now=1e6))
    first = outcome.steps[0]
    assert isinstance(first, models.WriteCheckpoint)
    assert first.changed == (f.claim().uid, OTHER_UID)
    assert OTHER_UID not in outcome.checkpoint.entries


# ---------------------------------------------------------------- configs


def test_claim_config_overrides_class_config_whatever_their_order() -> None:
    claim_cfg = f.config(f.time_slicing("Long"))
    class_cfg = f.config(f.time_slicing("Short"), source=models.ConfigSource.CLASS)
    outcome = ok(prepare(f.claim("gpu-0", configs=[claim_cfg, class_cfg])))
    assert actions.SetTimeSlice(gpu_uuids=(f.gpu(0).uuid,),
                                interval=configs.TimeSliceInterval.LONG) in outcome.steps


def test_the_last_config_of_a_source_wins() -> None:
    cfgs = [f.config(f.time_slicing("Short")), f.config(f.time_slicing("Medium"))]
    outcome = ok(prepare(f.claim("gpu-0", configs=cfgs)))
    [sliced] = [s for s in outcome.steps if isinstance(s, actions.SetTimeSlice)]
    assert sliced.interval is configs.TimeSliceInterval.MEDIUM


def test_a_config_naming_the_request_beats_a_later_one_for_every_request() -> None:
    named = f.config(f.time_slicing("Long"), requests=["r0"])
    later_all = f.config(f.time_slicing("Short"))
    outcome = ok(prepare(f.claim("gpu-0", "gpu-1", configs=[named, later_all])))
    slices = {s.interval: s.gpu_uuids for s in outcome.steps if isinstance(s, actions.SetTimeSlice)}
    # NB: the later config wins for r0 too: precedence is by position, naming is a filter.
    assert slices == {configs.TimeSliceInterval.SHORT: (f.gpu(0).uuid, f.gpu(1).uuid)}
    earlier_all = f.config(f.time_slicing("Short"))
    outcome = ok(prepare(f.claim("gpu-0", "gpu-1", configs=[earlier_all, named])))
    slices = {s.interval: s.gpu_uuids for s in outcome.steps if isinstance(s, actions.SetTimeSlice)}
    assert slices == {configs.TimeSliceInterval.LONG: (f.gpu(0).uuid,),
                      configs.TimeSliceInterval.SHORT: (f.gpu(1).uuid,)}


def test_a_config_for_all_requests_skips_devices_of_another_type() -> None:
    cfg = f.config(f.time_slicing("Long"))
    outcome = ok(prepare(f.claim("gpu-0", f.mig(3, 0).name, configs=[cfg])))
    [sliced] = [s for s in outcome.steps if isinstance(s, actions.SetTimeSlice)]
    assert sliced.gpu_uuids == (f.gpu(0).uuid,)


def test_a_config_naming_a_request_of_another_device_type_is_refused() -> None:
    cfg = f.config(f.time_slicing(), requests=["r0"])
    message = error_of(prepare(f.claim(f.mig(3, 0).name, configs=[cfg])))
    assert "GpuConfig" in message and "r0" in message


def test_a_config_naming_the_parent_request_applies_to_its_subrequest() -> None:
    cfg = f.config(f.time_slicing("Long"), requests=["gpu"])
    outcome = ok(prepare(f.claim(("gpu/h100", "gpu-0"), configs=[cfg])))
    assert any(isinstance(s, actions.SetTimeSlice) for s in outcome.steps)


def test_configs_of_other_drivers_and_other_requests_are_ignored() -> None:
    foreign = f.config({"anything": True}, driver="other.example.com")
    elsewhere = f.config(f.time_slicing("Long"), requests=["not-this-one"])
    outcome = ok(prepare(f.claim("gpu-0", configs=[foreign, elsewhere])))
    assert kinds(outcome) == ["WriteCheckpoint", "WriteCDISpec", "WriteCheckpoint"]


def test_time_slice_is_set_on_full_gpus_only_after_binds_and_before_the_spec() -> None:
    cfg = f.config(f.time_slicing("Medium"))
    outcome = ok(prepare(f.claim("gpu-1", "gpu-0", "gpu-vfio-0", configs=[cfg])))
    assert kinds(outcome) == ["WriteCheckpoint", "BindVfio", "SetTimeSlice", "WriteCDISpec",
                              "WriteCheckpoint"]
    assert outcome.steps[2] == actions.SetTimeSlice(
        gpu_uuids=(f.gpu(0).uuid, f.gpu(1).uuid), interval=configs.TimeSliceInterval.MEDIUM
    )


def test_mig_time_slicing_shares_but_sets_no_interval() -> None:
    cfg = f.config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
                    "sharing": {"strategy": "TimeSlicing"}})
    outcome = ok(prepare(f.claim(f.mig(3, 0).name, configs=[cfg])))
    assert kinds(outcome) == ["WriteCheckpoint", "WriteCDISpec", "WriteCheckpoint"]


def test_time_slicing_needs_its_gate() -> None:
    cfg = f.config(f.time_slicing())
    outcome = prepare(f.claim("gpu-0", configs=[cfg]),
                      gates=models.FeatureGates(values={}))
    assert "TimeSlicingSettings" in error_of(outcome)


# ---------------------------------------------------------------- sharing


def _held_by_other(*devices_: str, cfgs: list[models.RawOpaqueConfig] | None = None,
                   completed: bool = True) -> models.Checkpoint:
    other = f.claim(*devices_, uid=OTHER_UID, name="other", configs=cfgs or [])
    outcome = ok(prepare(other))
    if completed:
        return outcome.checkpoint
    started = outcome.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    return started.checkpoint


@pytest.mark.parametrize("completed", [True, False])
def test_a_device_held_by_another_claim_is_refused_naming_it_and_the_fix(
    completed: bool
) -> None:
    held = _held_by_other("gpu-0", completed=completed)
    message = error_of(prepare(f.claim("gpu-0"), checkpoint=held))
    assert "ml/other" in message and "gpu-0" in message and "TimeSlicing" in message


def test_a_device_may_be_shared_when_both_claims_allow_sharing() -> None:
    cfg = f.config(f.time_slicing())
    held = _held_by_other("gpu-0", cfgs=[cfg])
    outcome = ok(prepare(f.claim("gpu-0", configs=[cfg]), checkpoint=held))
    assert set(outcome.checkpoint.entries) == {OTHER_UID, f.claim().uid}


@pytest.mark.parametrize(("mine", "theirs"), [(True, False), (False, True)])
def test_sharing_needs_both_claims_to_allow_it(mine: bool, theirs: bool) -> None:
    cfg = f.config(f.time_slicing())
    held = _held_by_other("gpu-0", cfgs=[cfg] if theirs else [])
    assert "ml/other" in error_of(
        prepare(f.claim("gpu-0", configs=[cfg] if mine else []), checkpoint=held)
    )


def test_a_gpu_passed_through_cannot_also_serve_a_container() -> None:
    inventory = dataclasses.replace(f.INVENTORY, vfios=(f.vfio(0, parent_minor=0),))
    other = f.claim("gpu-vfio-0", uid=OTHER_UID, name="vm")
    held = ok(prepare(other, inventory=inventory)).checkpoint
    message = error_of(prepare(f.claim("gpu-0"), checkpoint=held, inventory=inventory))
    assert "same physical GPU" in message and "cannot be shared" in message


def test_different_mig_devices_of_one_gpu_do_not_conflict() -> None:
    held = _held_by_other(f.mig(3, 0).name)
    ok(prepare(f.claim(f.mig(3, 1).name), checkpoint=held))


def test_other_devices_do_not_conflict() -> None:
    ok(prepare(f.claim("gpu-1"), checkpoint=_held_by_other("gpu-0")))


@pytest.mark.parametrize("admin_first", [True, False])
@pytest.mark.parametrize("device", ["gpu-0", "gpu-0-mig-1g.10gb-0-0"])
def test_admin_access_never_conflicts_with_the_devices_holder(
    admin_first: bool, device: str
) -> None:
    device = device if device == "gpu-0" else f.mig(3, 0).name
    first = f.claim(device, uid=OTHER_UID, name="first", admin_access=admin_first)
    held = ok(prepare(first)).checkpoint
    second = ok(prepare(f.claim(device, admin_access=not admin_first), checkpoint=held))
    admins = {uid: [h.admin_access for h in e.record.held]
              for uid, e in second.checkpoint.entries.items()}
    assert admins == {OTHER_UID: [admin_first], f.claim().uid: [not admin_first]}


def test_admin_access_beside_a_passthrough_holder_is_allowed_as_upstream_does() -> None:
    inventory = dataclasses.replace(f.INVENTORY, vfios=(f.vfio(0, parent_minor=0),))
    held = ok(prepare(f.claim("gpu-vfio-0", uid=OTHER_UID, name="vm"),
                      inventory=inventory)).checkpoint
    ok(prepare(f.claim("gpu-0", admin_access=True), checkpoint=held, inventory=inventory))


def test_admin_access_to_a_passthrough_device_is_refused_naming_the_fix() -> None:
    inventory = dataclasses.replace(f.INVENTORY, vfios=(f.vfio(0, parent_minor=0),))
    message = error_of(prepare(f.claim("gpu-vfio-0", admin_access=True), inventory=inventory))
    assert "admin access to VFIO passthrough device gpu-vfio-0" in message
    assert "request the full GPU (gpu.nvidia.com) with admin access" in message


def test_admin_access_sets_no_time_slice_and_resets_none() -> None:
    cfg = f.config(f.time_slicing("Long"))
    claim = f.claim("gpu-0", configs=[cfg], admin_access=True)
    outcome = ok(prepare(claim))
    assert not any(isinstance(s, actions.SetTimeSlice) for s in outcome.steps)
    undone = p.plan_gpu_unprepare(ref(claim), checkpoint=outcome.checkpoint,
                                  inventory=f.INVENTORY, now=1.0)
    assert not any(isinstance(s, actions.SetTimeSlice) for s in undone.steps)


def test_admin_access_survives_the_checkpoint_round_trip() -> None:
    outcome = ok(prepare(f.claim("gpu-0", admin_access=True)))
    data = checkpoints.encode(outcome.checkpoint)
    [entry] = records.decode(data).entries.values()
    assert [h.admin_access for h in entry.record.held] == [True]


# ---------------------------------------------------------------- idempotence


def test_a_completed_claim_prepared_again_gets_the_same_devices_and_no_steps() -> None:
    claim = f.claim("gpu-0", f.mig(3, 0).name)
    first = ok(prepare(claim))
    again = ok(prepare(claim, checkpoint=first.checkpoint, now=500.0))
    assert again.steps == () and again.devices == first.devices
    assert again.checkpoint is first.checkpoint


def test_a_started_claim_is_planned_again_from_the_start() -> None:
    claim = f.claim("gpu-vfio-0")
    first = ok(prepare(claim))
    started = first.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    again = ok(prepare(claim, checkpoint=started.checkpoint))
    assert again.steps == first.steps and again.devices == first.devices


def test_the_checkpoint_survives_its_codec_with_the_gpu_record() -> None:
    cfg = f.config(f.time_slicing("Long"))
    outcome = ok(prepare(f.claim("gpu-0", "gpu-vfio-0", configs=[cfg])))
    decoded = records.decode(checkpoints.encode(outcome.checkpoint))
    assert decoded == outcome.checkpoint
    assert decoded.entries[f.claim().uid].record.time_sliced != ()
    undo = p.plan_gpu_unprepare(ref(f.claim()), checkpoint=decoded, inventory=f.INVENTORY,
                                now=1.0)
    assert [s for s in undo.steps if not isinstance(s, models.PLUGIN_ACTION_TYPES)] == [
        actions.UnbindVfio(pci_bus_id=f.vfio(0).pci_bus_id),
        actions.SetTimeSlice(gpu_uuids=(f.gpu(0).uuid,),
                             interval=configs.TimeSliceInterval.DEFAULT),
    ]


# ---------------------------------------------------------------- unprepare


def test_unprepare_of_an_unknown_claim_only_deletes_its_spec() -> None:
    outcome = p.plan_gpu_unprepare(ref(f.claim()), checkpoint=EMPTY, inventory=f.INVENTORY,
                                   now=1.0)
    assert outcome.steps == (models.DeleteCDISpec(claim_uid=f.claim().uid),)
    assert outcome.checkpoint is EMPTY and outcome.error is None


def test_unprepare_of_a_plain_claim_drops_the_entry_before_the_spec() -> None:
    claim = f.claim("gpu-0")
    held = ok(prepare(claim)).checkpoint
    outcome = p.plan_gpu_unprepare(ref(claim), checkpoint=held, inventory=f.INVENTORY, now=1.0)
    assert outcome.steps == (
        models.WriteCheckpoint(checkpoint=outcome.checkpoint, changed=(claim.uid,)),
        models.DeleteCDISpec(claim_uid=claim.uid),
    )
    assert claim.uid not in outcome.checkpoint.entries


def test_unprepare_of_a_started_claim_leaves_a_tombstone() -> None:
    claim = f.claim("gpu-0")
    started = prepare(claim).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    outcome = p.plan_gpu_unprepare(ref(claim), checkpoint=started.checkpoint,
                                   inventory=f.INVENTORY, now=7.0)
    tomb = outcome.checkpoint.entries[claim.uid]
    assert tomb.state is models.ClaimState.PREPARE_ABORTED and tomb.updated_at == 7.0
    assert tomb.devices == () and tomb.record == records.GpuClaimRecord()
    again = p.plan_gpu_unprepare(ref(claim), checkpoint=outcome.checkpoint,
                                 inventory=f.INVENTORY, now=8.0)
    assert again.steps == () and again.checkpoint is outcome.checkpoint


def test_unprepare_undoes_gpu_actions_then_drops_the_entry_then_the_spec() -> None:
    # A kill anywhere leaves the entry with its spec (undo retried) or a spec with no entry
    # (removed at start-up), never a completed entry whose answer has no file.
    claim = f.claim("gpu-0", "gpu-vfio-0", configs=[f.config(f.time_slicing("Long"))])
    held = ok(prepare(claim)).checkpoint
    outcome = p.plan_gpu_unprepare(ref(claim), checkpoint=held, inventory=f.INVENTORY, now=1.0)
    assert kinds(outcome) == ["UnbindVfio", "SetTimeSlice", "WriteCheckpoint", "DeleteCDISpec"]


def test_unprepare_of_a_started_vfio_claim_unbinds_what_it_may_have_bound() -> None:
    claim = f.claim("gpu-vfio-0")
    started = prepare(claim).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    outcome = p.plan_gpu_unprepare(ref(claim), checkpoint=started.checkpoint,
                                   inventory=f.INVENTORY, now=1.0)
    assert actions.UnbindVfio(pci_bus_id=f.vfio(0).pci_bus_id) in outcome.steps


def test_time_slice_is_not_reset_while_another_claim_shares_the_gpu() -> None:
    cfg = f.config(f.time_slicing("Long"))
    held = _held_by_other("gpu-0", cfgs=[cfg])
    claim = f.claim("gpu-0", configs=[cfg])
    both = ok(prepare(claim, checkpoint=held)).checkpoint
    outcome = p.plan_gpu_unprepare(ref(claim), checkpoint=both, inventory=f.INVENTORY, now=1.0)
    assert not any(isinstance(s, actions.SetTimeSlice) for s in outcome.steps)
    last = p.plan_gpu_unprepare(
        models.ClaimRef(uid=names.ClaimUID(OTHER_UID), namespace="ml", name="other"),
        checkpoint=outcome.checkpoint, inventory=f.INVENTORY, now=2.0,
    )
    assert actions.SetTimeSlice(gpu_uuids=(f.gpu(0).uuid,),
                                interval=configs.TimeSliceInterval.DEFAULT) in last.steps


# ---------------------------------------------------------------- restore and rebuild


def test_restore_spec_writes_the_bytes_prepare_wrote() -> None:
    vfio_cfg = f.config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
                         "iommu": {"enableAPIDevice": True}})
    claim = f.claim("gpu-0", f.mig(3, 1).name, "gpu-vfio-0", configs=[vfio_cfg])
    outcome = ok(prepare(claim))
    restored = p.plan_gpu_restore_spec(outcome.checkpoint.entries[claim.uid],
                                       inventory=f.INVENTORY, files=f.FILES)
    assert restored == models.WriteCDISpec(claim_uid=claim.uid, spec=spec_of(outcome))


def test_restore_spec_is_none_when_a_device_left_the_node_or_the_entry_is_not_completed() -> None:
    claim = f.claim("gpu-2")
    outcome = ok(prepare(claim))
    entry = outcome.checkpoint.entries[claim.uid]
    smaller = dataclasses.replace(f.INVENTORY, gpus=(f.gpu(0),))
    assert p.plan_gpu_restore_spec(entry, inventory=smaller, files=f.FILES) is None
    started = dataclasses.replace(entry, state=models.ClaimState.PREPARE_STARTED)
    assert p.plan_gpu_restore_spec(started, inventory=f.INVENTORY, files=f.FILES) is None
    bare = dataclasses.replace(entry, record=records.GpuClaimRecord(), devices=())
    assert p.plan_gpu_restore_spec(bare, inventory=f.INVENTORY, files=f.FILES) is None


def test_restore_spec_is_none_when_the_mig_nodes_cannot_be_built_any_more() -> None:
    claim = f.claim(f.mig(3, 0).name)
    entry = ok(prepare(claim)).checkpoint.entries[claim.uid]
    files = dataclasses.replace(f.FILES, caps_major=None)
    assert p.plan_gpu_restore_spec(entry, inventory=f.INVENTORY, files=files) is None


def test_rebuild_from_cdi_proves_the_devices_and_nothing_more() -> None:
    claim = f.claim("gpu-0", f.mig(3, 0).name, "gpu-vfio-0",
                    configs=[f.config(f.time_slicing())])
    spec = spec_of(ok(prepare(claim)))
    rebuilt = p.gpu_checkpoint_from_cdi({claim.uid: spec}, boot_id="boot-2", now=9.0)
    assert rebuilt.boot_id == "boot-2"
    entry = rebuilt.entries[claim.uid]
    assert entry.state is models.ClaimState.PREPARE_COMPLETED and entry.name == ""
    assert [d.device_name for d in entry.devices] == ["gpu-0", f.mig(3, 0).name, "gpu-vfio-0"]
    assert records.decode(checkpoints.encode(rebuilt)) == rebuilt
    # Not reusable (no allocation known): a repeated prepare is planned afresh.
    assert ok(prepare(claim, checkpoint=rebuilt)).steps != ()
    # Sharing is not proven: another claim on gpu-0 waits.
    other = f.claim("gpu-0", uid=OTHER_UID, name="other", configs=[f.config(f.time_slicing())])
    assert "recovered from its CDI spec" in error_of(prepare(other, checkpoint=rebuilt))
    # Unprepare still gives the VFIO function back (its address from the inventory).
    undo = p.plan_gpu_unprepare(ref(claim), checkpoint=rebuilt, inventory=f.INVENTORY, now=1.0)
    assert actions.UnbindVfio(pci_bus_id=f.vfio(0).pci_bus_id) in undo.steps
    # And its spec can be written back.
    restored = p.plan_gpu_restore_spec(entry, inventory=f.INVENTORY, files=f.FILES)
    assert restored is not None and restored.spec == spec


def test_rebuild_from_cdi_keeps_the_api_device_and_skips_foreign_devices() -> None:
    uid = names.ClaimUID("abc")
    spec = {"devices": [{"name": "abc-gpu-1"}, {"name": "zzz-gpu-2"}, "junk", {"name": 3}],
            "containerEdits": {"deviceNodes": [{"path": "/dev/iommu"}]}}
    entry = p.gpu_checkpoint_from_cdi({uid: spec}, boot_id="b").entries[uid]
    assert [d.device_name for d in entry.devices] == ["gpu-1"]
    assert entry.record.vfio_api == "/dev/iommu"
    empty = p.gpu_checkpoint_from_cdi({uid: {"devices": "nope"}}, boot_id="b").entries[uid]
    assert empty.devices == ()


def test_a_version_1_entry_without_a_gpu_record_holds_its_devices_exclusively() -> None:
    claim = f.claim("gpu-0")
    shared = f.config(f.time_slicing())
    entry = ok(prepare(f.claim("gpu-0", uid=OTHER_UID, name="other", configs=[shared])))\
        .checkpoint.entries[names.ClaimUID(OTHER_UID)]
    written = {"devices": [{"deviceName": d.device_name} for d in entry.devices], "gpu": "junk"}
    legacy = dataclasses.replace(entry, record=records.CODEC.decode_legacy(written))
    assert legacy.record.held == (records.held_from_name("gpu-0"),)  # never shared
    bare = checkpoints.with_entry(EMPTY, legacy)
    assert "ml/other" in error_of(prepare(f.claim("gpu-0", configs=[shared]), checkpoint=bare))
    assert claim.uid not in bare.entries
