"""A plugin taking over a node from upstream's plugin keeps every prepared claim.

The node directory and CDI root are written as upstream's kubelet plugins leave them
(kubernetes-sigs/dra-driver-nvidia-gpu, `cmd/{compute-domain,gpu}-kubelet-plugin`:
`checkpoint.go`, `checkpointv.go`, `cdi.go`): `<plugin dir>/checkpoint.json` holding
`{"checksum", "v1", "v2"}` with the kubelet checkpoint manager's checksums, and one
`k8s.<driver>-claim_<uid>.yaml` spec per claim. Covered: takeover (claims adopted with the CDI
ids upstream answered, our checkpoint under its own name, upstream's file untouched),
re-prepare (no second spec for a device), unprepare (upstream's spec removed), a corrupt
upstream file (left alone), our own earlier `checkpoint.json` (renamed and upgraded), and the
rollback side (upstream's file byte-for-byte as it was). Also: a VFIO claim of a release that
recorded no PCI address (unprepare rebinds the right function), an MPS claim (adopted, an
Event says its MPS sharing stays as upstream left it), and upstream's older layouts: `v1`
alone (adopted, then swept by UID once its claim is gone) and 25.3.0-rc.2's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.fs import vfio as fs_vfio
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.kubeletplugin import driver as cd_driver
from apps.pluginkit.driver import ClaimDriver, PluginPorts
from core import kinds, models, names, upstream_checkpoint
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import node_facts
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import devices

BOOT = "4f1c1a7e-0000-4000-8000-000000000001"
DOMAIN = "7b0a3c1e-1111-4111-8111-111111111111"
CD_CHANNEL_UID = "0b9e3f7a-aaaa-4aaa-8aaa-000000000001"
CD_DAEMON_UID = "0b9e3f7a-aaaa-4aaa-8aaa-000000000002"
GPU_UID = "5d2e8c40-bbbb-4bbb-8bbb-000000000003"
GPU_UUID = "GPU-0c2f1d6e-3b1a-4c55-9a0e-1f2e3d4c5b6a"
OUR_CD_NAME = "computedomain-plugin.checkpoint.json"
OUR_GPU_NAME = "gpu-plugin.checkpoint.json"
V1_FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoint_v1"


# ---------------------------------------------------------------- upstream's files


def _go_json(value: Any) -> str:
    """Go's encoding/json output for these fixtures (dicts built in struct-field order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _device(uid: str, request: str, pool: str, name: str, cdi_name: str, vendor: str) -> Any:
    # Upstream's CheckpointedDevice: Go field names, no json tags.
    return {"Requests": [request], "PoolName": pool, "DeviceName": name,
            "CDIDeviceIDs": [f"k8s.{vendor}/claim={uid}-{cdi_name}"]}


def _upstream_checkpoint(claims: dict[str, Any], *, boot_id: str = BOOT) -> bytes:
    """What upstream's `MarshalCheckpoint` writes: v2, v1 (PrepareCompleted only), checksums."""
    ordered = {uid: claims[uid] for uid in sorted(claims)}  # Go sorts map keys
    v1 = {"preparedClaims": {
        uid: {"status": c["status"], "preparedDevices": c["preparedDevices"]}
        for uid, c in ordered.items() if c["checkpointState"] == "PrepareCompleted"
    }}
    v1_text = _go_json(v1)
    top = upstream_checkpoint.go_checksum(('{"checksum":0,"v1":' + v1_text + "}").encode())
    v2_body = _go_json({"preparedClaims": ordered, "nodeBootID": boot_id})[1:]
    v2_sum = upstream_checkpoint.go_checksum(('{"checksum":0,' + v2_body).encode())
    return f'{{"checksum":{top},"v1":{v1_text},"v2":{{"checksum":{v2_sum},{v2_body}}}'.encode()


def _claim(name: str, devices_: list[Any], config_state: Any) -> Any:
    return {
        "checkpointState": "PrepareCompleted",
        "status": {},  # ResourceClaimStatus: every member omitempty
        "preparedDevices": [{"devices": devices_, "configState": config_state}],
        "name": name,
        "namespace": "team-a",
    }


