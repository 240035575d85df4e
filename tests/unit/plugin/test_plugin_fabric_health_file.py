"""The fabric judgment as the plugin hands it to its IMEX daemons (`fabric_health.encode` /
`decode`, the per-domain `fabric-health.json`).

Covers: every judgment comes back as it went out (a property over random records); unknown
fields are ignored; garbage of every kind is a DecodeError naming what is wrong.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import errors, models
from core.computedomain import fabric_health

S = models.FabricState
CLUSTER = bytes.fromhex("8c2b3f4e5a6d4e7f8091a2b3c4d5e6f7")


def _record(n: int, state: S, ok: bool) -> models.FabricRecord:
    return models.FabricRecord(gpu_uuid=f"GPU-{n}", state=state, cluster_uuid=CLUSTER,
                               clique_id=1, status_ok=ok)


@given(st.lists(st.tuples(st.sampled_from(list(S)), st.booleans()), max_size=8))
def test_a_judgment_decodes_to_itself(states: list[tuple[S, bool]]) -> None:
    health = fabric_health.judge([_record(i, s, ok) for i, (s, ok) in enumerate(states)])
    assert fabric_health.decode(fabric_health.encode(health)) == health


def test_the_file_reads_like_what_the_plugin_logs() -> None:
    health = fabric_health.judge([_record(0, S.COMPLETED, True), _record(1, S.IN_PROGRESS, True),
                                  _record(2, S.COMPLETED, False)])
    document = json.loads(fabric_health.encode(health))
    assert document == {"healthy": False, "reason": "Failed", "degraded": [
        {"gpuUUID": "GPU-1", "state": "InProgress", "statusOk": True},
        {"gpuUUID": "GPU-2", "state": "Completed", "statusOk": False},
    ]}
    assert json.loads(fabric_health.encode(fabric_health.NOT_JUDGED)) == {
        "healthy": True, "reason": "", "degraded": []}


def test_unknown_fields_are_ignored_and_an_empty_object_is_healthy() -> None:
    assert fabric_health.decode(b'{"version": 2, "healthy": true, "extra": [1]}').healthy
    assert fabric_health.decode("{}") == fabric_health.NOT_JUDGED
    decoded = fabric_health.decode(json.dumps({"degraded": [
        {"gpuUUID": "GPU-9", "state": "NotStarted", "statusOk": True, "note": "x"}]}))
    assert (decoded.reason, decoded.describe()) == ("NotStarted", "GPU-9 state=NotStarted")


@pytest.mark.parametrize(("data", "says"), [
    (b"", "not JSON"),
    (b'{"degraded": [', "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"degraded": {}}', "degraded is not a list"),
    (b'{"degraded": ["GPU-1"]}', r"degraded\[0\] is not an object"),
    (b'{"degraded": [{"state": "InProgress", "statusOk": true}]}', "gpuUUID"),
    (b'{"degraded": [{"gpuUUID": "G", "state": "Broken", "statusOk": true}]}', "state 'Broken'"),
    (b'{"degraded": [{"gpuUUID": "G", "state": "NotSupported", "statusOk": true}]}', "state"),
    (b'{"degraded": [{"gpuUUID": "G", "state": "InProgress", "statusOk": "yes"}]}', "statusOk"),
    (b'{"degraded": [{"gpuUUID": "G", "state": "Completed", "statusOk": true}]}',
     "degrades nothing"),
])
def test_garbage_is_a_decode_error(data: bytes, says: str) -> None:
    with pytest.raises(errors.DecodeError, match=says):
        fabric_health.decode(data)
