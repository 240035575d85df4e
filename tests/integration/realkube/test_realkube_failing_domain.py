"""A ComputeDomain the driver refuses never holds the others up (real kube-apiserver).

Its RCT name is not a DNS-1123 name: the CRD accepts it, the API server would refuse the RCT.
The CD gets a Warning Event and a status condition saying why, while CDs created after it get
their RCT as usual. (A CD the API server keeps failing: `test_realkube_failing_cd.py`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import realkube_driver
from realkube_driver import WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import errors, kinds, names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("installed", ["hostManaged"], indirect=True),
]

HEALTHY = 5


def create_cd(admin: KubeCluster, name: str, *, namespace: str, rct: str) -> Mapping[str, Any]:
    return admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": rct}}},
    })


def condition(admin: KubeCluster, name: str, *, namespace: str) -> Mapping[str, Any] | None:
    stored = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=namespace, name=name)
    for item in (stored.get("status") or {}).get("conditions") or ():
        if item.get("status") == "False":
            return dict(item)
    return None


def warning_events(installed: Driver, name: str, *, namespace: str) -> list[Any]:
    from kubernetes import client

    listed = client.CoreV1Api(installed.kube.admin_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},type=Warning"
    )
    return list(listed.items)


def healthy_cds_get_their_templates(
    admin: KubeCluster, controller: realkube_driver.AppProcess, prefix: str
) -> None:
    for i in range(HEALTHY):
        create_cd(admin, f"{prefix}-{i}", namespace=WORKLOAD_NAMESPACE, rct=f"{prefix}-{i}-ch")
    for i in range(HEALTHY):

        def present(i: int = i) -> bool:
            if not controller.running:
                raise AssertionError(f"controller exited:\n{controller.output()[-4000:]}")
            try:
                admin.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE,
                          name=f"{prefix}-{i}-ch")
            except errors.NotFoundError:
                return False
            return True

        # NB: generous for a loaded CI runner; `make bench` measures the real figure.
        wait_for(present, what=f"healthy CD {prefix}-{i}'s template", timeout_s=15)


def test_a_cd_with_an_rct_name_the_api_server_would_refuse_is_reported_and_stalls_no_one(
    installed: Driver, admin: KubeCluster, controller: realkube_driver.AppProcess
) -> None:
    create_cd(admin, "bad-name", namespace=WORKLOAD_NAMESPACE, rct="Bad_Name")
    healthy_cds_get_their_templates(admin, controller, "after-bad-name")
    reported = wait_for(
        lambda: condition(admin, "bad-name", namespace=WORKLOAD_NAMESPACE),
        what="a False condition on the CD", timeout_s=30,
    )
    assert "Bad_Name" in reported["message"]
    events = wait_for(
        lambda: warning_events(installed, "bad-name", namespace=WORKLOAD_NAMESPACE),
        what="a Warning event on the CD", timeout_s=30,
    )
    assert any("Bad_Name" in (e.message or "") for e in events)
