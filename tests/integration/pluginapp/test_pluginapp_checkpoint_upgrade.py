"""A plugin upgraded in place keeps every claim the previous release prepared.

Each case under tests/fixtures/checkpoint_v1 is a plugin directory as the release before the
typed records (format version 1) left it: snapshot, journal and CDI specs, both halves, both
IMEX modes. The new plugin starts on a copy: it keeps every entry and every spec file, and
writes nothing in its own format yet (the journal follows its snapshot's format until the
next compaction, so a rollback still reads both), and then unprepares each claim as the
kubelet would, which removes exactly what was prepared.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.kubeletplugin import driver as cd_driver
from apps.pluginkit.driver import ClaimDriver, PluginPorts
from core import checkpoint, models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import node_facts
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import devices

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoint_v1"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text())["cases"]


def _copy(case: str, tmp_path: Path) -> Path:
    root = tmp_path / case
    shutil.copytree(FIXTURES / case, root)
    return root


def _clock(case: str) -> float:
    # The files' own time: their tombstones are not yet expired.
    return max(c["updatedAt"] for c in MANIFEST[case]["claims"].values()) + 1.0


def _node(case: str) -> node_facts.ImexNodeFacts:
    return node_facts.ImexNodeFacts(node_name=names.NodeName("gb200-rack1-node01"), clique_id="a.1",
                            channel_major=242, boot_id=MANIFEST[case]["bootID"])


def _cd_driver(case: str, root: Path) -> ClaimDriver[Any, Any, Any, Any]:
    config = MANIFEST[case]["config"]
    return cd_driver.new_driver(
        ports=PluginPorts(
            cluster=memory_cluster.InMemoryCluster(),
            checkpoints=fs_checkpoints.FileCheckpointStore(str(root / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(root / "cdi")),
        ),
        node=_node(case),
        config=models.DriverConfig(
            mode=models.IMEXMode(config["mode"]), isolation=models.Isolation(config["isolation"]),
            gates=models.FeatureGates(values={}),
        ),
        clock=lambda: _clock(case),
        domains=lambda: {},
    )


def _gpu_driver(
    case: str, root: Path, recorder: _Recorder | None = None
) -> ClaimDriver[Any, Any, Any, Any]:
    recorder = recorder or _Recorder()
    return gpu_driver.new_driver(
        ports=PluginPorts(
            cluster=memory_cluster.InMemoryCluster(),
            checkpoints=fs_checkpoints.FileCheckpointStore(str(root / "checkpoint.json")),
            cdi=fs_cdi.CDIDirectory(str(root / "cdi"), file_name=gpu_cdi.spec_file_name),
        ),
        node=models.NodeFacts(node_name=names.NodeName("node-a"),
                              boot_id=MANIFEST[case]["bootID"]),
        gates=models.FeatureGates(values={}),
        inventory=lambda: devices.GpuInventory(),
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        time_slicer=recorder,
        vfio=recorder,
        clock=lambda: _clock(case),
    )


class _Recorder:
    """Stands in for the time-slicer and the vfio binder: what the undo asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_time_slice(self, gpu_uuids: tuple[str, ...], interval: object) -> None:
        self.calls.append(("time-slice", (tuple(gpu_uuids), interval)))

    def bind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("bind", pci_bus_id))

    def unbind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("unbind", pci_bus_id))


CASES = [
    ("cd-host-managed", _cd_driver, cd_records.CODEC),
    ("cd-host-managed-channel", _cd_driver, cd_records.CODEC),
    ("cd-driver-managed", _cd_driver, cd_records.CODEC),
    ("gpu", _gpu_driver, gpu_records.CODEC),
    ("gpu-legacy-no-record", _gpu_driver, gpu_records.CODEC),
]


