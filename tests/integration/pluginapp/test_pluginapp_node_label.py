"""Driver-managed: the node's ComputeDomain label goes with the last claim of that domain.

The label pins the node to one ComputeDomain (its IMEX daemon is scheduled by it). Kept after
the domain's workloads left, it kept every other ComputeDomain off the node until the first
one was deleted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pluginapp_env import (
    NAMESPACE,
    consumer,
    create_claim,
    create_domain,
    node,
    prepare,
    unprepare,
)

from apps.cli import embedded
from core import kinds, models, names


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="driverManaged", node_limit=1) as deployment:
        yield deployment


def _ready_domain(env: embedded.Embedded, name: str) -> str:
    """A ComputeDomain whose IMEX daemon runs on the node and reported Ready in its clique, as
    the DaemonSet's pod would; the controller makes the domain Ready from that."""
    uid = create_domain(env, name)
    here = node(env)
    clique_id = here.plugin.node.clique_id
    namespace = env.config.namespace
    env.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-imex-daemon", "namespace": namespace, "labels": {
            names.COMPUTE_DOMAIN_LABEL: uid, names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_DAEMON,
        }},
        "spec": {"nodeName": here.name, "containers": [{"name": "imex", "image": "imex"}]},
    })
    # NB: the pod runs before its daemon reports, as on a cluster: an entry whose daemon pod
    # the controller has not seen (on a node without the label) is pruned as a gone daemon's.
    env.settle()
    env.cluster.create(kinds.COMPUTE_DOMAIN_CLIQUE.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {"name": f"{uid}.{clique_id}", "namespace": namespace},
        "daemons": [{"nodeName": here.name, "ipAddress": "10.0.0.1", "cliqueID": clique_id,
                     "index": 0, "status": "Ready"}],
    })
    env.settle()
    cd = env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=name)
    assert cd["status"]["status"] == "Ready"
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


def _daemon_claim(env: embedded.Embedded, name: str, *, domain_id: str) -> models.ClaimRef:
    """The IMEX daemon pod's claim, allocated on the node as the scheduler leaves it."""
    namespace = env.config.namespace
    here = node(env)
    created = env.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": names.DAEMON_REQUEST_NAME, "exactly": {
            "deviceClassName": names.DAEMON_DEVICE_CLASS}}]}},
    })
    pod = env.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "namespace": namespace},
        "spec": {"nodeName": here.name, "containers": [{"name": "imex", "image": "imex"}]},
    })
    params = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_DAEMON_CONFIG,
              "domainID": domain_id}
    env.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=name, subresource="status",
        patch={"status": {"allocation": {"devices": {
            "results": [{"request": names.DAEMON_REQUEST_NAME, "driver": names.DRIVER_NAME,
                         "pool": here.name, "device": names.daemon_device_name(0)}],
            "config": [{"source": "FromClaim", "requests": [names.DAEMON_REQUEST_NAME],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
        }}, "reservedFor": [consumer(dict(pod))]}},
    )
    return models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]), namespace=namespace,
                           name=name)


def test_the_domains_own_imex_daemon_claim_does_not_keep_the_label(
    env: embedded.Embedded,
) -> None:
    """The daemon runs on the node because of the label and its claim is prepared there: the
    label must go with the last *workload* claim, or label, daemon and claim hold each other
    and the node is never released (seen on a real control plane)."""
    cd = _ready_domain(env, "first")
    workload = create_claim(env, "a", domain_id=cd)
    assert not prepare(env, workload).error
    assert _label(env) == cd
    daemon = _daemon_claim(env, "first-daemon", domain_id=cd)
    assert not prepare(env, daemon).error

    assert not unprepare(env, workload).error

    assert _label(env) is None, "the daemon's own claim kept the node pinned"
    second_cd = _ready_domain(env, "second")
    other = create_claim(env, "other", domain_id=second_cd)
    assert not prepare(env, other).error
    assert _label(env) == second_cd
