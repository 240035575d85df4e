"""ResourceClaimTemplates left by an older version of this driver still delete on a real server.

The older driver created RCTs through the `kubernetes` client's default JSON (with spaces), and
kube-apiserver keeps an opaque config's bytes exactly as sent: any later merge patch re-encodes
them and trips the immutable-spec check (422). The controller must still remove its finalizer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import realkube_driver
from kubernetes import client
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import decoding, errors, kinds, modes, names, objects

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def admin(installed: Driver) -> Iterator[KubeCluster]:
    cluster = installed.admin()
    yield cluster
    cluster.close()


def _mode_flags(installed: Driver) -> dict[str, str]:
    if installed.mode == "hostManaged":
        return {"mode": "hostManaged", "isolation": "none", "feature_gates": "HostManagedIMEX=true"}
    return {"mode": "driverManaged", "isolation": "domain", "feature_gates": ""}


def _alive(process: realkube_driver.AppProcess) -> bool:
    if not process.running:
        raise AssertionError(f"controller exited:\n{process.output()[-4000:]}")
    return True


def test_an_older_drivers_template_loses_its_finalizer_when_its_domain_is_deleted(
    installed: Driver, admin: KubeCluster
) -> None:
    raw = admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "legacy", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "legacy-ch"}}},
    })
    config = modes.resolve_driver_config(namespace=NAMESPACE, **_mode_flags(installed)).config
    rct = objects.workload_rct(decoding.compute_domain_from_k8s(raw), config=config)
    rct["metadata"]["finalizers"] = [names.COMPUTE_DOMAIN_FINALIZER]
    # As the older driver sent it: the official client's json.dumps, ", " and ": " included.
    client.ResourceV1Api(installed.kube.admin_client()).create_namespaced_resource_claim_template(
        WORKLOAD_NAMESPACE, rct
    )
    controller = installed.start_controller()
    try:
        wait_for(
            lambda: _alive(controller) and names.COMPUTE_DOMAIN_FINALIZER in (admin.get(
                kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="legacy",
            )["metadata"].get("finalizers") or []),
            what="the controller to adopt the ComputeDomain", timeout_s=120,
        )
        admin.delete(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="legacy")

        def gone() -> bool:
            if not controller.running:
                raise AssertionError(f"controller exited:\n{controller.output()[-4000:]}")
            for kind, name in ((kinds.COMPUTE_DOMAIN.kind, "legacy"),
                               (kinds.RESOURCE_CLAIM_TEMPLATE.kind, "legacy-ch")):
                try:
                    admin.get(kind, namespace=WORKLOAD_NAMESPACE, name=name)
                    return False
                except errors.NotFoundError:
                    pass
            return True

        try:
            wait_for(gone, what="the ComputeDomain and its older template to be gone",
                     timeout_s=30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.output()[-4000:]}") from None
    finally:
        controller.stop()