def _cd_claims() -> dict[str, Any]:
    vendor = "compute-domain.nvidia.com"
    return {
        CD_CHANNEL_UID: _claim("workload-channel", [{
            "channel": {"info": {"id": 0}, "device": _device(
                CD_CHANNEL_UID, "channel", "node-a", "channel-0", "channel-0", vendor)},
            "daemon": None,
        }], {"Type": "ComputeDomainChannelConfig", "ComputeDomain": DOMAIN}),
        CD_DAEMON_UID: _claim("imex-daemon", [{
            "channel": None,
            "daemon": {"info": {"id": 0}, "device": _device(
                CD_DAEMON_UID, "daemon", "node-a", "daemon-0", "daemon-0", vendor)},
        }], {"Type": "ComputeDomainDaemonConfig", "ComputeDomain": DOMAIN}),
    }


def _gpu_claims() -> dict[str, Any]:
    return {GPU_UID: _claim("training-gpu", [{
        "gpu": {"info": {"uuid": GPU_UUID}, "device": _device(
            GPU_UID, "gpu", "node-a", "gpu-0", "gpu-0", "gpu.nvidia.com")},
        "mig": None,
    }], {"timeSliceApplied": True})}


def _upstream_spec(cdi_root: Path, vendor: str, uid: str, device: str) -> Path:
    """Upstream's claim spec: `<vendor>-claim_<uid>.yaml` (the CDI library's default)."""
    path = cdi_root / f"k8s.{vendor}-claim_{uid}.yaml"
    cdi_root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "cdiVersion": "0.5.0",
        "kind": f"k8s.{vendor}/claim",
        "devices": [{"name": f"{uid}-{device}",
                     "containerEdits": {"env": [f"COMPUTE_DOMAIN_UUID={DOMAIN}"]}}],
    }))
    return path


def _cd_node(root: Path) -> bytes:
    data = _upstream_checkpoint(_cd_claims())
    root.mkdir(parents=True, exist_ok=True)
    (root / "checkpoint.json").write_bytes(data)
    _upstream_spec(root / "cdi", "compute-domain.nvidia.com", CD_CHANNEL_UID, "channel-0")
    _upstream_spec(root / "cdi", "compute-domain.nvidia.com", CD_DAEMON_UID, "daemon-0")
    return data


# ---------------------------------------------------------------- our plugins


def _ports(
    root: Path, our_name: str, file_name: Any = None, cluster: Any = None
) -> PluginPorts:
    store = fs_checkpoints.FileCheckpointStore(str(root / our_name))
    cdi = (fs_cdi.CDIDirectory(str(root / "cdi")) if file_name is None
           else fs_cdi.CDIDirectory(str(root / "cdi"), file_name=file_name))
    return PluginPorts(
        cluster=cluster or memory_cluster.InMemoryCluster(), checkpoints=store, cdi=cdi,
        predecessor=fs_checkpoints.PredecessorFile(
            str(root / "checkpoint.json"), successor=store),
    )


def _cd_driver(
    root: Path, *, boot_id: str = BOOT, cluster: Any = None
) -> ClaimDriver[Any, Any, Any, Any]:
    return cd_driver.new_driver(
        ports=_ports(root, OUR_CD_NAME, cluster=cluster),
        node=node_facts.ImexNodeFacts(node_name=names.NodeName("node-a"), clique_id="a.1",
                                      channel_major=242, boot_id=boot_id),
        config=models.DriverConfig(mode=models.IMEXMode.DRIVER_MANAGED,
                                   isolation=models.Isolation.DOMAIN,
                                   gates=models.FeatureGates(values={})),
        clock=lambda: 1_000.0,
        domains=lambda: {},
    )


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_time_slice(self, gpu_uuids: tuple[str, ...], interval: object) -> None:
        self.calls.append(("time-slice", tuple(gpu_uuids)))

    def bind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("bind", pci_bus_id))

    def unbind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("unbind", pci_bus_id))


def _gpu_driver(
    root: Path, recorder: _Recorder, *, inventory: devices.GpuInventory | None = None,
    cluster: Any = None,
) -> ClaimDriver[Any, Any, Any, Any]:
    return gpu_driver.new_driver(
        ports=_ports(root, OUR_GPU_NAME, gpu_cdi.spec_file_name, cluster=cluster),
        node=models.NodeFacts(node_name=names.NodeName("node-a"), boot_id=BOOT),
        gates=models.FeatureGates(values={}),
        inventory=lambda: inventory or devices.GpuInventory(),
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        time_slicer=recorder,
        vfio=recorder,
        clock=lambda: 1_000.0,
    )


