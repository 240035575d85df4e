"""Driver-managed: the node's ComputeDomain label goes with the last claim of that domain.

The label pins the node to one ComputeDomain (its IMEX daemon is scheduled by it). Kept after
the domain's workloads left, it kept every other ComputeDomain off the node until the first
one was deleted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pluginapp_env import NAMESPACE, create_claim, create_domain, node, prepare, unprepare

from apps.cli import embedded
from core import kinds, names


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="driverManaged", node_limit=1) as deployment:
        yield deployment


def _ready_domain(env: embedded.Embedded, name: str) -> str:
    uid = create_domain(env, name)
    here = node(env)
    env.cluster.patch(
        kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=name, subresource="status",
        patch={"status": {"status": "Ready", "nodes": [{
            "name": here.name, "ipAddress": "10.0.0.1", "cliqueID": here.plugin.node.clique_id,
            "index": 0, "status": "Ready",
        }]}},
    )
    return uid


def _label(env: embedded.Embedded) -> str | None:
    obj = env.cluster.get(kinds.NODE.kind, namespace="", name=node(env).name)
    return (obj["metadata"].get("labels") or {}).get(names.COMPUTE_DOMAIN_LABEL)


def test_the_label_goes_with_the_last_claim_of_its_domain_and_frees_the_node(
    env: embedded.Embedded,
) -> None:
    first_cd = _ready_domain(env, "first")
    a = create_claim(env, "a", domain_id=first_cd)
    b = create_claim(env, "b", domain_id=first_cd)
    assert not prepare(env, a).error
    assert not prepare(env, b).error
    assert _label(env) == first_cd
    second_cd = _ready_domain(env, "second")
    other = create_claim(env, "other", domain_id=second_cd)
    assert prepare(env, other).error, "one ComputeDomain at a time on a node"

    assert not unprepare(env, a).error
    assert _label(env) == first_cd, "b still runs here"
    assert not unprepare(env, b).error
    assert _label(env) is None

    assert not prepare(env, other).error
    assert _label(env) == second_cd
