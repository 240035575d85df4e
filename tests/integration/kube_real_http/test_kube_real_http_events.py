"""KubeCluster records repeated events like client-go's recorder: one Event, count bumped."""

from __future__ import annotations

from typing import Any

from core import kinds, models


def _claim() -> models.ObjectRef:
    return models.ObjectRef(kind="ResourceClaim", name="c1", namespace="team", uid="u1",
                            api_version=kinds.RESOURCE_CLAIM.api_version)


def _events(cluster: Any) -> list[Any]:
    return list(cluster.list(kinds.EVENT.kind, namespace="team").items)


def test_a_repeated_event_bumps_the_count_of_one_event(cluster: Any) -> None:
    for _ in range(3):
        cluster.emit_event(involved=_claim(), reason="PrepareFailed", message="same words")
    [event] = _events(cluster)
    assert event["count"] == 3 and event["reason"] == "PrepareFailed"


def test_a_different_message_is_a_different_event(cluster: Any) -> None:
    cluster.emit_event(involved=_claim(), reason="PrepareFailed", message="first")
    cluster.emit_event(involved=_claim(), reason="PrepareFailed", message="second")
    assert sorted(e["message"] for e in _events(cluster)) == ["first", "second"]


def test_an_expired_event_is_recorded_afresh(cluster: Any) -> None:
    cluster.emit_event(involved=_claim(), reason="PrepareFailed", message="again")
    [first] = _events(cluster)
    cluster.delete(kinds.EVENT.kind, namespace="team", name=first["metadata"]["name"])
    cluster.emit_event(involved=_claim(), reason="PrepareFailed", message="again")
    [second] = _events(cluster)
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["count"] == 1
