"""A ComputeDomain made by the upstream driver is adopted in place on a real kube-apiserver.

What the in-memory cluster cannot show: that the real API server accepts upstream's objects as
upstream's controller writes them and, above all, our in-place takeover of upstream's DaemonSet
(a new pod template and update strategy under upstream's immutable selector, keys upstream set
and we do not cleared), with the chart's RBAC only. The upstream-shaped objects come from
`tests/unit/controller/upstream_shapes.py` (written from upstream's shapes, not copied).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import realkube_driver
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE
from realkube_server import wait_for

from core import kinds, names
from core.computedomain import controlling
from tests.unit.controller import upstream_shapes as upstream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def driver_managed(real_kube: Any) -> Iterator[realkube_driver.Driver]:
    """The chart in driverManaged mode, replacing the tier's per-mode `installed`."""
    driver = realkube_driver.Driver(real_kube, mode="driverManaged",
                                    workdir=real_kube.workdir).install()
    yield driver
    driver.stop()


def test_a_compute_domain_made_by_upstream_is_adopted_without_deletion(
    driver_managed: realkube_driver.Driver,
) -> None:
    admin = driver_managed.admin()
    rct, claim, ds_kind = (kinds.RESOURCE_CLAIM_TEMPLATE.kind, kinds.RESOURCE_CLAIM.kind,
                           kinds.DAEMON_SET.kind)
    uid = str(admin.create(kinds.COMPUTE_DOMAIN.kind, upstream.compute_domain(
        name="cd", namespace=WORKLOAD_NAMESPACE, num_nodes=2))["metadata"]["uid"])
    daemon = names.daemonset_name(uid)
    admin.create(rct, upstream.workload_rct(cd_name="cd", namespace=WORKLOAD_NAMESPACE,
                                            cd_uid=uid))
    admin.create(rct, upstream.daemon_rct(driver_namespace=NAMESPACE, cd_uid=uid))
    ds_uid = admin.create(ds_kind, upstream.daemonset(
        driver_namespace=NAMESPACE, cd_uid=uid))["metadata"]["uid"]
    node = realkube_driver.nodes()[0]
    admin.create(claim, upstream.workload_claim(name="worker-0-channel",
                                                namespace=WORKLOAD_NAMESPACE, cd_uid=uid,
                                                node=node))
    admin.patch(claim, namespace=WORKLOAD_NAMESPACE, name="worker-0-channel",
                subresource="status", patch=upstream.allocation(node=node, pod_uid="pod-1"))
    kept = {(kind, ns, name): _content(admin.get(kind, namespace=ns, name=name))
            for kind, ns, name in ((rct, WORKLOAD_NAMESPACE, "cd-channel"),
                                   (rct, NAMESPACE, daemon),
                                   (claim, WORKLOAD_NAMESPACE, "worker-0-channel"))}

    controller = driver_managed.start_controller()
    wait_for(lambda: admin.get(ds_kind, namespace=NAMESPACE, name=daemon)["spec"]
             ["updateStrategy"]["type"] == "OnDelete" or None,
             what="upstream's DaemonSet taken over", timeout_s=60)
    wait_for(lambda: [e for e in admin.list(kinds.EVENT.kind, namespace=WORKLOAD_NAMESPACE).items
                      if e.get("reason") == controlling.ADOPTED_REASON] or None,
             what="the AdoptedFromUpstream event", timeout_s=60)
    controller.stop()

    cd = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="cd")
    assert cd["metadata"]["uid"] == uid and not cd["metadata"].get("deletionTimestamp")
    assert cd["metadata"]["annotations"][names.ADMITTED_MODE_ANNOTATION] == "driverManaged"
    ds = admin.get(ds_kind, namespace=NAMESPACE, name=daemon)
    assert ds["metadata"]["uid"] == ds_uid
    assert ds["spec"]["selector"] == {"matchLabels": {names.COMPUTE_DOMAIN_LABEL: uid}}
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["resourceClaims"] == [
        {"name": names.DAEMON_REQUEST_NAME, "resourceClaimTemplateName": daemon}]
    assert pod_spec["serviceAccountName"] != upstream.UPSTREAM_DAEMON_ACCOUNT
    assert "imagePullSecrets" not in pod_spec
    for (kind, ns, name), before in kept.items():
        assert _content(admin.get(kind, namespace=ns, name=name)) == before, (kind, name)


def _content(obj: Any) -> dict[str, Any]:
    """What a user wrote and the API server keeps: spec, status, labels, annotations."""
    meta = obj["metadata"]
    return {"uid": meta["uid"], "labels": meta.get("labels"),
            "annotations": meta.get("annotations"), "spec": obj.get("spec"),
            "status": obj.get("status")}
