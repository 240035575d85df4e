"""The probe report codec: round trips, translation to fabric records and to the GPU
inventory, reports of older probes, and rejection of junk."""

from __future__ import annotations

import json

import hypothesis
import pytest
from hypothesis import strategies as st

from adapters.nvml import _codec
from core import models
from core.gpu import devices, migprofiles

CLUSTER = bytes(range(16))


def _gpu(**overrides: object) -> _codec.ProbeGpu:
    fields: dict[str, object] = {
        "index": 0,
        "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "name": "NVIDIA GB200",
        "call": _codec.FabricCall.LEGACY,
        "state": 3,
        "cluster_uuid": CLUSTER,
        "clique_id": 7,
        "status": 0,
    }
    fields.update(overrides)
    return _codec.ProbeGpu(**fields)  # type: ignore[arg-type]


counts = st.integers(0, 2**40)
maybe_int = st.none() | counts
maybe_text = st.none() | st.text()
migs = st.builds(
    _codec.ProbeMig,
    uuid=st.text(),
    profile=st.text(),
    gi_profile_id=counts,
    gi_id=counts,
    ci_id=counts,
    placement_start=counts,
    placement_size=counts,
    memory_bytes=counts,
    multiprocessors=counts,
    copy_engines=counts,
    decoders=counts,
    encoders=counts,
    jpeg_engines=counts,
    ofa_engines=counts,
    gi_cap_minor=maybe_int,
    ci_cap_minor=maybe_int,
)
gpus = st.builds(
    _codec.ProbeGpu,
    index=st.integers(0, 63),
    uuid=st.text(min_size=1),
    name=st.text(),
    call=st.sampled_from(_codec.FabricCall),
    state=st.integers(0, 3),
    cluster_uuid=st.binary(min_size=16, max_size=16),
    clique_id=st.integers(0, 2**32 - 1),
    status=st.integers(0, 999),
    note=st.text(),
    minor=maybe_int,
    brand=maybe_text,
    architecture=maybe_text,
    cuda_compute_capability=maybe_text,
    pci_bus_id=maybe_text,
    memory_bytes=maybe_int,
    mig_capable=st.booleans(),
    mig_enabled=st.booleans(),
    addressing_mode=maybe_text,
    numa_node=maybe_int,
    pcie_root=maybe_text,
    module_id=maybe_int,
    skipped_calls=st.lists(st.text(), max_size=3).map(tuple),
    migs=st.lists(migs, max_size=3).map(tuple),
)


@hypothesis.given(
    report=st.builds(
        _codec.ProbeReport,
        driver_version=st.text(),
        gpus=st.tuples(gpus, gpus),
        cuda_driver_version=maybe_text,
    )
)
def test_probe_report_round_trips(report: _codec.ProbeReport) -> None:
    assert _codec.decode_probe_output(_codec.encode_report(report)) == report


@pytest.mark.parametrize("reason", list(_codec.FailureReason))
def test_probe_failure_round_trips(reason: _codec.FailureReason) -> None:
    failure = _codec.ProbeFailure(reason=reason, message="nvmlInit: Driver Not Loaded")
    assert _codec.decode_probe_output(_codec.encode_failure(failure)) == failure


def test_fabric_record_carries_state_cluster_clique_and_status() -> None:
    record = _codec.fabric_record(_gpu(status=0))
    assert record == models.FabricRecord(
        gpu_uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",
        state=models.FabricState.COMPLETED,
        cluster_uuid=CLUSTER,
        clique_id=7,
        status_ok=True,
    )


def test_fabric_record_with_nonzero_nvml_status_is_not_ok() -> None:
    assert _codec.fabric_record(_gpu(status=999)).status_ok is False


def test_fabric_records_are_sorted_by_gpu_uuid() -> None:
    report = _codec.ProbeReport(
        driver_version="580.65.06",
        gpus=(_gpu(index=0, uuid="GPU-b"), _gpu(index=1, uuid="GPU-a")),
    )
    assert [r.gpu_uuid for r in _codec.fabric_records(report)] == ["GPU-a", "GPU-b"]


