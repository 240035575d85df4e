"""The health watch's pure pieces: its line format (round trips, short hand-written lines,
rejection of junk), what an NVML event means, and the restart backoff."""

from __future__ import annotations

import json
import warnings

import hypothesis
import pytest
from hypothesis import strategies as st

from adapters.nvml import _health_lines, health_events, health_watch
from core.gpu import health

uint32 = st.integers(0, 0xFFFFFFFF)
events = st.builds(
    health.HealthEvent,
    kind=st.sampled_from(health.HealthEventKind),
    gpu_uuid=st.text(),
    gi_id=uint32,
    ci_id=uint32,
    xid=st.integers(0, 2**64 - 1),
)


@hypothesis.given(event=events)
def test_every_event_survives_its_line(event: health.HealthEvent) -> None:
    line = _health_lines.encode_event(event)
    assert "\n" not in line
    assert _health_lines.decode_line(line) == event
    assert _health_lines.decode_event(line) == event


@hypothesis.given(monitored=st.lists(st.text(), max_size=8))
def test_the_ready_line_survives_its_line(monitored: list[str]) -> None:
    line = _health_lines.encode_ready(monitored)
    assert "\n" not in line
    assert _health_lines.decode_line(line) == _health_lines.Ready(monitored=tuple(monitored))


def test_the_wire_names_are_the_documented_ones() -> None:
    event = health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid="GPU-a", gi_id=1,
                               ci_id=0, xid=79)
    assert json.loads(_health_lines.encode_event(event)) == {
        "kind": "xid", "gpuUUID": "GPU-a", "giID": 1, "ciID": 0, "xid": 79}
    assert json.loads(_health_lines.encode_ready(["GPU-a"])) == {
        "ready": True, "monitored": ["GPU-a"]}


def test_a_short_line_takes_the_event_defaults() -> None:
    assert _health_lines.decode_line('{"kind": "gpu-lost"}') == health.HealthEvent(
        kind=health.HealthEventKind.GPU_LOST)
    assert _health_lines.decode_line('{"kind": "xid", "gpuUUID": "GPU-a", "xid": 48}') == (
        health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid="GPU-a", xid=48,
                           gi_id=health.WHOLE_GPU, ci_id=health.WHOLE_GPU))


@pytest.mark.parametrize(("line", "says"), [
    ("", "not JSON"),
    ("{", "not JSON"),
    ("[1]", "want a JSON object"),
    ('"xid"', "want a JSON object"),
    ("{}", '"kind" must be one of'),
    ('{"kind": "fire"}', '"kind" must be one of'),
    ('{"kind": "xid", "xid": true}', "'xid' must be an integer"),
    ('{"kind": "xid", "xid": -1}', "'xid' must be an integer"),
    ('{"kind": "xid", "xid": 1.5}', "'xid' must be an integer"),
    ('{"kind": "xid", "giID": 4294967296}', "'giID' must be an integer"),
    ('{"kind": "xid", "ciID": "0"}', "'ciID' must be an integer"),
    ('{"kind": "xid", "gpuUUID": 7}', '"gpuUUID" must be a string'),
    ('{"ready": false}', "a ready line needs"),
    ('{"ready": true, "monitored": "GPU-a"}', "a ready line needs"),
    ('{"ready": true, "monitored": [1]}', "a ready line needs"),
])
def test_junk_is_refused_with_a_reason(line: str, says: str) -> None:
    with pytest.raises(_health_lines.HealthLineError, match=says):
        _health_lines.decode_line(line)


def test_only_the_watch_may_say_it_is_ready() -> None:
    with pytest.raises(_health_lines.HealthLineError, match="got a ready line"):
        _health_lines.decode_event('{"ready": true, "monitored": []}')


def test_the_event_bits_are_nvmls() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        pynvml = pytest.importorskip("pynvml")
    assert pynvml.nvmlEventTypeXidCriticalError == health_watch.EVENT_XID_CRITICAL
    assert pynvml.nvmlEventTypeDoubleBitEccError == health_watch.EVENT_DOUBLE_BIT_ECC
    assert pynvml.nvmlEventTypeSingleBitEccError == health_watch.EVENT_SINGLE_BIT_ECC


def test_the_mask_keeps_what_the_gpu_supports_of_what_is_wanted() -> None:
    everything = 0xFFFF
    assert health_watch.event_mask(everything) == 0xB
    assert health_watch.event_mask(0x4 | 0x8) == 0x8  # P-state events are not wanted
    assert health_watch.event_mask(0x3) == 0x3  # ECC only: no XIDs (the GPU is unmonitored)
    assert health_watch.event_mask(0) == 0


def test_only_xid_events_are_reported() -> None:
    assert health_watch.is_reported(health_watch.EVENT_XID_CRITICAL)
    assert not health_watch.is_reported(health_watch.EVENT_DOUBLE_BIT_ECC)
    assert not health_watch.is_reported(health_watch.EVENT_SINGLE_BIT_ECC)


def test_an_xid_names_its_gpu_and_instance() -> None:
    assert health_watch.event_from_nvml(event_data=79, gi_id=health.WHOLE_GPU,
                                        ci_id=health.WHOLE_GPU, gpu_uuid="GPU-a") == (
        health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid="GPU-a", xid=79))
    assert health_watch.event_from_nvml(event_data=31, gi_id=2, ci_id=0,
                                        gpu_uuid="GPU-a") == health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid="GPU-a", gi_id=2, ci_id=0, xid=31)


def test_an_xid_on_a_gpu_nvml_cannot_name_is_a_node_wide_gpu_lost() -> None:
    assert health_watch.event_from_nvml(event_data=79, gi_id=1, ci_id=0,
                                        gpu_uuid=None) == health.HealthEvent(
        kind=health.HealthEventKind.GPU_LOST)


def test_the_restart_backoff_doubles_up_to_its_cap() -> None:
    delays = [health_events.backoff_s(n, initial_s=0.5, max_s=30.0) for n in range(10)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert health_events.backoff_s(10**6, initial_s=0.5, max_s=30.0) == 30.0


def test_the_simulated_events_file_lives_with_the_simulated_mig_state() -> None:
    assert health_events.simulated_events_path("/driver-root") == (
        "/driver-root/var/lib/nvidia-simulated/health-events.jsonl")
