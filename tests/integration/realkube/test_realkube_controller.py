"""The controller against a real kube-apiserver, in both IMEX modes, with the chart's RBAC only.

What the in-memory cluster cannot show: the API server's own validation of what we send
(immutable RawExtension bytes in RCT specs, DNS names), finalizer handling, and a restart of
the server under a running controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import realkube_driver
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import errors, kinds, names

pytestmark = pytest.mark.slow

GONE_WITHIN_S = 30.0


def create_compute_domain(admin: KubeCluster, name: str, *, rct: str = "") -> Mapping[str, Any]:
    return admin.create(
        kinds.COMPUTE_DOMAIN.kind,
        {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"numNodes": 2,
                     "channel": {"resourceClaimTemplate": {"name": rct or f"{name}-channel"}}},
        },
    )


def present(
    admin: KubeCluster, kind: str, *, namespace: str, name: str
) -> Mapping[str, Any] | None:
    try:
        return admin.get(kind, namespace=namespace, name=name)
    except errors.NotFoundError:
        return None


def gone(admin: KubeCluster, kind: str, *, namespace: str, name: str) -> bool:
    return present(admin, kind, namespace=namespace, name=name) is None


def alive(process: realkube_driver.AppProcess) -> None:
    if not process.running:
        raise AssertionError(f"controller exited:\n{process.output()[-4000:]}")


def test_a_compute_domain_gets_its_finalizer_and_channel_template(
    installed: Driver, controller: realkube_driver.AppProcess, admin: KubeCluster
) -> None:
    cd = create_compute_domain(admin, "alpha")
    uid = cd["metadata"]["uid"]

    def template() -> Mapping[str, Any] | None:
        alive(controller)
        return present(
            admin, kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE,
            name="alpha-channel",
        )

    rct = wait_for(template, what="the workload ResourceClaimTemplate", timeout_s=60)
    assert rct["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == uid
    assert names.COMPUTE_DOMAIN_FINALIZER in rct["metadata"]["finalizers"]
    devices = rct["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == names.CHANNEL_DEVICE_CLASS
    parameters = devices["config"][0]["opaque"]["parameters"]
    assert parameters["kind"] == names.KIND_CHANNEL_CONFIG
    assert parameters["domainID"] == uid

    def finalized() -> bool:
        stored = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="alpha")
        return names.COMPUTE_DOMAIN_FINALIZER in (stored["metadata"].get("finalizers") or [])

    wait_for(finalized, what="the ComputeDomain's finalizer", timeout_s=30)
    if installed.mode == "hostManaged":

        def ready() -> bool:
            stored = admin.get(
                kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="alpha"
            )
            return (stored.get("status") or {}).get("status") == "Ready"

        wait_for(ready, what="status Ready", timeout_s=30)
    else:
        wait_for(
            lambda: present(admin, kinds.DAEMON_SET.kind, namespace=NAMESPACE,
                            name=names.daemonset_name(uid)),
            what="the IMEX DaemonSet", timeout_s=30,
        )


def test_deleting_a_compute_domain_removes_it_and_everything_it_owns(
    installed: Driver, controller: realkube_driver.AppProcess, admin: KubeCluster
) -> None:
    cd = create_compute_domain(admin, "beta")
    uid = cd["metadata"]["uid"]
    wait_for(
        lambda: present(admin, kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE,
                        name="beta-channel"),
        what="the workload RCT", timeout_s=60,
    )
    if installed.mode == "driverManaged":
        wait_for(
            lambda: present(admin, kinds.DAEMON_SET.kind, namespace=NAMESPACE,
                            name=names.daemonset_name(uid)),
            what="the IMEX DaemonSet", timeout_s=30,
        )

    admin.delete(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="beta")

    def everything_gone() -> bool:
        alive(controller)
        owned = [
            (kinds.COMPUTE_DOMAIN.kind, WORKLOAD_NAMESPACE, "beta"),
            (kinds.RESOURCE_CLAIM_TEMPLATE.kind, WORKLOAD_NAMESPACE, "beta-channel"),
            (kinds.DAEMON_SET.kind, NAMESPACE, names.daemonset_name(uid)),
            (kinds.RESOURCE_CLAIM_TEMPLATE.kind, NAMESPACE, names.daemonset_name(uid)),
        ]
        return all(gone(admin, kind, namespace=ns, name=name) for kind, ns, name in owned)

    try:
        wait_for(everything_gone, what="the ComputeDomain and its objects to be gone",
                 timeout_s=GONE_WITHIN_S)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; controller output:\n{controller.output()[-4000:]}") from None


def test_the_controller_rides_out_an_api_server_restart(
    installed: Driver, controller: realkube_driver.AppProcess, admin: KubeCluster
) -> None:
    installed.kube.stop_apiserver()
    installed.kube.start_apiserver()
    # NB: under leader election (the chart's default) a leader that could not renew its lease
    # for renewDeadline must stop: it exits 1 and its pod restarts. Do as the kubelet would.
    current = [controller]

    def restarted_if_it_lost_the_lease() -> None:
        if not current[-1].running:
            output = current[-1].output()[-4000:]
            assert current[-1].wait(10) == 1 and "event=leadership_lost" in output, output
            current.append(installed.start_controller())

    create_compute_domain(admin, "gamma")
    wait_for(
        lambda: restarted_if_it_lost_the_lease() or present(
            admin, kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE,
            name="gamma-channel"),
        what="an RCT for a CD created after the API server restarted", timeout_s=90,
    )
