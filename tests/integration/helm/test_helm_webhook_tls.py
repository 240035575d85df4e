"""The webhook's serving certificate: upstream's webhook.tls modes through our chart (issue 19).

Covers: cert-manager mode (Issuer for `selfsigned`, a Certificate for the webhook Service's
DNS name, the Secret it fills mounted by the webhook, the CA injected by annotation), a given
issuer or cluster issuer, secret mode (given Secret, caBundle), the chart's older keys, the
refusals with what to set, and upstream's own webhook.tls values (read from ../shared).
"""

from __future__ import annotations

import pathlib
from typing import Any

import chart_rendering as cr
import helm_python
import kubernetes_validate
import pytest
import yaml

WEBHOOK = f"{cr.RELEASE}-compute-domain-dra-driver-webhook"
SERVICE_DNS = f"{WEBHOOK}.{cr.NAMESPACE}.svc"
UPSTREAM_VALUES = (
    pathlib.Path(cr.REPO_ROOT).parent / "shared/reference/upstream-helm/values.yaml"
)


def _webhook(**tls: Any) -> dict[str, Any]:
    return {"webhook": {"enabled": True, "tls": tls}}


def _mounted_secret(objects: list[cr.Obj]) -> str:
    deployment = cr.one(objects, "Deployment", WEBHOOK)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    return str(volumes["tls"]["secret"]["secretName"])


def _configuration(objects: list[cr.Obj]) -> cr.Obj:
    return cr.one(objects, "ValidatingWebhookConfiguration")


def _ca_bundle(objects: list[cr.Obj]) -> str | None:
    return _configuration(objects)["webhooks"][0]["clientConfig"].get("caBundle")


def _inject_ca_from(objects: list[cr.Obj]) -> str | None:
    annotations = _configuration(objects)["metadata"].get("annotations") or {}
    return annotations.get("cert-manager.io/inject-ca-from")


def test_cert_manager_with_a_self_signed_issuer_is_the_default() -> None:
    objects = cr.render({"webhook": {"enabled": True}})
    issuer = cr.one(objects, "Issuer")
    assert issuer["apiVersion"] == "cert-manager.io/v1"
    assert issuer["metadata"]["namespace"] == cr.NAMESPACE
    assert issuer["spec"] == {"selfSigned": {}}
    certificate = cr.one(objects, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["metadata"]["namespace"] == cr.NAMESPACE
    assert certificate["spec"]["dnsNames"] == [SERVICE_DNS]
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io", "kind": "Issuer", "name": issuer["metadata"]["name"],
    }
    # The webhook serves the Secret cert-manager fills; the API server trusts the injected CA.
    assert _mounted_secret(objects) == certificate["spec"]["secretName"]
    assert _inject_ca_from(objects) == f"{cr.NAMESPACE}/{certificate['metadata']['name']}"
    assert _ca_bundle(objects) is None
    service = cr.one(objects, "Service", WEBHOOK)["metadata"]
    assert f"{service['name']}.{service['namespace']}.svc" == SERVICE_DNS


@pytest.mark.parametrize(("issuer_type", "kind"), [
    ("clusterissuer", "ClusterIssuer"), ("issuer", "Issuer"),
])
def test_cert_manager_with_a_given_issuer_creates_none(issuer_type: str, kind: str) -> None:
    objects = cr.render(_webhook(mode="cert-manager", certManager={
        "issuerType": issuer_type, "issuerName": "corp-ca", "dnsNames": ["webhook.example"],
    }))
    assert cr.find(objects, "Issuer") == []
    certificate = cr.one(objects, "Certificate")
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io", "kind": kind, "name": "corp-ca",
    }
    assert certificate["spec"]["dnsNames"] == [SERVICE_DNS, "webhook.example"]
    assert _inject_ca_from(objects) == f"{cr.NAMESPACE}/{certificate['metadata']['name']}"


def test_secret_mode_uses_the_given_secret_and_ca_bundle() -> None:
    objects = cr.render(_webhook(mode="secret", secret={"name": "my-tls", "caBundle": "Y2E="}))
    assert cr.find(objects, "Issuer") == [] and cr.find(objects, "Certificate") == []
    assert _mounted_secret(objects) == "my-tls"
    assert _ca_bundle(objects) == "Y2E="
    assert _inject_ca_from(objects) is None


def test_the_older_keys_still_mean_a_given_secret() -> None:
    objects = cr.render(_webhook(secretName="old-tls", caBundle="b2xk"))
    assert cr.find(objects, "Certificate") == []
    assert _mounted_secret(objects) == "old-tls"
    assert _ca_bundle(objects) == "b2xk"
    external = cr.render(_webhook(secretName="old-tls", certManagerCertificate="ns/ext"))
    assert _inject_ca_from(external) == "ns/ext"
    # The new names win where both are given.
    both = cr.render(_webhook(secretName="old", secret={"name": "new", "caBundle": "bmV3"}))
    assert (_mounted_secret(both), _ca_bundle(both)) == ("new", "bmV3")


@pytest.mark.parametrize(("tls", "needs"), [
    ({"mode": "secret"}, "webhook.tls.secret.name"),
    ({"certManager": {"issuerType": "issuer"}}, "webhook.tls.certManager.issuerName"),
    ({"certManager": {"issuerType": "clusterissuer"}}, "ClusterIssuer"),
    ({"mode": "vault"}, "webhook/tls/mode"),
    ({"certManager": {"issuerType": "acme"}}, "issuerType"),
    ({"secret": {"nam": "x"}}, "nam"),
])
def test_incomplete_tls_settings_are_refused_with_what_to_set(
    tls: dict[str, Any], needs: str
) -> None:
    assert needs in cr.render_error(_webhook(**tls))


def test_nothing_of_the_webhook_renders_when_it_is_off() -> None:
    objects = cr.render({"webhook": {"enabled": False, "tls": {"mode": "cert-manager"}}})
    assert cr.find(objects, "Certificate") == [] and cr.find(objects, "Issuer") == []


def test_upstreams_webhook_tls_values_render_unchanged() -> None:
    upstream = yaml.safe_load(UPSTREAM_VALUES.read_text())["webhook"]["tls"]
    assert upstream["mode"] == "cert-manager"  # what this test is about
    objects = cr.render(_webhook(**upstream))
    assert cr.one(objects, "Certificate")["spec"]["dnsNames"] == [SERVICE_DNS]
    assert cr.one(objects, "Issuer")["spec"] == {"selfSigned": {}}
    secret_mode = {**upstream, "mode": "secret",
                   "secret": {**upstream["secret"], "name": "given", "caBundle": "Y2E="}}
    objects = cr.render(_webhook(**secret_mode))
    assert (_mounted_secret(objects), _ca_bundle(objects)) == ("given", "Y2E=")


@pytest.mark.parametrize("tls", [
    {}, {"mode": "secret", "secret": {"name": "my-tls", "caBundle": "Y2E="}},
], ids=["cert-manager", "secret"])
def test_each_mode_passes_kubernetes_validation_and_helm_lint(tls: dict[str, Any]) -> None:
    values = _webhook(**tls)
    for obj in cr.render(values):
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue  # a CRD's kind: not in Kubernetes' own schemas
        kubernetes_validate.validate(obj, cr.KUBE_VERSIONS[-1], strict=True)
    report = helm_python.lint(
        str(cr.CHART_DIR), values, strict=True,
        kube_version=f"v{cr.KUBE_VERSIONS[-1]}.0", namespace=cr.NAMESPACE,
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
