"""JSON merge patch (RFC 7386) as the API server applies it, shared by the kube adapter, the
embedded cluster and `computedomain plan`: the RFC's examples, key order, no sharing with the
inputs, and the plain copy a result is made of."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import mergepatch

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
    assert mergepatch.merge_patch(target, patch) == expected


def test_merge_patch_replaces_lists_instead_of_merging_them() -> None:
    target = {"daemons": [{"nodeName": "n1"}, {"nodeName": "n2"}]}

    assert mergepatch.merge_patch(target, {"daemons": [{"nodeName": "n3"}]}) == {
        "daemons": [{"nodeName": "n3"}]
    }


def test_merge_patch_does_not_modify_its_inputs() -> None:
    target = {"a": {"b": [1]}}
    patch = {"a": {"c": 2}}

    mergepatch.merge_patch(target, patch)

    assert target == {"a": {"b": [1]}}
    assert patch == {"a": {"c": 2}}


@given(_objects)
def test_merge_patch_with_empty_patch_is_identity(obj: dict[str, Any]) -> None:
    assert mergepatch.merge_patch(obj, {}) == obj


@given(_objects, _objects)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = mergepatch.merge_patch(target, patch)

    assert mergepatch.merge_patch(once, patch) == once


@given(_objects)
def test_merge_patch_of_an_object_onto_nothing_drops_its_nulls(obj: dict[str, Any]) -> None:
    def has_null_member(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or has_null_member(v) for v in value.values())
        return False

    assert not has_null_member(mergepatch.merge_patch({}, obj))


def test_copy_json_turns_tuples_and_mappings_into_fresh_lists_and_dicts() -> None:
    inner = {"x": 1}
    source = {"items": (inner, "s"), "n": None}

    copy = mergepatch.copy_json(source)
    copy["items"][0]["x"] = 2

    assert copy == {"items": [{"x": 2}, "s"], "n": None}
    assert inner == {"x": 1}


def test_merge_patch_keeps_key_order_removes_nulls_and_replaces_lists() -> None:
    target = {"b": 1, "a": {"x": 1, "y": [1, 2]}, "c": 3}
    merged = mergepatch.merge_patch(target, {"a": {"y": [3], "x": None, "w": 0}, "c": None})
    assert merged == {"b": 1, "a": {"y": [3], "w": 0}}
    assert list(merged) == ["b", "a"] and list(merged["a"]) == ["y", "w"]
    assert target == {"b": 1, "a": {"x": 1, "y": [1, 2]}, "c": 3}


def test_merge_patch_result_shares_nothing_with_its_inputs() -> None:
    target = {"metadata": {"name": "a"}, "spec": {"ids": [1]}}
    patch = {"status": {"nodes": ({"name": "n1"},)}}

    merged = mergepatch.merge_patch(target, patch)
    merged["metadata"]["resourceVersion"] = "7"
    merged["spec"]["ids"].append(2)
    merged["status"]["nodes"][0]["name"] = "n2"

    assert target == {"metadata": {"name": "a"}, "spec": {"ids": [1]}}
    assert patch == {"status": {"nodes": ({"name": "n1"},)}}
