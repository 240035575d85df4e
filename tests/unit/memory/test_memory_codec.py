"""The embedded cluster's pure JSON rules: merge patch (RFC 7386), label selectors, copies."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.memory import _codec

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)
_objects = st.dictionaries(st.text(max_size=3), _json, max_size=4)


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # the examples of RFC 7386 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_follows_rfc_7386_examples(target: Any, patch: Any, expected: Any) -> None:
    assert _codec.merge_patch(target, patch) == expected


def test_merge_patch_replaces_lists_instead_of_merging_them() -> None:
    target = {"daemons": [{"nodeName": "n1"}, {"nodeName": "n2"}]}

    assert _codec.merge_patch(target, {"daemons": [{"nodeName": "n3"}]}) == {
        "daemons": [{"nodeName": "n3"}]
    }


def test_merge_patch_does_not_modify_its_inputs() -> None:
    target = {"a": {"b": [1]}}
    patch = {"a": {"c": 2}}

    _codec.merge_patch(target, patch)

    assert target == {"a": {"b": [1]}}
    assert patch == {"a": {"c": 2}}


@given(_objects)
def test_merge_patch_with_empty_patch_is_identity(obj: dict[str, Any]) -> None:
    assert _codec.merge_patch(obj, {}) == obj


@given(_objects, _objects)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = _codec.merge_patch(target, patch)

    assert _codec.merge_patch(once, patch) == once


@given(_objects)
def test_merge_patch_of_an_object_onto_nothing_drops_its_nulls(obj: dict[str, Any]) -> None:
    def has_null_member(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or has_null_member(v) for v in value.values())
        return False

    assert not has_null_member(_codec.merge_patch({}, obj))


def test_copy_json_turns_tuples_and_mappings_into_fresh_lists_and_dicts() -> None:
    inner = {"x": 1}
    source = {"items": (inner, "s"), "n": None}

    copy = _codec.copy_json(source)
    copy["items"][0]["x"] = 2

    assert copy == {"items": [{"x": 2}, "s"], "n": None}
    assert inner == {"x": 1}


@pytest.mark.parametrize(
    ("labels", "selector", "expected"),
    [
        ({"a": "1"}, None, True),
        ({"a": "1"}, {}, True),
        (None, {}, True),
        (None, {"a": "1"}, False),
        ({"a": "1", "b": "2"}, {"a": "1"}, True),
        ({"a": "1", "b": "2"}, {"a": "1", "b": "2"}, True),
        ({"a": "1"}, {"a": "2"}, False),
        ({"a": "1"}, {"a": "1", "b": "2"}, False),
    ],
)
def test_matches_labels_requires_every_selector_pair(
    labels: dict[str, str] | None, selector: dict[str, str] | None, expected: bool
) -> None:
    assert _codec.matches_labels(labels, selector) is expected


def test_format_timestamp_is_rfc3339_utc_seconds() -> None:
    moment = datetime.datetime(
        2025, 1, 2, 4, 4, 5, 123, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )

    assert _codec.format_timestamp(moment) == "2025-01-02T03:04:05Z"


def test_owner_uids_lists_owner_reference_uids() -> None:
    obj = {"metadata": {"ownerReferences": [{"uid": "u1"}, {"uid": "u2"}, {"name": "x"}]}}

    assert _codec.owner_uids(obj) == frozenset({"u1", "u2"})
    assert _codec.owner_uids({"metadata": {}}) == frozenset()


def test_spec_part_ignores_metadata_and_status() -> None:
    obj = {"metadata": {"name": "a"}, "status": {"s": 1}, "spec": {"x": 1}, "daemons": []}

    assert _codec.spec_part(obj) == {"spec": {"x": 1}, "daemons": []}