def test_unknown_fabric_state_is_rejected_naming_the_gpu() -> None:
    with pytest.raises(_codec.ProbeOutputError, match="GPU-x reports unknown NVML fabric state 9"):
        _codec.fabric_record(_gpu(uuid="GPU-x", state=9))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "not JSON"),
        ("Segmentation fault", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"schema": 2, "ok": true}', "schema 2"),
        ('{"schema": 1}', "'ok' must be true or false"),
        ('{"schema": 1, "ok": false, "reason": "weird", "message": ""}', "unknown failure"),
        ('{"schema": 1, "ok": true, "driver_version": "1"}', "'gpus' must be a list"),
    ],
)
def test_malformed_probe_output_is_rejected(text: str, complaint: str) -> None:
    with pytest.raises(_codec.ProbeOutputError, match=complaint):
        _codec.decode_probe_output(text)


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("cluster_uuid", "zz", "not hex"),
        ("cluster_uuid", "00ff", "has 2 bytes"),
        ("call", "magic", "unknown fabric call"),
        ("state", "3", "'state' must be an integer"),
        ("clique_id", True, "'clique_id' must be an integer"),
        ("uuid", None, "'uuid' must be a string"),
    ],
)
def test_malformed_gpu_entry_is_rejected(field: str, value: object, complaint: str) -> None:
    obj = json.loads(_codec.encode_report(_codec.ProbeReport(driver_version="x", gpus=(_gpu(),))))
    obj["gpus"][0][field] = value
    with pytest.raises(_codec.ProbeOutputError, match=complaint):
        _codec.decode_probe_output(json.dumps(obj))


# What a probe from before the GPU half printed: fabric fields only.
OLD_PROBE_LINE = json.dumps(
    {
        "schema": 1,
        "ok": True,
        "driver_version": "580.65.06",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-1",
                "name": "NVIDIA GB200",
                "call": "legacy",
                "state": 3,
                "cluster_uuid": CLUSTER.hex(),
                "clique_id": 7,
                "status": 0,
                "note": "",
            }
        ],
    }
)


def test_old_probe_line_still_decodes_with_gpu_details_empty() -> None:
    report = _codec.decode_probe_output(OLD_PROBE_LINE)
    assert isinstance(report, _codec.ProbeReport)
    assert report.cuda_driver_version is None
    (gpu,) = report.gpus
    assert gpu == _gpu(uuid="GPU-1")
    assert (gpu.minor, gpu.pci_bus_id, gpu.mig_enabled, gpu.migs) == (None, None, False, ())
    assert [r.clique_id for r in _codec.fabric_records(report)] == [7]


def test_old_probe_line_gives_no_gpu_inventory_and_says_why() -> None:
    report = _codec.decode_probe_output(OLD_PROBE_LINE)
    assert isinstance(report, _codec.ProbeReport)
    with pytest.raises(_codec.ProbeOutputError) as caught:
        _codec.gpu_inventory(report)
    message = str(caught.value)
    assert "GPU GPU-1 (index 0)" in message
    assert "minor, pci_bus_id, cuda_compute_capability, cuda_driver_version" in message
    assert "a probe older than this plugin?" in message


A100_MIG = _codec.ProbeMig(
    uuid="MIG-1",
    profile="3g.20gb",
    gi_profile_id=9,
    gi_id=2,
    ci_id=0,
    placement_start=4,
    placement_size=4,
    memory_bytes=19968 * 2**20,
    multiprocessors=42,
    copy_engines=3,
    decoders=2,
    gi_cap_minor=21,
    ci_cap_minor=22,
)


def _detailed(**overrides: object) -> _codec.ProbeGpu:
    fields: dict[str, object] = {
        "uuid": "GPU-a100",
        "name": "NVIDIA A100-SXM4-40GB",
        "state": 0,
        "minor": 3,
        "brand": "Nvidia",
        "architecture": "Ampere",
        "cuda_compute_capability": "8.0",
        "pci_bus_id": "0000:07:00.0",
        "memory_bytes": 40960 * 2**20,
        "mig_capable": True,
        "mig_enabled": True,
        "numa_node": 0,
        "pcie_root": "pci0000:00",
        "migs": (A100_MIG,),
    }
    fields.update(overrides)
    return _gpu(**fields)


def _report(*gpus: _codec.ProbeGpu, cuda: str | None = "13.0") -> _codec.ProbeReport:
    return _codec.ProbeReport(driver_version="580.65.06", gpus=gpus, cuda_driver_version=cuda)


