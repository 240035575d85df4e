"""Pure JSON-object rules of the embedded cluster: label selectors, timestamps.

Kept apart from `cluster.py` (which holds the lock, the clock and the event history) so the
API-server semantics it reproduces can be tested on plain values.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from core import mergepatch


def matches_labels(
    labels: Mapping[str, str] | None, selector: Mapping[str, str | None] | None
) -> bool:
    """True when every term of the selector holds for `labels` (empty matches all): `key:
    value` needs that value, `key: None` only the key (see `core.ports.LabelSelector`)."""
    if not selector:
        return True
    present = labels or {}
    return all(
        key in present if value is None else present.get(key) == value
        for key, value in selector.items()
    )


def format_timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes metadata timestamps."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_uids(obj: Mapping[str, Any]) -> frozenset[str]:
    """UIDs named in `metadata.ownerReferences`."""
    refs = obj.get("metadata", {}).get("ownerReferences") or ()
    return frozenset(str(ref.get("uid", "")) for ref in refs if ref.get("uid"))


def without_volatile_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object minus `metadata.resourceVersion`: what decides whether a write changed it."""
    copy: dict[str, Any] = mergepatch.copy_json(obj)
    copy.get("metadata", {}).pop("resourceVersion", None)
    return copy


def spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything but `metadata` and `status`: a change here bumps `metadata.generation`."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