def _ref(uid: str, name: str) -> models.ClaimRef:
    return models.ClaimRef(uid=names.ClaimUID(uid), namespace="team-a", name=name)


def _specs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cdi").iterdir())


# ---------------------------------------------------------------- takeover


def test_the_fixture_checksums_are_upstreams() -> None:
    # Computed by upstream's vendored k8s.io/kubernetes checkpointmanager/checksum.New over
    # these exact bytes (a throwaway Go program against the upstream tree's vendor/).
    data = _upstream_checkpoint(_cd_claims())
    document = json.loads(data)
    assert (document["checksum"], document["v2"]["checksum"]) == (3182456573, 3596191943)


def test_takeover_keeps_every_upstream_claim_with_its_cdi_ids(tmp_path: Path) -> None:
    root = tmp_path / "node"
    original = _cd_node(root)
    specs_before = _specs(root)

    recovered = _cd_driver(root).recover()

    claims = _cd_claims()
    assert set(recovered.entries) == set(claims)
    for uid, claim in claims.items():
        entry = recovered.entries[names.ClaimUID(uid)]
        assert entry.state is models.ClaimState.PREPARE_COMPLETED
        assert (entry.namespace, entry.name) == ("team-a", claim["name"])
        upstream_ids = [i for d in claim["preparedDevices"][0]["devices"]
                        for kind in ("channel", "daemon") if d[kind]
                        for i in d[kind]["device"]["CDIDeviceIDs"]]
        assert [i for d in entry.devices for i in d.cdi_device_ids] == upstream_ids
    channel = recovered.entries[names.ClaimUID(CD_CHANNEL_UID)].record
    assert (channel.domain_id, channel.channel_ids) == (DOMAIN, (0,))
    # Our checkpoint has its own name; upstream's file and specs are as upstream left them.
    assert (root / "checkpoint.json").read_bytes() == original
    ours = fs_checkpoints.read_checkpoint(str(root / OUR_CD_NAME), cd_records.CODEC)
    assert ours is not None and ours.entries == recovered.entries
    assert _specs(root) == specs_before


def test_a_restarted_plugin_reads_its_own_file_not_upstreams_again(tmp_path: Path) -> None:
    root = tmp_path / "node"
    original = _cd_node(root)
    driver = _cd_driver(root)
    driver.recover()
    driver.node_unprepare((_ref(CD_DAEMON_UID, "imex-daemon"),))

    again = _cd_driver(root).recover()

    assert set(again.entries) == {names.ClaimUID(CD_CHANNEL_UID)}  # not re-adopted
    assert (root / "checkpoint.json").read_bytes() == original


def test_a_re_prepare_of_an_adopted_claim_writes_no_second_spec(tmp_path: Path) -> None:
    root = tmp_path / "node"
    _cd_node(root)
    driver = _cd_driver(root)
    driver.recover()
    specs_before = _specs(root)

    results = driver.node_prepare((_ref(CD_CHANNEL_UID, "workload-channel"),))

    result = results[names.ClaimUID(CD_CHANNEL_UID)]
    assert result.error == ""
    assert [i for d in result.devices for i in d.cdi_device_ids] == [
        f"k8s.compute-domain.nvidia.com/claim={CD_CHANNEL_UID}-channel-0"]
    assert _specs(root) == specs_before  # upstream's .yaml only, no .json beside it


def test_unprepare_removes_upstreams_spec_and_leaves_its_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "node"
    original = _cd_node(root)
    driver = _cd_driver(root)
    driver.recover()

    results = driver.node_unprepare((
        _ref(CD_CHANNEL_UID, "workload-channel"), _ref(CD_DAEMON_UID, "imex-daemon"),
    ))

    assert {uid: r.error for uid, r in results.items()} == {
        names.ClaimUID(CD_CHANNEL_UID): "", names.ClaimUID(CD_DAEMON_UID): ""}
    assert _specs(root) == []
    ours = fs_checkpoints.read_checkpoint(str(root / OUR_CD_NAME), cd_records.CODEC)
    assert ours is not None and ours.entries == {}
    # Rollback side: upstream's checkpoint is byte-for-byte what upstream wrote.
    assert (root / "checkpoint.json").read_bytes() == original


