"""A claim whose opaque config has an unknown field fails prepare with upstream's phrase.

Upstream's end-to-end tests create such a claim and grep the kubelet plugin's log for
`strict decoding error: unknown field "unexpectedField"` (Kubernetes' strict decoding); ours
says the same, then where and which fields are accepted, to the kubelet and in its log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pluginapp_env import NAMESPACE, consumer, create_domain, create_pod, node, prepare

from apps.cli import embedded
from core import kinds, models, names

PHRASE = 'strict decoding error: unknown field "unexpectedField"'


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def test_an_unknown_field_fails_prepare_with_upstreams_strict_decoding_phrase(
    env: embedded.Embedded, caplog: pytest.LogCaptureFixture
) -> None:
    cd_uid = create_domain(env, "cd")
    here = node(env).name
    created = env.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": "bad-opaque-config", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    pod = create_pod(env, "bad-opaque-config-pod", node_name=here)
    params = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
              "domainID": cd_uid, "unexpectedField": "x"}
    env.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="bad-opaque-config",
        subresource="status",
        patch={"status": {"allocation": {"devices": {
            "results": [{"request": "channel", "driver": names.DRIVER_NAME, "pool": here,
                         "device": "channel-0"}],
            "config": [{"source": "FromClaim", "requests": ["channel"],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
        }}, "reservedFor": [consumer(pod)]}},
    )
    ref = models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]), namespace=NAMESPACE,
                          name="bad-opaque-config")

    with caplog.at_level(logging.WARNING):
        result = prepare(env, ref)

    assert PHRASE in result.error
    assert "accepted fields are apiVersion, kind, domainID, allocationMode" in result.error
    assert any(PHRASE in record.getMessage() for record in caplog.records)
