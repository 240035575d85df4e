"""Pure checks a prepare makes before it asks anything else: the claim UID and `reservedFor`."""

from __future__ import annotations

import dataclasses

import plugin_factories as f
import pytest

from core import claims, decoding, models, names

POD = models.ClaimConsumer(resource="pods", name="worker-0", uid="pod-uid-1")


def _reserved(*consumers: models.ClaimConsumer) -> models.ResourceClaim:
    return dataclasses.replace(f.claim(), reserved_for=consumers)


def test_a_claim_reserved_for_a_pod_on_this_node_may_be_prepared() -> None:
    here = models.PodPlacement(uid=POD.uid, node_name=f.NODE_NAME)
    assert claims.reservation_error(_reserved(POD), placements=(here,), node=f.NODE) is None


@pytest.mark.parametrize(
    ("placements", "expected"),
    [
        ((), "none of which runs on node"),  # the pod is gone
        ((models.PodPlacement(uid=POD.uid, node_name="elsewhere"),), "none of which runs"),
        ((models.PodPlacement(uid="another-pod", node_name=f.NODE_NAME),), "none of which"),
    ],
    ids=["pod-gone", "pod-on-another-node", "another-pod-here"],
)
def test_a_claim_whose_reserved_pod_is_not_here_is_refused(
    placements: tuple[models.PodPlacement, ...], expected: str
) -> None:
    error = claims.reservation_error(_reserved(POD), placements=placements, node=f.NODE)
    assert error is not None and expected in error.message
    assert "pod team-a/worker-0" in error.message


def test_a_claim_reserved_for_nobody_is_refused_an_unallocated_one_left_to_plan() -> None:
    error = claims.reservation_error(_reserved(), placements=(), node=f.NODE)
    assert error is not None and "reserved for no pod" in error.message
    unallocated = dataclasses.replace(f.claim(allocated=False), reserved_for=())
    assert claims.reservation_error(unallocated, placements=(), node=f.NODE) is None


def test_consumers_that_are_not_pods_do_not_count() -> None:
    other = models.ClaimConsumer(resource="jobs", name="j", uid="u", api_group="batch")
    here = models.PodPlacement(uid="u", node_name=f.NODE_NAME)
    assert claims.reservation_error(_reserved(other), placements=(here,), node=f.NODE)


def test_reserved_for_is_decoded_from_the_claim_status() -> None:
    claim = decoding.resource_claim_from_k8s({
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]},
    })
    assert claim.reserved_for == (models.ClaimConsumer(resource="pods", name="p", uid="pu"),)
    assert claim.reserved_for[0].is_pod


@pytest.mark.parametrize("uid", ["0a1b2c3d-1111-4222-8333-444455556666", "stray", "a.b_c-9"])
def test_uids_kubernetes_could_issue_are_accepted(uid: str) -> None:
    assert claims.claim_uid_error(uid) is None


@pytest.mark.parametrize("uid", ["", "..", ".hidden", "../../etc", "a/b", "a\0b", "x" * 129, "é"])
def test_uids_that_could_name_another_file_or_flood_a_log_are_refused(uid: str) -> None:
    error = claims.claim_uid_error(uid)
    assert error is not None and "is not a valid Kubernetes UID" in error.message
    assert len(error.message) < 600
