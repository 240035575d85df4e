"""The contract between the Fabric Manager client and its child (`_codec`), and the binding's
struct layouts (`_nvfm`) against the sizes of FM's public headers.

Covers: requests and answers round-trip; a request or answer of another shape or schema is
refused naming the field; partitions become the port's model with module ids = physical ids,
and one naming a GPU twice is refused; the structs have the headers' sizes and the version
words `MAKE_FM_PARAM_VERSION` gives; return codes are named, unknown ones by number.
"""

from __future__ import annotations

import ctypes
import json

import pytest

from adapters.fabricmanager import _codec, _nvfm
from core.gpu import fm_partitions

LISTED = (
    _codec.ListedPartition(
        partition_id=3, active=True,
        gpus=(
            _codec.Gpu(physical_id=1, uuid="GPU-1", pci_bus_id="00000000:18:00.0"),
            _codec.Gpu(physical_id=3, uuid="GPU-3", pci_bus_id="00000000:3A:00.0"),
        ),
    ),
    _codec.ListedPartition(partition_id=7, active=False, gpus=(_codec.Gpu(physical_id=1),)),
)


@pytest.mark.parametrize(
    "request_",
    [
        _codec.Request(library="libnvfm.so.1", address="/run/fm.sock", unix_socket=True,
                       connect_timeout_ms=1000, action=_codec.Action.LIST),
        _codec.Request(library="/root/usr/lib64/libnvfm.so.1", address="10.0.0.1",
                       unix_socket=False, connect_timeout_ms=5, action=_codec.Action.ACTIVATE,
                       partition_id=3),
    ],
)
def test_requests_round_trip(request_: _codec.Request) -> None:
    assert _codec.decode_request(_codec.encode_request(request_)) == request_


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 2}, "schema 2, expected 1"),
        ({"action": "explode"}, "unknown action 'explode'"),
        ({"partition_id": None}, "'partition_id' must be an integer"),
        ({"action": "list"}, "action 'list' takes no partition_id"),
        ({"unix_socket": "yes"}, "'unix_socket' must be true or false"),
        ({"connect_timeout_ms": 1.5}, "'connect_timeout_ms' must be an integer"),
    ],
)
def test_a_foreign_request_is_refused_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    good = _codec.Request(library="l", address="a", unix_socket=True, connect_timeout_ms=1,
                          action=_codec.Action.ACTIVATE, partition_id=1)
    text = json.dumps({**json.loads(_codec.encode_request(good)), **change})
    with pytest.raises(_codec.AnswerError, match=message):
        _codec.decode_request(text)


def test_a_request_that_is_not_json_is_refused() -> None:
    with pytest.raises(_codec.AnswerError, match="not JSON"):
        _codec.decode_request("{")


@pytest.mark.parametrize(
    "answer",
    [
        _codec.Answer(outcome=_codec.Outcome.DONE, partitions=LISTED, changed=True),
        _codec.Answer(outcome=_codec.Outcome.FM_STATUS, partitions=None, call="fmConnect",
                      status=-9, message="fmConnect returned FM_ST_CONNECTION_NOT_VALID"),
        _codec.Answer(outcome=_codec.Outcome.LIBRARY_UNAVAILABLE, message="no such file"),
    ],
)
def test_answers_round_trip(answer: _codec.Answer) -> None:
    assert _codec.decode_answer(json.loads(_codec.encode_answer(answer))) == answer


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": None}, "schema None"),
        ({"outcome": "maybe"}, "unknown outcome 'maybe'"),
        ({"partitions": {}}, "'partitions' must be a list or null"),
        ({"partitions": [1]}, r"partitions\[\] must be an object"),
        ({"partitions": [{"id": 1, "active": True, "gpus": None}]}, "'gpus' must be a list"),
        ({"partitions": [{"id": 1, "active": True, "gpus": [{"physical_id": "1"}]}]},
         "'physical_id' must be an integer"),
        ({"changed": 1}, "'changed' must be true or false"),
        ({"status": True}, "'status' must be an integer"),
    ],
)
def test_a_foreign_answer_is_refused_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    good = json.loads(_codec.encode_answer(_codec.Answer(outcome=_codec.Outcome.DONE)))
    with pytest.raises(_codec.AnswerError, match=message):
        _codec.decode_answer({**good, **change})


def test_partitions_take_physical_ids_as_module_ids() -> None:
    assert _codec.to_partitions(LISTED) == (
        fm_partitions.Partition(partition_id=3, module_ids=frozenset({1, 3}), active=True),
        fm_partitions.Partition(partition_id=7, module_ids=frozenset({1})),
    )


def test_a_partition_naming_a_gpu_twice_is_refused() -> None:
    twice = _codec.ListedPartition(
        partition_id=2, active=False,
        gpus=(_codec.Gpu(physical_id=5), _codec.Gpu(physical_id=5), _codec.Gpu(physical_id=6)),
    )
    refused = r"partition 2 with GPU module ids \[5\] twice"
    with pytest.raises(_codec.ContradictoryPartition, match=refused):
        _codec.to_partitions((twice,))


def test_structs_have_the_layout_of_fm_headers() -> None:
    # nv_fm_types.h: 4 + 256 + 4 + 4 + a 4-byte enum; 4 + 80 + 32 + 3 * 4;
    # 3 * 4 + 16 GPU infos; 3 * 4 + 64 partition infos.
    assert ctypes.sizeof(_nvfm.ConnectParams) == 272
    assert ctypes.sizeof(_nvfm.PartitionGpuInfo) == 128
    assert ctypes.sizeof(_nvfm.PartitionInfo) == 12 + 16 * 128
    assert ctypes.sizeof(_nvfm.PartitionList) == 12 + 64 * (12 + 16 * 128)
    assert _nvfm.CONNECT_PARAMS_VERSION == 272 | 2 << 24
    assert _nvfm.PARTITION_LIST_VERSION == 131852 | 1 << 24


def test_return_codes_are_named() -> None:
    assert _nvfm.return_name(-7) == "FM_ST_IN_USE"
    assert _nvfm.return_name(-29) == "FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR"
    assert _nvfm.return_name(-99) == "fmReturn_t -99"
