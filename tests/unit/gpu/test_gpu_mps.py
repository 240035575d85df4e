"""MPS in the GPU planner: the daemon a claim gets, its steps, its CDI edits, and their undoing.

Covers: one daemon per MPS config with upstream's id and name; EXCLUSIVE_PROCESS, start and
await between PrepareStarted and the spec; the pipe/shm mounts and CUDA_MPS_PIPE_DIRECTORY on
the served devices only; limits normalized per UUID (index keys, overrides, bad keys); the
record written before any step; unprepare and rollback undoing daemon and compute mode in the
right order; a lost spec restored and a lost checkpoint rebuilt with the daemon; the refused
combinations (consumable shares, DynamicMIG, no daemon wiring, multi-user before Volta); the
Deployment's shape; records without MPS encoding byte for byte as before.
"""

from __future__ import annotations

import json
from typing import Any

import gpu_prep_fixtures as f
import pytest

from core import gates, models
from core.gpu import actions, mps
from core.gpu import checkpoint_records as records
from core.gpu import preparing as p

EMPTY = p.empty_gpu_checkpoint(boot_id="boot-1")
MPS_GATES = models.FeatureGates(values={gates.MPS_SUPPORT: True, gates.TIME_SLICING_SETTINGS: True})
ROOT = "/var/lib/kubelet/plugins/gpu.nvidia.com/mps"
UID = "c0ffee00-0000-4000-8000-000000000001"
GPU0, GPU1 = f.gpu(0).uuid, f.gpu(1).uuid


def mps_config(**settings: Any) -> models.RawOpaqueConfig:
    sharing: dict[str, Any] = {"strategy": "MPS"}
    if settings:
        sharing["mpsConfig"] = settings
    return f.config(f.gpu_config(sharing=sharing))


def prepare(
    claim: models.ResourceClaim,
    *,
    gates_: models.FeatureGates = MPS_GATES,
    mps_root: str | None = ROOT,
    inventory: Any = f.INVENTORY,
) -> p.GpuClaimOutcome:
    return p.plan_gpu_prepare(
        claim, checkpoint=EMPTY, inventory=inventory, files=f.FILES, gates=gates_, now=100.0,
        pool=f.NODE, mps_root=mps_root,
    )


def ok(outcome: p.GpuClaimOutcome) -> p.GpuClaimOutcome:
    assert outcome.error is None, outcome.error
    return outcome


def error_of(outcome: p.GpuClaimOutcome) -> str:
    assert outcome.error is not None and outcome.steps == ()
    return str(outcome.error)


def daemon_of(outcome: p.GpuClaimOutcome) -> mps.MpsDaemon:
    [start] = [s for s in outcome.steps if isinstance(s, actions.StartMpsDaemon)]
    return start.daemon


def spec_of(outcome: p.GpuClaimOutcome) -> dict[str, Any]:
    [spec] = [s.spec for s in outcome.steps if isinstance(s, models.WriteCDISpec)]
    return f.check_cdi(spec)


def test_an_mps_claim_gets_one_daemon_with_upstreams_id_and_name() -> None:
    outcome = ok(prepare(f.claim("gpu-1", "gpu-0", configs=[mps_config()])))
    daemon = daemon_of(outcome)
    assert daemon.device_uuids == daemon.gpu_uuids == (GPU0, GPU1)
    assert daemon.devices == ("gpu-0", "gpu-1")
    # <claimUID>-<first 5 hex of sha256("uuid0,uuid1")>
    assert daemon.daemon_id == mps.daemon_id(UID, (GPU1, GPU0))
    assert len(daemon.daemon_id) == len(UID) + 6
    assert daemon.name == f"mps-control-daemon-{daemon.daemon_id}"


def test_prepare_steps_go_exclusive_then_start_then_await_before_the_spec() -> None:
    outcome = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    names_ = [type(s).__name__ for s in outcome.steps]
    assert names_ == [
        "WriteCheckpoint", "SetComputeMode", "StartMpsDaemon", "AwaitMpsDaemon",
        "WriteCDISpec", "WriteCheckpoint",
    ]
    mode = outcome.steps[1]
    assert mode == actions.SetComputeMode(
        gpu_uuids=(GPU0,), mode=mps.ComputeMode.EXCLUSIVE_PROCESS
    )
    # What unprepare needs is on disk before the first GPU is touched.
    started = outcome.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    entry = started.checkpoint.entries[models.names.ClaimUID(UID)]
    assert entry.state is models.ClaimState.PREPARE_STARTED
    assert entry.record.mps == (records.MpsRecord(
        daemon_id=daemon_of(outcome).daemon_id, gpu_uuids=(GPU0,), devices=("gpu-0",)),)


