"""Two controller replicas (one leads), and the admission webhook, on a real kube-apiserver.

The webhook listens on a loopback URL instead of behind a Service: the API server calls it
over TLS with the CA bundle the chart's ValidatingWebhookConfiguration carries.
"""

from __future__ import annotations

import base64
import pathlib
import subprocess
from collections.abc import Mapping
from typing import Any

import pytest
import realkube_driver
import realkube_server
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import errors, kinds, names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("installed", ["hostManaged"], indirect=True),
]

LEASE = "compute-domain-controller"


def lease_holder(admin: KubeCluster) -> str | None:
    try:
        lease = admin.get(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE)
    except errors.NotFoundError:
        return None
    return str((lease.get("spec") or {}).get("holderIdentity") or "") or None


def rct_of(admin: KubeCluster, cd: str) -> Mapping[str, Any] | None:
    try:
        return admin.get(
            kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE, name=f"{cd}-channel"
        )
    except errors.NotFoundError:
        return None


def create_cd(admin: KubeCluster, name: str) -> None:
    admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })


def test_two_replicas_one_leads_and_the_other_takes_over(
    installed: Driver, admin: KubeCluster
) -> None:
    replicas = {
        identity: installed.start_controller(identity=identity, extra_env={"LEADER_ELECT": "true"})
        for identity in ("controller-a", "controller-b")
    }
    try:
        leader = wait_for(lambda: lease_holder(admin), what="a lease holder", timeout_s=60)
        assert leader in replicas
        create_cd(admin, "led")
        wait_for(lambda: rct_of(admin, "led"), what="the leader to reconcile", timeout_s=60)

        replicas[leader].stop()  # SIGTERM: a clean stop releases the lease
        follower = next(i for i in replicas if i != leader)
        wait_for(lambda: lease_holder(admin) == follower, what="the follower to lead",
                 timeout_s=60)
        create_cd(admin, "after-failover")
        wait_for(lambda: rct_of(admin, "after-failover"), what="the new leader to reconcile",
                 timeout_s=60)
        assert replicas[follower].running
    finally:
        for process in replicas.values():
            process.stop()


def _serving_certificate(workdir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = workdir / "webhook.crt", workdir / "webhook.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def _claim(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"devices": {
            "requests": [{"name": names.CHANNEL_REQUEST_NAME,
                          "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}],
            "config": [{"requests": [names.CHANNEL_REQUEST_NAME],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": dict(parameters)}}],
        }},
    }


def test_the_webhook_refuses_a_bad_opaque_config_and_admits_a_good_one(
    installed: Driver, admin: KubeCluster
) -> None:
    cert, key = _serving_certificate(installed.workdir)
    port = realkube_server.free_port()
    values = {**realkube_driver.MODES[installed.mode],
              "webhook": {"enabled": True, "tls": {
                  "secretName": "webhook-tls",
                  "caBundle": base64.b64encode(cert.read_bytes()).decode()}}}
    rendered = realkube_driver.render(values)
    env = realkube_driver.container_env(
        rendered, kind="Deployment", container="webhook",
        field_refs={"metadata.namespace": NAMESPACE},
    )
    env.update({"WEBHOOK_ADDRESS": "127.0.0.1", "WEBHOOK_PORT": str(port),
                "TLS_CERT_FILE": str(cert), "TLS_KEY_FILE": str(key)})
    webhook = installed.launch("apps.cli", ["webhook"], env)
    configuration = next(o for o in rendered if o["kind"] == "ValidatingWebhookConfiguration")
    for hook in configuration["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        del hook["clientConfig"]["service"]
        hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{path}"
    try:
        installed.kube.apply([configuration])
        bad = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
               "domainID": "5f7e0a36-5b52-4a8e-9a55-6f1c1b0d2f00", "allocationMode": "Bogus"}

        def refused() -> str | None:
            if not webhook.running:
                raise AssertionError(f"webhook exited:\n{webhook.output()[-4000:]}")
            try:
                admin.create(kinds.RESOURCE_CLAIM.kind, _claim("bad-config", bad))
            except errors.ClusterError as exc:
                return exc.message if "admission webhook" in exc.message else None
            # NB: the API server loads a new webhook configuration through an informer.
            admin.delete(kinds.RESOURCE_CLAIM.kind, namespace=WORKLOAD_NAMESPACE,
                         name="bad-config")
            return None

        message = wait_for(refused, what="the webhook to refuse a bad config", timeout_s=60)
        assert "allocationMode" in message

        good = {**bad, "allocationMode": "Single"}
        admin.create(kinds.RESOURCE_CLAIM.kind, _claim("good-config", good))
    finally:
        webhook.stop()
