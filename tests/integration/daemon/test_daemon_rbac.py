"""The chart's daemon ServiceAccount may make every API call `compute-domain-daemon` makes.

The calls are recorded from the daemon's real registry code (claim an entry, mark it Ready,
follow peers, remove the entry) in both stores, on the embedded cluster; the chart is rendered
by the real Helm engine and each call matched against the daemon's Roles and ClusterRoles.
"""

from __future__ import annotations

import pathlib
import sys
import threading

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "helm"))

import chart_rendering as cr
import test_helm_rbac as rbac

from apps.daemon import registry as daemon_registry
from core import kinds, models, names
from core.computedomain import membership

DAEMON_ACCOUNT = f"{cr.RELEASE}-compute-domain-dra-driver-daemon"


def _daemon_needs(store: membership.Store) -> set[rbac.Need]:
    cluster = rbac.RecordingCluster()
    with cluster.as_user():
        cd = cluster.create(kinds.COMPUTE_DOMAIN.kind, rbac._cd("train"))
    first, joiner = (
        daemon_registry.PeerRegistry(
            cluster, store=store,
            me=membership.Identity(node_name=node, ip_address=ip, clique_id="c.1",
                                   pod_name=f"imex-{node}", pod_uid=f"pod-uid-{node}"),
            domain_uid=cd["metadata"]["uid"], domain_name="train",
            domain_namespace=rbac.USER_NS, namespace=cr.NAMESPACE, max_nodes=18,
        )
        for node, ip in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"))
    )
    seen = threading.Event()
    stop = threading.Event()
    follower = first.follow(lambda _obj: seen.set(), stop)
    first.upsert(models.DomainStatus.NOT_READY)  # creates the clique, owned by its pod
    first.upsert(models.DomainStatus.READY)
    joiner.upsert(models.DomainStatus.NOT_READY)  # adds its pod to the clique's owners
    assert seen.wait(10)
    joiner.remove()
    first.remove()
    stop.set()
    with cluster.as_user():
        cluster.create(kinds.COMPUTE_DOMAIN.kind, rbac._cd("wake-the-watch"))
    follower.join(timeout=10)
    cluster.close()
    return cluster.needs


@pytest.mark.parametrize("store", list(membership.Store))
def test_daemon_service_account_may_make_every_call_the_daemon_makes(
    store: membership.Store,
) -> None:
    needs = _daemon_needs(store)
    if store is membership.Store.CLIQUE:
        assert ("create", names.API_GROUP, "computedomaincliques", cr.NAMESPACE) in needs
        assert ("patch", names.API_GROUP, "computedomaincliques", cr.NAMESPACE) in needs
        # A joining daemon adds its pod to the clique's ownerReferences.
        assert ("delete", names.API_GROUP, "computedomaincliques", cr.NAMESPACE) in needs
    else:
        assert ("patch", names.API_GROUP, "computedomains/status", rbac.USER_NS) in needs
    assert rbac._missing(cr.render({}), DAEMON_ACCOUNT, needs) == []


def test_daemon_roles_grant_no_update_and_no_pod_access() -> None:
    for obj in cr.render({}):
        if obj["kind"] in ("Role", "ClusterRole") and obj["metadata"]["name"] == DAEMON_ACCOUNT:
            for rule in obj["rules"]:
                assert "update" not in rule["verbs"], rule
                assert "pods" not in rule["resources"], rule
