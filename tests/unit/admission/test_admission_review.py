"""core.admission: which ResourceClaims and templates the webhook admits, and what it says."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import admission, models, names
from core.computedomain import modes

DRIVER_MANAGED = modes.resolve_driver_config(
    mode="driverManaged", isolation="", feature_gates="", namespace="nvidia-dra-driver"
).config
HOST_MANAGED = modes.resolve_driver_config(
    mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true",
    namespace="nvidia-dra-driver",
).config
BOTH_MODES = pytest.mark.parametrize(
    "config", [DRIVER_MANAGED, HOST_MANAGED], ids=["driverManaged", "hostManaged"]
)


def channel_params(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": "4f1c1b0e-cd",
        **extra,
    }


def daemon_params() -> dict[str, Any]:
    return {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_DAEMON_CONFIG, "domainID": "x"}


def opaque(parameters: Any, *, driver: str = names.DRIVER_NAME) -> dict[str, Any]:
    return {"requests": ["channel"], "opaque": {"driver": driver, "parameters": parameters}}


def claim_spec(*configs: Any) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {"name": "channel", "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}
            ],
            "config": list(configs),
        }
    }


def claim(*configs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": claim_spec(*configs),
    }


def template(*configs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train-channel", "namespace": "ml"},
        "spec": {"spec": claim_spec(*configs)},
    }


def request(
    obj: Any, *, operation: str = "CREATE", version: str = "v1", old: Any = None
) -> dict[str, Any]:
    kind = obj.get("kind", "ResourceClaim") if isinstance(obj, dict) else "ResourceClaim"
    out: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "resource.k8s.io", "version": version, "kind": kind},
        "resource": {"group": "resource.k8s.io", "version": version,
                     "resource": kind.lower() + "s"},
        "namespace": "ml",
        "name": "train",
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        out["oldObject"] = old
    return out


def message(response: dict[str, Any]) -> str:
    text: str = response["status"]["message"]
    return text


# ---------------------------------------------------------------- allowed


@BOTH_MODES
def test_review_allows_a_valid_channel_config(config: models.DriverConfig) -> None:
    response = admission.review(request(claim(opaque(channel_params()))), config=config)
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@BOTH_MODES
def test_review_allows_single_allocation_mode_in_every_mode(config: models.DriverConfig) -> None:
    obj = claim(opaque(channel_params(allocationMode="Single")))
    assert admission.review(request(obj), config=config)["allowed"] is True


def test_review_allows_allocation_mode_all_in_driver_managed_mode() -> None:
    obj = claim(opaque(channel_params(allocationMode="All")))
    assert admission.review(request(obj), config=DRIVER_MANAGED)["allowed"] is True


def test_review_allows_daemon_config_in_driver_managed_mode() -> None:
    obj = claim(opaque(daemon_params()))
    assert admission.review(request(obj), config=DRIVER_MANAGED)["allowed"] is True


@BOTH_MODES
def test_review_ignores_other_drivers_configs(config: models.DriverConfig) -> None:
    obj = claim(opaque({"anything": ["goes"]}, driver="gpu.example.com"), {"requests": ["x"]})
    assert admission.review(request(obj), config=config)["allowed"] is True


@BOTH_MODES
def test_review_allows_claims_without_configs(config: models.DriverConfig) -> None:
    obj = claim()
    del obj["spec"]["devices"]["config"]
    assert admission.review(request(obj), config=config)["allowed"] is True


def test_review_allows_other_kinds_and_groups_untouched() -> None:
    bad = claim(opaque({"bogus": 1}))
    pod = request(bad)
    pod["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    other_group = request(bad)
    other_group["kind"] = {"group": "example.com", "version": "v1", "kind": "ResourceClaim"}
    assert admission.review(pod, config=HOST_MANAGED)["allowed"] is True
    assert admission.review(other_group, config=HOST_MANAGED)["allowed"] is True


def test_review_allows_delete_even_of_an_invalid_claim() -> None:
    req = request(None, operation="DELETE", old=claim(opaque({"bogus": 1})))
    assert admission.review(req, config=HOST_MANAGED)["allowed"] is True


def test_review_allows_an_update_that_keeps_invalid_configs_as_they_were() -> None:
    # A claim admitted before the webhook existed must still get its finalizers removed.
    old = claim(opaque(channel_params(allocationMode="All")))
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    req = request(new, operation="UPDATE", old=old)
    assert admission.review(req, config=HOST_MANAGED)["allowed"] is True


def test_review_denies_an_update_that_introduces_an_invalid_config() -> None:
    old = claim(opaque(channel_params()))
    new = claim(opaque(channel_params(allocationMode="All")))
    req = request(new, operation="UPDATE", old=old)
    assert admission.review(req, config=HOST_MANAGED)["allowed"] is False


# ---------------------------------------------------------------- denied


@BOTH_MODES
def test_review_denies_an_unknown_field_naming_it_and_the_config_index(
    config: models.DriverConfig,
) -> None:
    obj = claim(opaque(channel_params()), opaque(channel_params(domainId="typo")))
    response = admission.review(request(obj), config=config)
    assert response["allowed"] is False
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    text = message(response)
    assert "spec.devices.config[1].opaque.parameters.domainId" in text
    assert 'strict decoding error: unknown field "domainId"' in text
    assert "config[0]" not in text
    assert "ResourceClaim ml/train" in text


@BOTH_MODES
def test_review_denies_a_wrong_kind(config: models.DriverConfig) -> None:
    obj = claim(opaque(channel_params(kind="ComputeDomainChanelConfig")))
    response = admission.review(request(obj), config=config)
    assert response["allowed"] is False
    text = message(response)
    assert "spec.devices.config[0].opaque.parameters.kind" in text
    assert "ComputeDomainChanelConfig" in text
    assert names.KIND_CHANNEL_CONFIG in text


@BOTH_MODES
def test_review_denies_a_wrong_api_version(config: models.DriverConfig) -> None:
    obj = claim(opaque(channel_params(apiVersion="resource.nvidia.com/v1")))
    text = message(admission.review(request(obj), config=config))
    assert "parameters.apiVersion" in text
    assert names.GROUP_VERSION in text


@BOTH_MODES
def test_review_denies_missing_parameters(config: models.DriverConfig) -> None:
    obj = claim({"opaque": {"driver": names.DRIVER_NAME}})
    response = admission.review(request(obj), config=config)
    assert response["allowed"] is False
    assert "spec.devices.config[0].opaque.parameters:" in message(response)


def test_review_denies_allocation_mode_all_in_host_managed_mode_saying_to_use_single() -> None:
    obj = claim(opaque(channel_params(allocationMode="All")))
    response = admission.review(request(obj), config=HOST_MANAGED)
    assert response["allowed"] is False
    text = message(response)
    assert "spec.devices.config[0].opaque.parameters.allocationMode" in text
    assert "host-managed IMEX" in text
    assert "channel 0 only" in text
    assert "Single" in text


def test_under_channel_isolation_the_allocation_mode_denial_names_the_domains_channel() -> None:
    isolated = modes.resolve_driver_config(
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
        namespace="nvidia-dra-driver",
    ).config
    obj = claim(opaque(channel_params(allocationMode="All", channelID=3)))
    response = admission.review(request(obj), config=isolated)
    assert response["allowed"] is False
    text = message(response)
    assert "channel 0" not in text
    assert "its ComputeDomain's own IMEX channel only" in text


def test_review_denies_unknown_allocation_mode_in_driver_managed_mode() -> None:
    obj = claim(opaque(channel_params(allocationMode="Many")))
    text = message(admission.review(request(obj), config=DRIVER_MANAGED))
    assert "allocationMode: 'Many' is not valid" in text


def test_review_denies_daemon_config_in_host_managed_mode() -> None:
    obj = claim(opaque(daemon_params()))
    response = admission.review(request(obj), config=HOST_MANAGED)
    assert response["allowed"] is False
    text = message(response)
    assert names.KIND_DAEMON_CONFIG in text
    assert "host-managed IMEX" in text
    assert "no daemons" in text


def test_review_lists_every_bad_config_in_one_denial() -> None:
    obj = claim(
        opaque(channel_params(extra=1)),
        opaque(channel_params()),
        opaque(channel_params(allocationMode="All")),
        opaque(daemon_params()),
    )
    text = message(admission.review(request(obj), config=HOST_MANAGED))
    assert "has 3 invalid" in text
    assert "(1) spec.devices.config[0]" in text
    assert "(2) spec.devices.config[2]" in text
    assert "(3) spec.devices.config[3]" in text


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1beta2"])
def test_review_checks_templates_at_their_nested_spec_path(version: str) -> None:
    obj = template(opaque(channel_params(allocationMode="All")))
    response = admission.review(request(obj, version=version), config=HOST_MANAGED)
    assert response["allowed"] is False
    text = message(response)
    assert "spec.spec.devices.config[0].opaque.parameters.allocationMode" in text
    assert text.startswith("ResourceClaimTemplate ")


def test_review_does_not_read_a_template_config_at_the_claim_path() -> None:
    # A template whose claim spec is valid is allowed even with junk where a claim keeps configs.
    obj = template(opaque(channel_params()))
    obj["spec"]["devices"] = {"config": [opaque({"bogus": 1})]}
    assert admission.review(request(obj), config=HOST_MANAGED)["allowed"] is True


@pytest.mark.parametrize(
    ("malformed", "expected"),
    [
        ("not an object", "request must be a JSON object"),
        ({}, "uid must be a non-empty string"),
        ({"uid": "u"}, "kind must be an object"),
        ({"uid": "u", "kind": {"group": 1, "kind": "ResourceClaim"}}, "must be strings"),
        ({"uid": "u", "kind": {"group": "resource.k8s.io", "kind": "ResourceClaim"}},
         "operation must be a string"),
        ({"uid": "u", "operation": "CREATE",
          "kind": {"group": "resource.k8s.io", "kind": "ResourceClaim"}},
         "object must be the ResourceClaim"),
    ],
)
def test_review_denies_a_malformed_request_with_a_clear_message(
    malformed: Any, expected: str
) -> None:
    response = admission.review(malformed, config=DRIVER_MANAGED)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert expected in message(response)


def test_review_denies_a_config_list_that_is_not_an_array() -> None:
    obj = claim()
    obj["spec"]["devices"]["config"] = {"opaque": {}}
    text = message(admission.review(request(obj), config=DRIVER_MANAGED))
    assert "spec.devices.config: must be an array" in text


def test_review_document_wraps_the_response_in_an_admission_review() -> None:
    document = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request(claim(opaque(channel_params()))),
    }
    reply = admission.review_document(document, config=DRIVER_MANAGED)
    assert reply == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True},
    }


def test_review_document_denies_a_v1beta1_admission_review_echoing_its_uid() -> None:
    document = {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "request": request(claim()),
    }
    response = admission.review_document(document, config=DRIVER_MANAGED)["response"]
    assert response["allowed"] is False
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert "admission.k8s.io/v1" in message(response)


# ---------------------------------------------------------------- properties

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    ["uid", "kind", "operation", "object", "oldObject", "spec", "devices", "config", "opaque",
     "driver", "parameters", "apiVersion", "domainID", "allocationMode", "metadata", "name"]
)
_VALUES = st.sampled_from(
    [names.DRIVER_NAME, names.GROUP_VERSION, names.KIND_CHANNEL_CONFIG, names.KIND_DAEMON_CONFIG,
     "resource.k8s.io", "ResourceClaim", "ResourceClaimTemplate", "CREATE", "UPDATE", "All"]
)
# Shaped JSON: our field names and values, so the search reaches deep into the review.
SHAPED = st.recursive(
    st.none() | st.integers() | _VALUES | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=30,
)


def _kinds() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"group": st.just("resource.k8s.io"),
         "kind": st.sampled_from(["ResourceClaim", "ResourceClaimTemplate"])}
    )


@settings(max_examples=300)
@given(document=JSON | SHAPED, host=st.booleans())
def test_review_document_never_raises_on_arbitrary_json(document: Any, host: bool) -> None:
    config = HOST_MANAGED if host else DRIVER_MANAGED
    reply = admission.review_document(document, config=config)
    assert isinstance(reply["response"]["allowed"], bool)


@settings(max_examples=300)
@given(
    obj=SHAPED,
    old=SHAPED,
    kind=_kinds(),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
    host=st.booleans(),
)
def test_review_never_raises_and_always_echoes_the_uid(
    obj: Any, old: Any, kind: dict[str, Any], operation: str, host: bool
) -> None:
    req = {"uid": "u-1", "kind": kind, "operation": operation, "object": obj, "oldObject": old}
    response = admission.review(req, config=HOST_MANAGED if host else DRIVER_MANAGED)
    assert response["uid"] == "u-1"
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["message"]


@settings(max_examples=200)
@given(params=st.dictionaries(_KEYS | st.text(max_size=6), SHAPED, max_size=5), host=st.booleans())
def test_review_never_raises_on_arbitrary_parameters_of_our_driver(
    params: dict[str, Any], host: bool
) -> None:
    response = admission.review(
        request(claim(opaque(params))), config=HOST_MANAGED if host else DRIVER_MANAGED
    )
    assert isinstance(response["allowed"], bool)
