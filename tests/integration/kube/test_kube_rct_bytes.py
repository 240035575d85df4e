"""Objects with an opaque DRA config stay patchable: the bytes the driver sends them in.

The embedded API server keeps an RCT's `parameters` bytes as created and refuses (422 "field
is immutable") any update whose re-encode differs, as kube-apiserver does. Covered: the workload
and daemon RCTs this driver creates take metadata patches (finalizer removal) directly; an RCT
created by an older driver (the client's spaced JSON) is updated by GET + PUT instead; the PUT
keeps the patch's resourceVersion precondition.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kube import _codec, cluster
from adapters.memory import _raw_extension, apiserver
from core import errors, kinds, models, names
from core.computedomain import objects

RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind


def _config() -> models.DriverConfig:
    return models.DriverConfig(
        mode=models.IMEXMode.DRIVER_MANAGED,
        isolation=models.Isolation.DOMAIN,
        gates=models.FeatureGates(values={}),
        namespace="nvidia-dra-driver",
    )


def _cd() -> models.ComputeDomain:
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name="cd", namespace="team-a", uid="4f0b8a0e-0000-4000-8000-000000000001"
        ),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="cd-channel")
        ),
    )


def _drop_finalizer(kube: cluster.KubeCluster, rct: dict[str, Any] | Any, **kw: str) -> Any:
    meta = rct["metadata"]
    return kube.patch(
        RCT, namespace=meta["namespace"], name=meta["name"],
        patch={"metadata": {"finalizers": []}}, **kw,
    )


@pytest.mark.parametrize("build", [objects.workload_rct, objects.daemon_rct],
                         ids=["workload", "daemon"])
def test_rcts_the_driver_creates_take_a_finalizer_patch(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer, build: Any
) -> None:
    created = kube.create(RCT, build(_cd(), config=_config()))

    patched = _drop_finalizer(kube, created)

    assert patched["metadata"].get("finalizers") in (None, [])
    [create, patch] = server.requests()
    assert (create.method, patch.method) == ("POST", "PATCH")
    [stored] = _raw_extension.parameters_as_sent(_codec.create_request(
        kinds.RESOURCE_CLAIM_TEMPLATE, build(_cd(), config=_config())).encoded_body() or b"")
    assert b" " not in stored, "opaque parameters are not sent as compact JSON"


def _create_like_an_older_driver(kube: cluster.KubeCluster) -> Any:
    obj = objects.workload_rct(_cd(), config=_config())
    request = _codec.create_request(kinds.RESOURCE_CLAIM_TEMPLATE, obj)
    spaced = _codec.Request(
        method=request.method, path=request.path, body=request.body,
        body_encoding=_codec.BodyEncoding.CLIENT_DEFAULT,
    )
    return kube._api.request_json(spaced)


def test_an_older_drivers_rct_is_patched_through_a_replace(
    kube: cluster.KubeCluster, server: apiserver.EmbeddedAPIServer
) -> None:
    created = _create_like_an_older_driver(kube)

    version = created["metadata"]["resourceVersion"]
    patched = _drop_finalizer(kube, created, resource_version=version)

    assert patched["metadata"].get("finalizers") in (None, [])
    stored = kube.get(RCT, namespace="team-a", name="cd-channel")
    assert stored["metadata"].get("finalizers") in (None, [])
    assert stored["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == _cd().uid
    assert [r.method for r in server.requests()] == ["POST", "PATCH", "GET", "PUT", "GET"]


def test_the_replace_keeps_the_patchs_resource_version_precondition(
    kube: cluster.KubeCluster,
) -> None:
    created = _create_like_an_older_driver(kube)
    kube.patch(RCT, namespace="team-a", name="cd-channel",
               patch={"metadata": {"labels": {"touched": "yes"}}})

    with pytest.raises(errors.ConflictError, match="changed since it was read"):
        _drop_finalizer(kube, created, resource_version=created["metadata"]["resourceVersion"])


def test_a_real_spec_change_is_still_refused_as_immutable(kube: cluster.KubeCluster) -> None:
    created = kube.create(RCT, objects.workload_rct(_cd(), config=_config()))
    # The spec really changes: refused by the PATCH, then by the PUT it falls back to.
    with pytest.raises(errors.ClusterError, match="field is immutable"):
        kube.patch(RCT, namespace="team-a", name=created["metadata"]["name"],
                   patch={"spec": {"spec": {"devices": {"config": [
                       {"requests": ["channel"], "opaque": {
                           "driver": names.DRIVER_NAME, "parameters": {"domainID": "other"}}},
                   ]}}}})
