"""A ComputeDomain the API server keeps failing, on a real kube-apiserver, in both modes.

An admission webhook that is down (failurePolicy Fail, nothing listening) answers every RCT
create in one namespace with a 500. Pinned: a healthy CD elsewhere still gets its RCT at once
(the failing one backs off alone); the failing CD gets one Warning event and a Reconciled=False
condition naming the webhook; once the webhook is gone, it gets its RCT and the condition goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import realkube_server
from kubernetes import client
from realkube_driver import WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import errors, kinds, names
from core.computedomain import controlling

pytestmark = pytest.mark.slow

DOWN = "webhook-down"
HOOK = "cd-test-down-webhook"


def _cd(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
    }


def _down_webhook() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": HOOK},
        "webhooks": [{
            "name": "down.example.com",
            "clientConfig": {"url": f"https://127.0.0.1:{realkube_server.free_port()}/validate"},
            "rules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                       "operations": ["CREATE"], "resources": ["resourceclaimtemplates"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": DOWN}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
        }],
    }


def _present(admin: KubeCluster, namespace: str, name: str) -> bool:
    try:
        admin.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=namespace, name=name)
    except errors.NotFoundError:
        return False
    return True


def _condition(admin: KubeCluster, name: str) -> Mapping[str, Any] | None:
    cd = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=DOWN, name=name)
    for condition in (cd.get("status") or {}).get("conditions") or ():
        if condition.get("type") == controlling.RECONCILED_CONDITION:
            return dict(condition)
    return None


def test_a_cd_the_webhook_fails_backs_off_alone_is_reported_once_and_recovers(
    installed: Driver, admin: KubeCluster
) -> None:
    installed.kube.ensure_namespace(DOWN)
    installed.kube.apply([_down_webhook()])
    controller = installed.start_controller(identity="controller-down")
    try:
        # NB: the API server loads webhook configurations through an informer: wait until
        # the hook is in force before creating the CD it must fail.
        probe = iter(range(1000))

        def hook_in_force() -> bool:
            name = f"probe-{next(probe)}"
            try:
                admin.create(kinds.RESOURCE_CLAIM_TEMPLATE.kind, {
                    "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name, "namespace": DOWN},
                    "spec": {"spec": {"devices": {}}},
                })
            except errors.ClusterError as exc:
                return "webhook" in exc.message
            return False

        wait_for(hook_in_force, what="the down webhook in force", timeout_s=60)
        admin.create(kinds.COMPUTE_DOMAIN.kind, _cd("stuck", DOWN))
        reported = wait_for(lambda: _condition(admin, "stuck"), what="the failure reported",
                            timeout_s=60)
        assert reported["status"] == "False" and "webhook" in reported["message"]

        admin.create(kinds.COMPUTE_DOMAIN.kind, _cd("fine", WORKLOAD_NAMESPACE))
        wait_for(lambda: _present(admin, WORKLOAD_NAMESPACE, "fine-ch"),
                 what="the healthy CD's RCT despite the failing one", timeout_s=10)
        events = [e for e in admin.list(kinds.EVENT.kind, namespace=DOWN).items
                  if e.get("reason") == controlling.RECONCILE_FAILED_REASON]
        assert len(events) == 1 and int(events[0].get("count") or 1) == 1, events

        client.AdmissionregistrationV1Api(
            installed.kube.admin_client()
        ).delete_validating_webhook_configuration(HOOK)
        wait_for(lambda: _present(admin, DOWN, "stuck-ch"),
                 what="the RCT once the webhook is gone", timeout_s=120)
        wait_for(lambda: _condition(admin, "stuck") is None, what="the condition cleared",
                 timeout_s=30)
    finally:
        if not controller.running:
            print(controller.output()[-4000:])
        controller.stop()