def test_a_gpu_takeover_adopts_the_claim_and_undoes_its_time_slice(tmp_path: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    original = _upstream_checkpoint(_gpu_claims())
    (root / "checkpoint.json").write_bytes(original)
    _upstream_spec(root / "cdi", "gpu.nvidia.com", GPU_UID, "gpu-0")
    recorder = _Recorder()
    driver = _gpu_driver(root, recorder)

    recovered = driver.recover()

    entry = recovered.entries[names.ClaimUID(GPU_UID)]
    assert [i for d in entry.devices for i in d.cdi_device_ids] == [
        f"k8s.gpu.nvidia.com/claim={GPU_UID}-gpu-0"]
    assert entry.record.time_sliced == (GPU_UUID,)
    assert [h.name for h in entry.record.held] == ["gpu-0"]
    assert fs_checkpoints.read_checkpoint(str(root / OUR_GPU_NAME), gpu_records.CODEC)

    driver.node_unprepare((_ref(GPU_UID, "training-gpu"),))

    assert _specs(root) == []
    assert any(kind == "time-slice" and GPU_UUID in str(what) for kind, what in recorder.calls)
    assert (root / "checkpoint.json").read_bytes() == original


def test_a_corrupt_upstream_checkpoint_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "node"
    _cd_node(root)
    tampered = (root / "checkpoint.json").read_bytes().replace(b"channel-0", b"channel-1")
    (root / "checkpoint.json").write_bytes(tampered)

    recovered = _cd_driver(root).recover()

    assert recovered.entries == {}  # nothing of ours proves a claim
    assert (root / "checkpoint.json").read_bytes() == tampered
    assert not list(root.glob("checkpoint.json.corrupt-*"))


def test_our_own_earlier_checkpoint_json_is_renamed_and_read(tmp_path: Path) -> None:
    root = tmp_path / "cd-driver-managed"
    shutil.copytree(V1_FIXTURES / "cd-driver-managed", root)
    before = fs_checkpoints.read_checkpoint(str(root / "checkpoint.json"), cd_records.CODEC)
    assert before is not None and before.format_version == 1
    manifest = json.loads((V1_FIXTURES / "manifest.json").read_text())["cases"]
    clock = max(c["updatedAt"] for c in manifest["cd-driver-managed"]["claims"].values()) + 1
    driver = cd_driver.new_driver(
        ports=_ports(root, OUR_CD_NAME),
        node=node_facts.ImexNodeFacts(node_name=names.NodeName("gb200-rack1-node01"),
                                      clique_id="a.1", channel_major=242,
                                      boot_id=manifest["cd-driver-managed"]["bootID"]),
        config=models.DriverConfig(mode=models.IMEXMode.DRIVER_MANAGED,
                                   isolation=models.Isolation.DOMAIN,
                                   gates=models.FeatureGates(values={})),
        clock=lambda: clock,
        domains=lambda: {},
    )

    recovered = driver.recover()

    assert not (root / "checkpoint.json").exists()
    assert not (root / "checkpoint.json.journal").exists()
    after = fs_checkpoints.read_checkpoint(str(root / OUR_CD_NAME), cd_records.CODEC)
    # Renamed as it was: version 1 until the next compaction (no O(claims) rewrite at start).
    assert after is not None and after.format_version == 1
    assert after.entries == before.entries == recovered.entries


# ---------------------------------------------------------------- VFIO and MPS claims

VFIO_PCI = "0000:41:00.0"


def _node_events(cluster: memory_cluster.InMemoryCluster, reason: str) -> list[str]:
    return [e["message"] for e in cluster.list(kinds.EVENT.kind, namespace="default").items
            if e["reason"] == reason]


def _vfio_function(index: int, pci: str) -> devices.VfioDeviceInfo:
    return devices.VfioDeviceInfo(
        index=index, uuid=fs_vfio.vfio_uuid(pci), device_id="0x2330", vendor_id="0x10de",
        product_name="NVIDIA H100 80GB HBM3", pci_bus_id=pci, iommu_group=30 + index,
        addressable_memory_bytes=2**37, parent_minor=index,
    )


def test_an_adopted_vfio_claim_without_a_pci_address_is_rebound_at_unprepare(
    tmp_path: Path,
) -> None:
    # 25.12.0 and before record a VFIO function's UUID only (derived from its address); the
    # name upstream gave it ("gpu-vfio-3") is not the index discovery gives it here.
    root = tmp_path / "node"
    root.mkdir()
    claims = {GPU_UID: _claim("vm", [{
        "gpu": None, "mig": None,
        "vfio": {"info": {"uuid": fs_vfio.vfio_uuid(VFIO_PCI)}, "device": _device(
            GPU_UID, "vfio", "node-a", "gpu-vfio-3", "gpu-vfio-3", "gpu.nvidia.com")},
    }], {})}
    original = _upstream_checkpoint(claims)
    (root / "checkpoint.json").write_bytes(original)
    _upstream_spec(root / "cdi", "gpu.nvidia.com", GPU_UID, "gpu-vfio-3")
    recorder = _Recorder()
    inventory = devices.GpuInventory(vfios=(
        _vfio_function(0, "0000:40:00.0"), _vfio_function(1, VFIO_PCI),
    ))
    driver = _gpu_driver(root, recorder, inventory=inventory)

    recovered = driver.recover()

    (held,) = recovered.entries[names.ClaimUID(GPU_UID)].record.held
    assert (held.kind, held.pci_bus_id) == ("vfio", VFIO_PCI)

    driver.node_unprepare((_ref(GPU_UID, "vm"),))

    assert recorder.calls == [("unbind", VFIO_PCI)]
    assert _specs(root) == []
    assert (root / "checkpoint.json").read_bytes() == original


def test_an_adopted_mps_claim_stays_prepared_and_an_event_says_so(tmp_path: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    daemon_id = f"{GPU_UID}-0a1b2"
    claims = _gpu_claims()
    claims[GPU_UID]["preparedDevices"][0]["configState"] = {
        "mpsControlDaemonID": daemon_id, "mpsApplied": True}
    (root / "checkpoint.json").write_bytes(_upstream_checkpoint(claims))
    _upstream_spec(root / "cdi", "gpu.nvidia.com", GPU_UID, "gpu-0")
    cluster = memory_cluster.InMemoryCluster()
    driver = _gpu_driver(root, _Recorder(), cluster=cluster)

    recovered = driver.recover()

    entry = recovered.entries[names.ClaimUID(GPU_UID)]
    assert entry.state is models.ClaimState.PREPARE_COMPLETED
    (message,) = _node_events(cluster, "UpstreamMPSLeftAsIs")
    assert f"team-a/training-gpu ({GPU_UID})" in message
    assert f"mps-control-daemon-{daemon_id}" in message
    assert "stays as upstream left it" in message
    # Refuses nothing: a re-prepare answers the CDI ids upstream answered.
    result = driver.node_prepare((_ref(GPU_UID, "training-gpu"),))[names.ClaimUID(GPU_UID)]
    assert result.error == ""
    assert [i for d in result.devices for i in d.cdi_device_ids] == [
        f"k8s.gpu.nvidia.com/claim={GPU_UID}-gpu-0"]


# ---------------------------------------------------------------- older layouts


def _v1_only_checkpoint(claims: dict[str, Any]) -> bytes:
    """What upstream 25.3.0-rc.3 to 25.3.x wrote: `v1` claim objects alone, one checksum."""
    v1_text = _go_json({"preparedClaims": {uid: claims[uid] for uid in sorted(claims)}})
    top = upstream_checkpoint.go_checksum(('{"checksum":0,"v1":' + v1_text + "}").encode())
    return f'{{"checksum":{top},"v1":{v1_text}}}'.encode()


def _cluster_claim(cluster: memory_cluster.InMemoryCluster, name: str) -> str:
    created = cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace="team-a", name=name, subresource="status",
        patch={"status": {"allocation": {"devices": {"results": [{
            "request": "channel", "driver": names.DRIVER_NAME, "pool": "node-a",
            "device": "channel-0"}]}}}},
    )
    return str(created["metadata"]["uid"])


def _v1_channel(uid: str, channel: int) -> Any:
    vendor = "compute-domain.nvidia.com"
    return {"status": {}, "preparedDevices": [{"devices": [{
        "channel": {"info": {"id": channel}, "device": _device(
            uid, "channel", "node-a", f"channel-{channel}", f"channel-{channel}", vendor)},
        "daemon": None,
    }], "configState": {"Type": "ComputeDomainChannelConfig", "ComputeDomain": DOMAIN}}]}


def test_a_v1_only_checkpoint_is_adopted_and_its_gone_claims_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    cluster = memory_cluster.InMemoryCluster()
    kept, gone = _cluster_claim(cluster, "kept"), _cluster_claim(cluster, "gone")
    original = _v1_only_checkpoint({kept: _v1_channel(kept, 0), gone: _v1_channel(gone, 0)})
    (root / "checkpoint.json").write_bytes(original)
    for uid in (kept, gone):
        _upstream_spec(root / "cdi", "compute-domain.nvidia.com", uid, "channel-0")
    driver = _cd_driver(root, cluster=cluster)

    recovered = driver.recover()

    assert set(recovered.entries) == {kept, gone}
    for uid in (kept, gone):
        entry = recovered.entries[names.ClaimUID(uid)]
        assert (entry.state, entry.name) == (models.ClaimState.PREPARE_COMPLETED, "")
        assert entry.record.channel_ids == (0,)
        assert [i for d in entry.devices for i in d.cdi_device_ids] == [
            f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"]
    (adopted,) = _node_events(cluster, "UpstreamCheckpointAdopted")
    assert "v1 format of 25.3.x" in adopted

    # No names in a V1 file: the sweeper matches the entries to claims by UID.
    cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace="team-a", name="gone")
    removed = driver.clean_stale_claims()

    assert [r.entry.claim_uid for r in removed] == [gone]
    ours = fs_checkpoints.read_checkpoint(str(root / OUR_CD_NAME), cd_records.CODEC)
    assert ours is not None and set(ours.entries) == {kept}
    assert _specs(root) == [f"k8s.compute-domain.nvidia.com-claim_{kept}.yaml"]
    assert (root / "checkpoint.json").read_bytes() == original


def _rc2503_checkpoint(claims: dict[str, Any]) -> bytes:
    """What upstream 25.3.0-rc.1/rc.2 wrote: claim UID -> device groups, protobuf Devices."""
    v1_text = _go_json({"preparedClaims": {uid: claims[uid] for uid in sorted(claims)}})
    top = upstream_checkpoint.go_checksum(('{"checksum":0,"v1":' + v1_text + "}").encode())
    return f'{{"checksum":{top},"v1":{v1_text}}}'.encode()


def test_a_2503rc2_checkpoint_is_adopted_and_unprepared(tmp_path: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    cdi_id = f"k8s.compute-domain.nvidia.com/claim={CD_CHANNEL_UID}-channel-0"
    original = _rc2503_checkpoint({CD_CHANNEL_UID: [{"devices": [{
        "channel": {"info": {"id": 0}, "device": {
            "request_names": ["channel"], "pool_name": "node-a", "device_name": "channel-0",
            "cdi_device_ids": [cdi_id]}},
        "daemon": None,
    }], "configState": {"Type": "ComputeDomainChannelConfig", "ComputeDomain": DOMAIN}}]})
    (root / "checkpoint.json").write_bytes(original)
    _upstream_spec(root / "cdi", "compute-domain.nvidia.com", CD_CHANNEL_UID, "channel-0")
    cluster = memory_cluster.InMemoryCluster()
    driver = _cd_driver(root, cluster=cluster)

    recovered = driver.recover()

    entry = recovered.entries[names.ClaimUID(CD_CHANNEL_UID)]
    assert (entry.record.domain_id, entry.record.channel_ids) == (DOMAIN, (0,))
    assert [i for d in entry.devices for i in d.cdi_device_ids] == [cdi_id]
    (adopted,) = _node_events(cluster, "UpstreamCheckpointAdopted")
    assert "25.3.0-rc.2" in adopted

    driver.node_unprepare((_ref(CD_CHANNEL_UID, "workload-channel"),))

    assert _specs(root) == []
    assert (root / "checkpoint.json").read_bytes() == original


def test_an_upstream_checkpoint_of_no_known_layout_is_refused_saying_what_to_do(
    tmp_path: Path,
) -> None:
    root = tmp_path / "node"
    root.mkdir()
    data = _rc2503_checkpoint({CD_CHANNEL_UID: "not a claim"})
    (root / "checkpoint.json").write_bytes(data)
    cluster = memory_cluster.InMemoryCluster()

    recovered = _cd_driver(root, cluster=cluster).recover()

    assert recovered.entries == {}
    (message,) = _node_events(cluster, "UpstreamCheckpointUnreadable")
    assert "25.3.0-rc.2" in message and "drain the node's pods" in message
    assert (root / "checkpoint.json").read_bytes() == data
