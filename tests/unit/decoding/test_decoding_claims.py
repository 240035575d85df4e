"""ResourceClaim decoding and DRA opaque-config precedence (class before claim, later wins)."""

from __future__ import annotations

from typing import Any

import pytest

from core import decoding, errors, models, names

OTHER_DRIVER = "gpu.nvidia.com"


def params(domain_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": domain_id,
        **extra,
    }


def config_entry(
    source: str, domain_id: str, *, requests: list[str] | None = None,
    driver: str = names.DRIVER_NAME, **extra: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": params(domain_id, **extra)},
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


def claim_json(*configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim-a", "namespace": "team-a", "uid": "claim-uid"},
        "spec": {"devices": {"requests": [{"name": "channel"}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "channel", "driver": names.DRIVER_NAME, "pool": "node-1",
                         "device": "channel-0", "adminAccess": None},
                    ],
                    "config": list(configs),
                },
                "nodeSelector": {"nodeSelectorTerms": []},
            },
        },
    }


def test_claim_decodes_results_and_configs_in_order() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(
            config_entry("FromClaim", "b", requests=["channel"]),
            config_entry("FromClass", "a"),
        )
    )
    assert claim.uid == "claim-uid"
    assert (claim.namespace, claim.name, claim.allocated) == ("team-a", "claim-a", True)
    assert claim.results == (
        models.DeviceResult(
            request="channel", driver=names.DRIVER_NAME, pool="node-1", device="channel-0"
        ),
    )
    assert claim.configs == (
        models.RawOpaqueConfig(
            source=models.ConfigSource.CLAIM, requests=("channel",), driver=names.DRIVER_NAME,
            parameters=params("b"),
        ),
        models.RawOpaqueConfig(
            source=models.ConfigSource.CLASS, requests=(), driver=names.DRIVER_NAME,
            parameters=params("a"),
        ),
    )


def test_claim_without_allocation_is_not_allocated() -> None:
    obj = claim_json()
    del obj["status"]
    claim = decoding.resource_claim_from_k8s(obj)
    assert claim.allocated is False
    assert claim.results == ()
    assert claim.configs == ()


def test_claim_without_uid_is_rejected() -> None:
    obj = claim_json()
    del obj["metadata"]["uid"]
    with pytest.raises(errors.DecodeError, match=r"metadata\.uid is required"):
        decoding.resource_claim_from_k8s(obj)


def test_claim_result_missing_device_names_path() -> None:
    obj = claim_json()
    del obj["status"]["allocation"]["devices"]["results"][0]["device"]
    with pytest.raises(errors.DecodeError) as caught:
        decoding.resource_claim_from_k8s(obj)
    assert caught.value.field == "status.allocation.devices.results[0].device"


def test_claim_result_admin_access_is_read() -> None:
    obj = claim_json()
    obj["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    assert decoding.resource_claim_from_k8s(obj).results[0].admin_access is True


def test_claim_result_admin_access_that_is_no_boolean_names_path() -> None:
    obj = claim_json()
    obj["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = "yes"
    with pytest.raises(errors.DecodeError) as caught:
        decoding.resource_claim_from_k8s(obj)
    assert caught.value.field == "status.allocation.devices.results[0].adminAccess"
    assert "must be true or false, got string" in caught.value.message


def test_claim_config_with_unknown_source_is_rejected() -> None:
    obj = claim_json(config_entry("FromPod", "a"))
    with pytest.raises(errors.DecodeError) as caught:
        decoding.resource_claim_from_k8s(obj)
    assert caught.value.field == "status.allocation.devices.config[0].source"
    assert "use FromClass or FromClaim" in caught.value.message


def test_claim_config_entry_without_opaque_is_skipped() -> None:
    claim = decoding.resource_claim_from_k8s(claim_json({"source": "FromClass"}))
    assert claim.configs == ()


def test_precedence_class_then_claim_later_wins() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(
            config_entry("FromClaim", "claim-1"),
            config_entry("FromClaim", "claim-2"),
            config_entry("FromClass", "class-1"),
        )
    )
    assert decoding.config_for_request(claim, request="channel") == models.ChannelConfig(
        domain_id="claim-2"
    )


def test_precedence_class_config_used_when_no_claim_config() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(config_entry("FromClass", "class-1"), config_entry("FromClass", "class-2"))
    )
    assert decoding.config_for_request(claim, request="channel") == models.ChannelConfig(
        domain_id="class-2"
    )


def test_other_driver_config_is_ignored() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(
            config_entry("FromClass", "ours"),
            # Would be a strict-decode error if it were ours.
            config_entry("FromClaim", "theirs", driver=OTHER_DRIVER, bogus=1),
        )
    )
    assert decoding.config_for_request(claim, request="channel") == models.ChannelConfig(
        domain_id="ours"
    )


def test_config_for_other_request_is_ignored() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(
            config_entry("FromClaim", "for-channel", requests=["channel"]),
            config_entry("FromClaim", "for-other", requests=["other"]),
        )
    )
    assert decoding.config_for_request(claim, request="channel") == models.ChannelConfig(
        domain_id="for-channel"
    )


def test_no_applicable_config_gives_none() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(config_entry("FromClaim", "x", driver=OTHER_DRIVER))
    )
    assert decoding.config_for_request(claim, request="channel") is None


def test_applicable_config_is_decoded_strictly() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(config_entry("FromClaim", "x", numChannels=2))
    )
    with pytest.raises(errors.DecodeError) as caught:
        decoding.config_for_request(claim, request="channel")
    assert caught.value.field == "numChannels"


def test_overridden_invalid_config_is_still_reported() -> None:
    claim = decoding.resource_claim_from_k8s(
        claim_json(config_entry("FromClass", "x", bogus=True), config_entry("FromClaim", "y"))
    )
    with pytest.raises(errors.DecodeError, match='unknown field "bogus"'):
        decoding.config_for_request(claim, request="channel")


def test_a_template_claim_carries_the_pods_name_for_it() -> None:
    obj = claim_json()
    assert decoding.resource_claim_from_k8s(obj).pod_claim_name == ""
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert decoding.resource_claim_from_k8s(obj).pod_claim_name == "gpu"
