"""The probe report codec: round trips, translation to fabric records, and rejection of junk."""

from __future__ import annotations

import json

import hypothesis
import pytest
from hypothesis import strategies as st

from adapters.nvml import _codec
from core import models

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
)


@hypothesis.given(
    report=st.builds(_codec.ProbeReport, driver_version=st.text(), gpus=st.tuples(gpus, gpus))
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
