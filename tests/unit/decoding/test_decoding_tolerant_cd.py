"""`compute_domain_tolerantly`: the controller's decoding, naming what it ignores.

Covers: unknown fields at each level named (sorted) and ignored; an unreadable status ignored
and named; a bad spec still a DecodeError; a clean CD has nothing to say.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import decoding, errors


def _cd(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "ns", "uid": "u"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
        **extra,
    }


def test_a_clean_compute_domain_has_nothing_ignored() -> None:
    cd, ignored = decoding.compute_domain_tolerantly(_cd())
    assert ignored == () and cd == decoding.compute_domain_from_k8s(_cd())


def test_unknown_fields_are_named_and_ignored() -> None:
    obj = _cd(extra=1)
    obj["spec"]["numNode"] = 3
    obj["spec"]["channel"]["resourceClaimTemplate"]["nam"] = "x"

    cd, ignored = decoding.compute_domain_tolerantly(obj)

    assert cd.spec.num_nodes == 0
    assert ignored == (
        "unknown field 'extra' is ignored",
        "unknown field 'spec.numNode' is ignored",
        "unknown field 'spec.channel.resourceClaimTemplate.nam' is ignored",
    )


@pytest.mark.parametrize("status", ["garbage", {"status": "Bogus"}, {"nodes": "x"}])
def test_an_unreadable_status_is_ignored_and_named(status: Any) -> None:
    cd, ignored = decoding.compute_domain_tolerantly(_cd(status=status))

    assert cd.status is None
    [note] = ignored
    assert note.startswith("status cannot be read (")


def test_a_bad_spec_is_still_refused() -> None:
    obj = _cd()
    obj["spec"]["numNodes"] = -1
    with pytest.raises(errors.DecodeError):
        decoding.compute_domain_tolerantly(obj)
