"""What the GPU plugin's service does when device metadata cannot be written or removed (gate
DeviceMetadata): the claim's answer says so, and nothing prepared is lost.

Driven against the real metadata files adapter (a file where it needs a directory), the
embedded API server for the claim, and a stand-in claim driver (the service's inner port).
Covers: a failed write fails that claim's prepare with the adapter's message (the kubelet
retries; the driver's answer for other claims stands); a failed removal fails the unprepare;
a claim the inner driver refused gets no metadata; the republish after a call failing never
changes the answer; a stale-claim round that dropped entries removes their metadata (a
failure is logged, the round goes on) and republishes.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Mapping

import pytest

from adapters.fs import device_metadata as fs_device_metadata
from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import served_claims
from core import checkpoint as checkpoints
from core import kinds, models, names, ports

UID = names.ClaimUID("c0ffee00-0000-4000-8000-000000000001")
OTHER = names.ClaimUID("c0ffee00-0000-4000-8000-000000000002")
REF = models.ClaimRef(uid=UID, namespace="ml", name="vm")
REFUSED = models.ClaimRef(uid=OTHER, namespace="ml", name="refused")
DEVICE = models.PreparedDevice(
    request_names=("gpu",), pool_name="node-a", device_name="gpu-vfio-0",
    cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={UID}-gpu-vfio-0",),
)


class StandInDriver:
    """Answers every claim as prepared with `DEVICE`, except `REFUSED`."""

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return {
            ref.uid: models.ClaimResult(error="refused") if ref == REFUSED
            else models.ClaimResult(devices=(DEVICE,))
            for ref in claims
        }

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return {ref.uid: models.ClaimResult() for ref in claims}


def service(root: pathlib.Path, *, after: list[str]) -> served_claims.GpuPluginService:
    cluster = memory_cluster.InMemoryCluster(uid_factory=lambda: str(UID))
    cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "vm", "namespace": "ml", "uid": UID}, "spec": {},
    })

    def republish() -> None:
        after.append("republish")
        raise RuntimeError("API server down")

    return served_claims.GpuPluginService(
        StandInDriver(), cluster=cluster, driver_name="gpu.nvidia.com",
        plugin_dir=str(root / "plugin"),
        metadata=fs_device_metadata.MetadataFiles(
            driver="gpu.nvidia.com", plugin_dir=str(root / "plugin"), cdi_root=str(root / "cdi")
        ),
        after_call=republish,
    )


def test_a_metadata_file_that_cannot_be_written_fails_that_claim_only(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path
    (root / "plugin").write_text("not a directory")
    after: list[str] = []
    answers = service(root, after=after).node_prepare((REF, REFUSED))
    assert answers[OTHER] == models.ClaimResult(error="refused")
    assert answers[UID].devices == ()
    assert answers[UID].error.startswith("write device metadata: cannot write device metadata")
    assert "must be writable" in answers[UID].error
    assert after == ["republish"]  # failed, and the answers stand


def test_metadata_that_cannot_be_removed_fails_the_unprepare(tmp_path: pathlib.Path) -> None:
    root = tmp_path
    after: list[str] = []
    served = service(root, after=after)
    prepared = served.node_prepare((REF,))[UID]
    assert prepared.devices[0].cdi_device_ids[-1] == f"gpu.nvidia.com/metadata={UID}_gpu"
    claim_dir = root / "plugin" / "dra-device-metadata" / "ml_vm"
    shutil.rmtree(claim_dir)
    claim_dir.write_text("not a directory")
    answer = served.node_unprepare((REF,))[UID]
    assert answer.error.startswith("clean up device metadata: cannot remove device metadata")
    claim_dir.unlink()
    assert served.node_unprepare((REF,))[UID] == models.ClaimResult()
    assert list((root / "cdi").iterdir()) == []


def stale(ref: models.ClaimRef, *, name: str = "") -> checkpoints.StaleEntry[object]:
    entry = models.CheckpointEntry(
        claim_uid=ref.uid, namespace=ref.namespace, name=name or ref.name,
        state=models.ClaimState.PREPARE_COMPLETED, record=object(),
    )
    return checkpoints.StaleEntry(entry=entry, reason=checkpoints.StaleReason.DELETED)


def test_a_stale_claims_metadata_goes_with_its_entry(tmp_path: pathlib.Path) -> None:
    after: list[str] = []
    served = service(tmp_path, after=after)
    served.node_prepare((REF,))
    claim_dir = tmp_path / "plugin" / "dra-device-metadata" / "ml_vm"
    assert claim_dir.is_dir() and len(list((tmp_path / "cdi").iterdir())) == 1
    served.after_stale_cleanup(())
    assert after == ["republish"]  # nothing dropped: nothing to do
    served.after_stale_cleanup((stale(REF),))
    assert not claim_dir.exists()
    assert list((tmp_path / "cdi").iterdir()) == []
    assert after == ["republish", "republish"]


def test_a_stale_claims_metadata_that_cannot_go_is_logged_and_the_round_goes_on(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
) -> None:
    served = service(tmp_path, after=[])
    served.node_prepare((REF,))
    claim_dir = tmp_path / "plugin" / "dra-device-metadata" / "ml_vm"
    shutil.rmtree(claim_dir)
    claim_dir.write_text("not a directory")
    served.after_stale_cleanup((stale(REF),))
    assert "event=device_metadata_cleanup_failed claim=ml/vm" in caplog.text


def test_the_kubelets_empty_probe_publishes_nothing(tmp_path: pathlib.Path) -> None:
    after: list[str] = []
    served = service(tmp_path, after=after)
    assert served.node_prepare(()) == {} and served.node_unprepare(()) == {}
    assert after == []
