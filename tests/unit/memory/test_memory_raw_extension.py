"""Opaque DRA config bytes, as kube-apiserver keeps them (as sent) and re-encodes them (compact,
key order kept) on a merge patch."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.memory import _raw_extension


def _rct(*parameters: Any) -> dict[str, Any]:
    return {"metadata": {"name": "rct", "labels": {"parameters": "not a config"}},
            "spec": {"spec": {"devices": {"config": [
                {"requests": ["r"], "opaque": {"driver": "d", "parameters": p}}
                for p in parameters
            ] + [{"requests": ["r"]}]}}}}


def test_bytes_as_sent_are_kept_exactly_spaces_and_key_order_included() -> None:
    body = json.dumps(_rct({"b": 1, "a": [1, 2]}, {"c": "é"}), ensure_ascii=False).encode()

    assert _raw_extension.parameters_as_sent(body) == (
        b'{"b": 1, "a": [1, 2]}', '{"c": "é"}'.encode(),
    )


def test_the_re_encode_is_compact_and_keeps_the_key_order() -> None:
    assert _raw_extension.parameters_reencoded(_rct({"b": 1, "a": [1, 2]})) == (
        b'{"b":1,"a":[1,2]}',
    )


def test_only_the_opaque_configs_parameters_count() -> None:
    body = json.dumps({"metadata": {"annotations": {"parameters": "{}"}}, "parameters": 1})

    assert _raw_extension.parameters_as_sent(body.encode()) == ()
    assert _raw_extension.parameters_reencoded(json.loads(body)) == ()


def test_a_body_that_is_not_json_has_no_parameters() -> None:
    assert _raw_extension.parameters_as_sent(b"\xff{") == ()
    assert _raw_extension.parameters_as_sent(b'{"spec": ') == ()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=10,
)


# NB: no deadline: the first example pays for imports on a busy machine.
@settings(deadline=None)
@given(parameters=_JSON)
def test_compact_bytes_as_sent_are_what_the_re_encode_gives(parameters: Any) -> None:
    body = json.dumps(_rct(parameters), separators=(",", ":"), ensure_ascii=False).encode()

    assert _raw_extension.parameters_as_sent(body) == _raw_extension.parameters_reencoded(
        _rct(parameters)
    )


@settings(deadline=None)
@given(parameters=_JSON, indent=st.sampled_from([None, 2]))
def test_bytes_as_sent_in_any_layout_decode_to_the_parameters(
    parameters: Any, indent: int | None
) -> None:
    body = json.dumps(_rct(parameters), indent=indent).encode()

    [sent] = _raw_extension.parameters_as_sent(body)

    assert json.loads(sent) == parameters
