"""The chart's MutatingWebhookConfiguration (fabricTopologyConfig constraints), rendered by Helm.

Covers: it renders beside the validating configuration when the webhook is enabled, the GPU
half is on and gate FabricTopologySupport is effective (explicitly or through AllAlpha), calls
the webhook Service at the path the webhook serves, for the creation of claims and templates
in every resource.k8s.io version, with the same CA (given bundle or cert-manager injection) as
the validating one, and validates strictly; and that it is absent otherwise.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import kubernetes_validate
import pytest

from core import admission

WEBHOOK = f"{cr.RELEASE}-compute-domain-dra-driver-webhook"
GATES = {"FabricTopologySupport": True, "FabricManagerPartitioning": True}


def values(*, gates: dict[str, bool] | None = None, gpus: bool = True,
           enabled: bool = True, **tls: Any) -> dict[str, Any]:
    return {
        "webhook": {"enabled": enabled, "tls": tls or {"secretName": "webhook-tls",
                                                     "caBundle": "Q0EK"}},
        "resources": {"gpus": {"enabled": gpus}},
        "featureGates": GATES if gates is None else gates,
    }


def test_the_mutating_configuration_calls_the_webhooks_mutate_path_on_claim_creation() -> None:
    objects = cr.render(values())
    mutating = cr.one(objects, "MutatingWebhookConfiguration", WEBHOOK)
    validating = cr.one(objects, "ValidatingWebhookConfiguration", WEBHOOK)
    (hook,) = mutating["webhooks"]
    assert hook["clientConfig"] == {
        "service": {"name": WEBHOOK, "namespace": cr.NAMESPACE,
                    "path": admission.MUTATE_PATH, "port": 443},
        "caBundle": "Q0EK",
    }
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == (
        admission.VALIDATE_PATH)
    assert hook["rules"] == [{
        "apiGroups": ["resource.k8s.io"], "apiVersions": ["v1", "v1beta1", "v1beta2"],
        "operations": ["CREATE"], "resources": ["resourceclaims", "resourceclaimtemplates"],
        "scope": "Namespaced",
    }]
    assert (hook["sideEffects"], hook["admissionReviewVersions"], hook["reinvocationPolicy"]) == (
        "None", ["v1"], "Never")
    assert hook["failurePolicy"] == validating["webhooks"][0]["failurePolicy"]
    assert "namespace" not in mutating["metadata"]
    for version in cr.KUBE_VERSIONS:
        kubernetes_validate.validate(mutating, version, strict=True)


def test_with_cert_manager_the_ca_is_injected_as_into_the_validating_one() -> None:
    objects = cr.render(values(mode="cert-manager"))
    annotation = "cert-manager.io/inject-ca-from"
    mutating = cr.one(objects, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    validating = cr.one(objects, "ValidatingWebhookConfiguration")["metadata"]["annotations"]
    assert mutating[annotation] == validating[annotation]
    assert "caBundle" not in cr.one(objects, "MutatingWebhookConfiguration")["webhooks"][0][
        "clientConfig"]


def test_all_alpha_makes_the_gate_effective() -> None:
    gates = {"AllAlpha": True, "DynamicMIG": False, "NVMLDeviceHealthCheck": False,
             "DeviceMetadata": False}
    assert cr.find(cr.render(values(gates=gates)), "MutatingWebhookConfiguration")


@pytest.mark.parametrize(
    "given",
    [values(enabled=False), values(gpus=False), values(gates={}),
     values(gates={"FabricTopologySupport": False, "FabricManagerPartitioning": True})],
    ids=["webhook-off", "gpu-half-off", "gate-unset", "gate-false"],
)
def test_no_mutating_configuration_where_it_could_not_act(given: dict[str, Any]) -> None:
    assert cr.find(cr.render(given), "MutatingWebhookConfiguration") == []


def test_the_gate_without_fabric_manager_partitioning_fails_rendering() -> None:
    message = cr.render_error(values(gates={"FabricTopologySupport": True}))
    assert "feature gate FabricTopologySupport=true requires FabricManagerPartitioning=true" in (
        message)
