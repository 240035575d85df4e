"""Opaque-config bytes on a real kube-apiserver: every RCT the driver creates stays patchable.

kube-apiserver keeps a DeviceClaimConfiguration's `parameters` (a RawExtension) as the exact
bytes the creator sent and re-encodes them on a patch, so a spaced body (the `kubernetes`
client's default JSON) makes every later metadata patch fail with 422 "field is immutable":
deletion never finished. Pinned here: the workload and daemon RCTs as this driver sends them take
a finalizer patch; an RCT as an older driver sent it reproduces the 422 on a plain merge patch and
is still updated through `KubeCluster.patch` (GET + PUT); and a ComputeDomain whose RCT an older
driver created is deleted to the end by the controller, in both modes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import realkube_server
from realkube_driver import WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster, _codec
from core import errors, kinds, models, names
from core.computedomain import objects

pytestmark = pytest.mark.slow

RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind
NS = "bytes"


def _config(mode: models.IMEXMode = models.IMEXMode.DRIVER_MANAGED) -> models.DriverConfig:
    return models.DriverConfig(
        mode=mode,
        isolation=models.Isolation.DOMAIN
        if mode is models.IMEXMode.DRIVER_MANAGED else models.Isolation.NONE,
        gates=models.FeatureGates(values={}),
        namespace=NS,
    )


def _cd(name: str, uid: str, *, namespace: str = NS) -> models.ComputeDomain:
    return models.ComputeDomain(
        meta=models.ObjectMeta(name=name, namespace=namespace, uid=uid),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name=f"{name}-channel")
        ),
    )


@pytest.fixture(scope="module")
def admin(real_apiserver: realkube_server.RealKube) -> Iterator[KubeCluster]:
    real_apiserver.ensure_namespace(NS)
    cluster = real_apiserver.cluster(real_apiserver.admin_kubeconfig(), component="bytes-test")
    yield cluster
    cluster.close()


def _create_like_an_older_driver(kube: KubeCluster, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    request = _codec.create_request(kinds.RESOURCE_CLAIM_TEMPLATE, obj)
    spaced = _codec.Request(method=request.method, path=request.path, body=request.body,
                            body_encoding=_codec.BodyEncoding.CLIENT_DEFAULT)
    return kube._api.request_json(spaced)


def _drop_finalizer(kube: KubeCluster, rct: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = rct["metadata"]
    return kube.patch(RCT, namespace=meta["namespace"], name=meta["name"],
                      patch={"metadata": {"finalizers": None}},
                      resource_version=meta["resourceVersion"])


@pytest.mark.parametrize("build", [objects.workload_rct, objects.daemon_rct],
                         ids=["workload", "daemon"])
def test_rcts_as_the_driver_sends_them_take_a_finalizer_patch_and_go(
    admin: KubeCluster, build: Any
) -> None:
    uid = "6d1c3a52-0000-4000-8000-00000000000" + ("1" if build is objects.workload_rct else "2")
    created = admin.create(RCT, build(_cd(f"new-{uid[-1]}", uid), config=_config()))
    name = created["metadata"]["name"]

    patched = _drop_finalizer(admin, created)

    assert not patched["metadata"].get("finalizers")
    admin.delete(RCT, namespace=NS, name=name)
    with pytest.raises(errors.NotFoundError):
        admin.get(RCT, namespace=NS, name=name)


def test_an_older_drivers_rct_refuses_a_merge_patch_but_is_updated_by_a_replace(
    admin: KubeCluster,
) -> None:
    uid = "6d1c3a52-0000-4000-8000-000000000003"
    obj = objects.workload_rct(_cd("old", uid), config=_config())
    created = _create_like_an_older_driver(admin, obj)
    plain = _codec.patch_request(
        kinds.RESOURCE_CLAIM_TEMPLATE, namespace=NS, name="old-channel",
        patch={"metadata": {"finalizers": None}},
    )
    with pytest.raises(errors.ClusterError, match="field is immutable"):
        admin._api.request_json(plain)  # the bug, as kube-apiserver shows it

    patched = _drop_finalizer(admin, created)

    assert not patched["metadata"].get("finalizers")
    assert patched["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == uid
    admin.delete(RCT, namespace=NS, name="old-channel")


@pytest.fixture(scope="module")
def driver_admin(installed: Driver) -> Iterator[KubeCluster]:
    cluster = installed.admin()
    yield cluster
    cluster.close()


def test_a_cd_whose_rct_an_older_driver_created_is_deleted_to_the_end(
    installed: Driver, driver_admin: KubeCluster
) -> None:
    admin = driver_admin
    cd = admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "legacy", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "legacy-channel"}}},
    })
    mode = models.IMEXMode(installed.mode)
    legacy = _cd("legacy", cd["metadata"]["uid"], namespace=WORKLOAD_NAMESPACE)
    _create_like_an_older_driver(admin, objects.workload_rct(legacy, config=_config(mode)))
    controller = installed.start_controller(identity="controller-bytes")
    try:
        def finalized() -> bool:
            stored = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE,
                               name="legacy")
            return names.COMPUTE_DOMAIN_FINALIZER in (stored["metadata"].get("finalizers") or [])

        wait_for(finalized, what="the controller admitting the CD", timeout_s=60)
        admin.delete(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="legacy")

        def gone() -> bool:
            if not controller.running:
                raise AssertionError(f"controller exited:\n{controller.output()[-4000:]}")
            for kind, name in ((kinds.COMPUTE_DOMAIN.kind, "legacy"), (RCT, "legacy-channel")):
                try:
                    admin.get(kind, namespace=WORKLOAD_NAMESPACE, name=name)
                    return False
                except errors.NotFoundError:
                    continue
            return True

        try:
            wait_for(gone, what="the CD and its older-driver RCT gone", timeout_s=30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.output()[-4000:]}") from None
    finally:
        controller.stop()


def test_the_chart_warns_whoever_creates_a_cd_with_a_bad_rct_name(installed: Driver) -> None:
    api = installed.kube.admin_client()
    attempts = iter(range(1000))

    def warned() -> str | None:
        body = {
            "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": f"warned-{next(attempts)}", "namespace": WORKLOAD_NAMESPACE},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "Bad_Name"}}},
        }
        response = api.call_api(
            "POST", f"{installed.kube.url}/apis/{names.GROUP_VERSION}/namespaces/"
            f"{WORKLOAD_NAMESPACE}/computedomains",
            header_params={"Content-Type": "application/json",
                           "Authorization": f"Bearer {installed.kube.admin_token}"},
            body=body,
        )
        response.read()
        assert response.status == 201, "the policy must warn, never refuse"
        warning = response.getheader("Warning") or ""
        return warning if "is not a valid object name" in warning else None

    # NB: the API server loads new admission policies within a second or so.
    assert "Delete it and create it again" in wait_for(warned, what="the warning", timeout_s=30)