def test_gpu_inventory_carries_every_gpu_fact_and_its_mig_devices() -> None:
    inventory = _codec.gpu_inventory(_report(_detailed()))
    assert inventory.gpus == (
        devices.GpuInfo(
            minor=3,
            index=0,
            uuid="GPU-a100",
            product_name="NVIDIA A100-SXM4-40GB",
            brand="Nvidia",
            architecture="Ampere",
            cuda_compute_capability="8.0",
            driver_version="580.65.06",
            cuda_driver_version="13.0",
            pci_bus_id="0000:07:00.0",
            memory_bytes=40960 * 2**20,
            pcie_root="pci0000:00",
            numa_node=0,
            mig_capable=True,
            mig_enabled=True,
            mig_profiles=migprofiles.A100_40GB,
        ),
    )
    (mig,) = inventory.migs
    assert (mig.parent_uuid, mig.parent_minor) == ("GPU-a100", 3)
    assert mig.name == "gpu-3-mig-3g20gb-9-4"
    assert (mig.gi_cap_minor, mig.ci_cap_minor, mig.multiprocessors) == (21, 22, 42)
    assert inventory.vfios == ()


def test_mig_profiles_come_from_the_tables_by_product_and_only_when_mig_capable() -> None:
    unknown, incapable = _detailed(name="NVIDIA H9000", migs=()), _detailed(
        mig_capable=False, mig_enabled=False, migs=())
    h100 = _detailed(name="NVIDIA H100 80GB HBM3", migs=())
    profiles = [g.mig_profiles for g in (_codec.gpu_inventory(_report(gpu)).gpus[0]
                                         for gpu in (unknown, incapable, h100))]
    assert profiles == [(), (), migprofiles.H100_80GB]


def test_gpu_inventory_carries_the_module_id_fabric_manager_names() -> None:
    gpus = _codec.gpu_inventory(_report(_detailed(module_id=5, migs=()))).gpus
    assert [gpu.module_id for gpu in gpus] == [5]
    assert _codec.gpu_inventory(_report(_detailed(migs=()))).gpus[0].module_id is None


def test_gpu_inventory_lists_gpus_in_nvml_index_order() -> None:
    report = _report(_detailed(index=1, minor=1, migs=()), _detailed(index=0, minor=0, migs=()))
    assert [gpu.index for gpu in _codec.gpu_inventory(report).gpus] == [0, 1]


def test_unnamed_brand_and_architecture_read_unknown_and_unread_memory_zero() -> None:
    gpu = _detailed(brand=None, architecture=None, memory_bytes=None, migs=())
    (info,) = _codec.gpu_inventory(_report(gpu)).gpus
    assert (info.brand, info.architecture, info.memory_bytes) == ("Unknown", "Unknown", 0)


def test_gpu_without_a_minor_fails_naming_the_gpu_and_the_failed_call() -> None:
    gpu = _detailed(minor=None, skipped_calls=("nvmlDeviceGetMinorNumber: Not Supported",))
    with pytest.raises(_codec.ProbeOutputError, match=r"GPU GPU-a100 \(index 0\)") as caught:
        _codec.gpu_inventory(_report(gpu))
    assert "could not read minor," in str(caught.value)
    assert "nvmlDeviceGetMinorNumber: Not Supported" in str(caught.value)
    assert "nvidia-smi -q -i 0" in str(caught.value)


def test_missing_cuda_driver_version_is_named() -> None:
    with pytest.raises(_codec.ProbeOutputError, match="could not read cuda_driver_version"):
        _codec.gpu_inventory(_report(_detailed(), cuda=None))


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("minor", "0", "'minor' must be an integer"),
        ("mig_enabled", 1, "'mig_enabled' must be true or false"),
        ("skipped_calls", "x", "'skipped_calls' must be a list"),
        ("skipped_calls", [1], "'skipped_calls' must be a list of strings"),
        ("migs", {}, "'migs' must be a list"),
        ("migs", [1], "migs\\[\\] must be a JSON object"),
        ("migs", [{"uuid": "MIG-1"}], "'profile' must be a string"),
    ],
)
def test_malformed_gpu_details_are_rejected(field: str, value: object, complaint: str) -> None:
    obj = json.loads(_codec.encode_report(_report(_detailed())))
    obj["gpus"][0][field] = value
    with pytest.raises(_codec.ProbeOutputError, match=complaint):
        _codec.decode_probe_output(json.dumps(obj))