@pytest.mark.parametrize(("case", "make", "codec"), CASES, ids=[c[0] for c in CASES])
def test_an_upgraded_plugin_keeps_every_claim_and_the_previous_release_can_still_read_it(
    tmp_path: Path, case: str, make: Any, codec: models.RecordCodec[Any]
) -> None:
    root = _copy(case, tmp_path)
    specs_before = sorted(p.name for p in (root / "cdi").iterdir())
    before = fs_checkpoints.read_checkpoint(str(root / "checkpoint.json"), codec)
    assert before is not None and before.format_version == 1

    driver = make(case, root)
    recovered = driver.recover()

    snapshot = json.loads((root / "checkpoint.json").read_bytes())
    assert snapshot["version"] == 1  # no rewrite at start: that costs O(claims)
    after = fs_checkpoints.read_checkpoint(str(root / "checkpoint.json"), codec)
    assert after is not None and after.format_version == 1
    assert after.entries == before.entries == recovered.entries
    assert set(after.entries) == set(MANIFEST[case]["claims"])
    assert sorted(p.name for p in (root / "cdi").iterdir()) == specs_before  # none orphaned


@pytest.mark.parametrize(("case", "make", "codec"), CASES, ids=[c[0] for c in CASES])
def test_every_upgraded_claim_unprepares_as_it_was_prepared(
    tmp_path: Path, case: str, make: Any, codec: models.RecordCodec[Any]
) -> None:
    root = _copy(case, tmp_path)
    driver = make(case, root)
    driver.recover()
    claims = MANIFEST[case]["claims"]
    refs = tuple(
        models.ClaimRef(uid=names.ClaimUID(uid), namespace=c["namespace"], name=c["name"])
        for uid, c in sorted(claims.items())
    )
    results = driver.node_unprepare(refs)
    assert {uid: r.error for uid, r in results.items()} == {r.uid: "" for r in refs}
    after = fs_checkpoints.read_checkpoint(str(root / "checkpoint.json"), codec)
    assert after is not None
    # The unprepares went to the journal in the snapshot's format: version 1, as the
    # previous release writes it (a rollback reads it).
    journal = (root / "checkpoint.json.journal").read_bytes()
    assert b'"computeDomain"' not in journal
    if b'"put"' in journal:  # a tombstone of a started claim: the entry in version 1's shape
        assert b'"mode":' in journal
    # Only tombstones stay (until they expire): a late retry of their prepare still fails.
    tombstones = {uid for uid, c in claims.items() if c["state"] == "PrepareAborted"}
    assert set(after.entries) == tombstones
    assert list((root / "cdi").iterdir()) == []


def test_an_upgraded_gpu_claim_is_undone_as_its_record_says(tmp_path: Path) -> None:
    root = _copy("gpu", tmp_path)
    recorder = _Recorder()
    driver = _gpu_driver("gpu", root, recorder)
    driver.recover()
    claims = MANIFEST["gpu"]["claims"]
    driver.node_unprepare(tuple(
        models.ClaimRef(uid=names.ClaimUID(uid), namespace=c["namespace"], name=c["name"])
        for uid, c in sorted(claims.items())
    ))
    assert ("unbind", "0000:40:00.0") in recorder.calls  # the VFIO claim's function given back
    resets = [what for kind, what in recorder.calls if kind == "time-slice"]
    # the time-slice the claim set, reset
    assert any("GPU-00000000-0000-0000-0000-000000000000" in str(what) for what in resets)


def test_an_upgraded_checkpoint_encoded_again_is_this_release_s_format(
    tmp_path: Path,
) -> None:
    root = _copy("cd-host-managed", tmp_path)
    driver = _cd_driver("cd-host-managed", root)
    current = driver.recover()
    assert current.format_version == 1
    # What the next compaction writes (`write_snapshot` encodes with the default version).
    data = checkpoint.encode(current)
    assert checkpoint.decode(data, cd_records.CODEC).format_version == 2
    assert checkpoint.decode(data, cd_records.CODEC).entries == current.entries