def test_the_served_devices_get_the_pipe_env_and_both_mounts() -> None:
    outcome = ok(prepare(f.claim("gpu-0", "gpu-1", configs=[
        f.config(f.gpu_config(sharing={"strategy": "MPS"}), requests=["r0"])])))
    dirs = mps.daemon_dirs(ROOT, daemon_of(outcome).daemon_id)
    by_name = {d["name"]: d["containerEdits"] for d in spec_of(outcome)["devices"]}
    served = by_name[f"{UID}-gpu-0"]
    assert served["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]
    assert served["mounts"] == [
        {"hostPath": dirs.shm, "containerPath": "/dev/shm",
         "options": ["rw", "nosuid", "nodev", "bind"]},
        {"hostPath": dirs.pipe, "containerPath": "/tmp/nvidia-mps",
         "options": ["rw", "nosuid", "nodev", "bind"]},
    ]
    assert dirs.pipe == f"{ROOT}/{daemon_of(outcome).daemon_id}/pipe"
    assert "mounts" not in by_name[f"{UID}-gpu-1"]  # r1 has no MPS config


def test_a_mig_device_gets_a_daemon_but_no_compute_mode_change() -> None:
    outcome = ok(prepare(f.claim(f.mig(3, 0).name, configs=[f.config({
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
        "sharing": {"strategy": "MPS"}})])))
    daemon = daemon_of(outcome)
    assert daemon.device_uuids == ("MIG-3-0",) and daemon.gpu_uuids == ()
    assert not any(isinstance(s, actions.SetComputeMode) for s in outcome.steps)


def test_limits_are_normalized_per_uuid_index_keys_overriding_the_default() -> None:
    outcome = ok(prepare(f.claim("gpu-0", "gpu-1", configs=[mps_config(
        defaultActiveThreadPercentage=25, defaultPinnedDeviceMemoryLimit="10Gi",
        defaultPerDevicePinnedMemoryLimit={"1": "2Gi"})])))
    daemon = daemon_of(outcome)
    assert daemon.active_thread_percentage == 25
    assert daemon.pinned_limits == ((GPU0, "10240M"), (GPU1, "2048M"))
    assert mps.control_commands(daemon) == (
        "set_default_active_thread_percentage 25",
        f"set_default_device_pinned_mem_limit {GPU0} 10240M",
        f"set_default_device_pinned_mem_limit {GPU1} 2048M",
    )


def test_a_per_device_key_naming_no_device_of_the_claim_is_refused() -> None:
    message = error_of(prepare(f.claim("gpu-0", configs=[mps_config(
        defaultPerDevicePinnedMemoryLimit={"3": "1Gi"})])))
    assert "key '3' names none of the claim's devices" in message
    assert "an index from 0 to 0" in message


@pytest.mark.parametrize(("gate", "says"), [
    (gates.CONSUMABLE_SHARES, "while feature gate ConsumableShares is on"),
    (gates.DYNAMIC_MIG, "not supported with feature gate DynamicMIG"),
])
def test_mps_is_refused_beside_consumable_shares_and_dynamic_mig(gate: str, says: str) -> None:
    on = models.FeatureGates(values={gates.MPS_SUPPORT: True, gate: True})
    assert says in error_of(prepare(f.claim("gpu-0", configs=[mps_config()]), gates_=on))


def test_mps_is_refused_by_a_plugin_without_daemon_wiring() -> None:
    message = error_of(prepare(f.claim("gpu-0", configs=[mps_config()]), mps_root=None))
    assert "started without MPS control daemons" in message


def test_multi_user_mode_is_refused_before_volta() -> None:
    old = models_inventory(f.gpu(0, cuda_compute_capability="6.0"))
    message = error_of(prepare(f.claim("gpu-0", configs=[mps_config(multiUser=True)]),
                               inventory=old))
    assert "needs a Volta or newer GPU; gpu-0 is older" in message
    ok(prepare(f.claim("gpu-0", configs=[mps_config(multiUser=True)])))


def test_admin_access_to_a_gpu_never_starts_a_daemon() -> None:
    outcome = ok(prepare(f.claim("gpu-0", configs=[mps_config()], admin_access=True)))
    assert not any(isinstance(s, actions.StartMpsDaemon) for s in outcome.steps)


def test_an_mps_gpu_is_not_shared_with_another_claim() -> None:
    first = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    other = p.plan_gpu_prepare(
        f.claim("gpu-0", uid="c0ffee00-0000-4000-8000-000000000002", name="other",
                configs=[mps_config()]),
        checkpoint=first.checkpoint, inventory=f.INVENTORY, files=f.FILES, gates=MPS_GATES,
        now=100.0, pool=f.NODE, mps_root=ROOT,
    )
    assert "already prepared on this node" in error_of(other)


# ---------------------------------------------------------------- undoing


def test_unprepare_stops_the_daemon_then_restores_default_then_drops_the_entry() -> None:
    prepared = ok(prepare(f.claim("gpu-0", "gpu-1", configs=[mps_config()])))
    daemon = daemon_of(prepared)
    outcome = p.plan_gpu_unprepare(
        models.ClaimRef(uid=models.names.ClaimUID(UID), namespace="ml", name="train"),
        checkpoint=prepared.checkpoint, inventory=f.INVENTORY, now=200.0,
    )
    assert outcome.steps[:2] == (
        actions.StopMpsDaemon(daemon_id=daemon.daemon_id),
        actions.SetComputeMode(gpu_uuids=(GPU0, GPU1), mode=mps.ComputeMode.DEFAULT),
    )
    # The entry goes before the spec: a kill between any two steps never leaves a
    # PrepareCompleted entry whose CDI file is gone (found by `make faults`, mode mps).
    assert isinstance(outcome.steps[2], models.WriteCheckpoint)
    assert outcome.steps[3:] == (models.DeleteCDISpec(claim_uid=models.names.ClaimUID(UID)),)
    assert UID not in outcome.checkpoint.entries


def test_unprepare_of_a_started_entry_undoes_what_the_record_says() -> None:
    prepared = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    started = prepared.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    outcome = p.plan_gpu_unprepare(
        models.ClaimRef(uid=models.names.ClaimUID(UID), namespace="ml", name="train"),
        checkpoint=started.checkpoint, inventory=f.INVENTORY, now=200.0,
    )
    assert actions.StopMpsDaemon(daemon_id=daemon_of(prepared).daemon_id) in outcome.steps
    tombstone = outcome.checkpoint.entries[models.names.ClaimUID(UID)]
    assert tombstone.state is models.ClaimState.PREPARE_ABORTED and not tombstone.record.mps


def test_rollback_stops_a_started_daemon_and_restores_the_compute_mode() -> None:
    prepared = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    done = prepared.steps[:3]  # started, exclusive, start
    undo = p.plan_gpu_rollback(models.names.ClaimUID(UID), done=done, rollback_to=EMPTY)
    assert undo == (
        actions.StopMpsDaemon(daemon_id=daemon_of(prepared).daemon_id),
        actions.SetComputeMode(gpu_uuids=(GPU0,), mode=mps.ComputeMode.DEFAULT),
    )


def test_a_lost_spec_is_restored_with_the_daemons_mounts() -> None:
    prepared = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    entry = prepared.checkpoint.entries[models.names.ClaimUID(UID)]
    restored = p.plan_gpu_restore_spec(
        entry, inventory=f.INVENTORY, files=f.FILES, mps_root=ROOT
    )
    assert restored is not None and restored.spec == spec_of(prepared)


def test_a_lost_checkpoint_is_rebuilt_with_the_daemon_and_its_gpus_found_at_unprepare() -> None:
    prepared = ok(prepare(f.claim("gpu-0", configs=[mps_config()])))
    rebuilt = p.gpu_checkpoint_from_cdi(
        {models.names.ClaimUID(UID): spec_of(prepared)}, boot_id="boot-1"
    )
    daemon_id = daemon_of(prepared).daemon_id
    entry = rebuilt.entries[models.names.ClaimUID(UID)]
    assert entry.record.mps == (records.MpsRecord(daemon_id=daemon_id, devices=("gpu-0",)),)
    outcome = p.plan_gpu_unprepare(
        models.ClaimRef(uid=models.names.ClaimUID(UID), namespace="", name=""),
        checkpoint=rebuilt, inventory=f.INVENTORY, now=200.0,
    )
    assert actions.StopMpsDaemon(daemon_id=daemon_id) in outcome.steps
    assert actions.SetComputeMode(gpu_uuids=(GPU0,), mode=mps.ComputeMode.DEFAULT) in (
        outcome.steps
    )


# ---------------------------------------------------------------- record and Deployment


def test_records_without_mps_encode_as_before_and_with_mps_round_trip() -> None:
    plain = records.GpuClaimRecord(
        held=(records.HeldDevice(name="gpu-0", kind="gpu", gpu_minor=0),)
    )
    assert "mpsDaemons" not in json.dumps(records.CODEC.encode(plain))
    with_mps = records.GpuClaimRecord(
        held=plain.held,
        mps=(records.MpsRecord(daemon_id="x-1", gpu_uuids=(GPU0,), devices=("gpu-0",)),),
    )
    encoded = records.CODEC.encode(with_mps)
    assert encoded["mpsDaemons"] == [{"id": "x-1", "gpuUUIDs": [GPU0], "devices": ["gpu-0"]}]
    assert records.CODEC.decode(json.loads(json.dumps(encoded))) == with_mps


def test_a_malformed_mps_record_is_refused_on_decode() -> None:
    raw = records.CODEC.encode(records.GpuClaimRecord())
    with pytest.raises(ValueError, match="mpsDaemons"):
        records.CODEC.decode({**raw, "mpsDaemons": [{"gpuUUIDs": []}]})
    with pytest.raises(ValueError, match="mpsDaemons"):
        records.CODEC.decode({**raw, "mpsDaemons": "x"})


def test_the_deployment_is_pinned_hostpid_and_mounts_the_daemons_directories() -> None:
    daemon = daemon_of(ok(prepare(f.claim("gpu-0", configs=[mps_config(
        defaultActiveThreadPercentage=50)]))))
    host = mps.DaemonHost(
        namespace="nvidia-dra-driver", node_name="node-a", image="driver:1",
        command=("gpu-kubelet-plugin", "mps-control-daemon"), host_driver_root="/run/nvidia/driver",
        control_root=ROOT, service_account="sa", image_pull_secrets=("pull",),
    )
    obj = mps.deployment(daemon, host=host)
    assert obj["metadata"]["name"] == daemon.name
    assert obj["metadata"]["namespace"] == "nvidia-dra-driver"
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeName"] == "node-a" and pod["hostPID"] is True
    assert pod["serviceAccountName"] == "sa" and pod["imagePullSecrets"] == [{"name": "pull"}]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == GPU0
    assert env["MPS_CONTROL_COMMANDS"] == "set_default_active_thread_percentage 50"
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    dirs = mps.daemon_dirs(ROOT, daemon.daemon_id)
    assert volumes == {"driver-root": "/run/nvidia/driver", "mps-shm-directory": dirs.shm,
                       "mps-pipe-directory": dirs.pipe, "mps-log-directory": dirs.log}
    assert container["startupProbe"]["exec"]["command"][-1] == "--check"
    assert obj["spec"]["selector"]["matchLabels"] == {"app": daemon.name}


@pytest.mark.parametrize(("ready", "pods", "expected"), [
    (1, [{"status": {"containerStatuses": [{"ready": True}]}}], True),
    (1, [{"status": {"containerStatuses": [{"ready": False}]}}], False),
    (0, [{"status": {"containerStatuses": [{"ready": True}]}}], False),
    (1, [], False),
    (1, [{"status": {}}], False),
])
def test_ready_means_one_ready_replica_whose_container_is_ready(
    ready: int, pods: list[dict[str, Any]], expected: bool
) -> None:
    assert mps.is_ready({"status": {"readyReplicas": ready}}, pods) is expected


def models_inventory(*gpus: Any) -> Any:
    return f.devices.GpuInventory(gpus=gpus)
