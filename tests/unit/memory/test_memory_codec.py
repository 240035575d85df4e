"""The embedded cluster's pure JSON rules: label selectors, timestamps, volatile metadata."""

from __future__ import annotations

import datetime

import pytest

from adapters.memory import _codec


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
