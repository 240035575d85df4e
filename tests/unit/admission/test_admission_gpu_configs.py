"""core.admission for the GPU half: gpu.nvidia.com opaque configs judged by the GPU decoder.

What the webhook admits and refuses for GpuConfig, MigDeviceConfig and VfioDeviceConfig
under the gates it runs with, in both IMEX modes of the other half, at the claim and the
template paths, and that the denial names the offending field path and the driver.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import admission, models, names
from core.computedomain import modes
from core.gpu import configs as gpu_configs

GPU = gpu_configs.DRIVER_NAME


def driver_config(*, host_managed: bool, gates: str = "") -> models.DriverConfig:
    if host_managed:
        gate_text = ",".join(g for g in ("HostManagedIMEXDaemon=true", gates) if g)
        return modes.resolve_driver_config(
            mode="hostManaged", isolation="none", feature_gates=gate_text,
            namespace="nvidia-dra-driver",
        ).config
    return modes.resolve_driver_config(
        mode="driverManaged", isolation="", feature_gates=gates, namespace="nvidia-dra-driver"
    ).config


DEFAULT_GATES = driver_config(host_managed=False)
SHARING_ON = driver_config(host_managed=False, gates="TimeSlicingSettings=true")
SHARING_ON_HOST = driver_config(host_managed=True, gates="TimeSlicingSettings=true")
PASSTHROUGH_ON = driver_config(host_managed=False, gates="PassthroughSupport=true")
MPS_ON = driver_config(host_managed=False, gates="MPSSupport=true")
BOTH_MODES = pytest.mark.parametrize(
    "config", [SHARING_ON, SHARING_ON_HOST], ids=["driverManaged", "hostManaged"]
)


def gpu_params(kind: str = "GpuConfig", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": gpu_configs.API_VERSION, "kind": kind, **fields}


def opaque(parameters: Any, *, driver: str = GPU, requests: tuple[str, ...] = ("gpu",)) -> Any:
    return {"requests": list(requests), "opaque": {"driver": driver, "parameters": parameters}}


def claim_spec(*configs: Any) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
            "config": list(configs),
        }
    }


def claim(*configs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "infer", "namespace": "ml"},
        "spec": claim_spec(*configs),
    }


def template(*configs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "infer-gpu", "namespace": "ml"},
        "spec": {"spec": claim_spec(*configs)},
    }


def request(obj: Any, *, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uid": "e911857d-c318-11e8-bbad-025000000001",
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]},
        "namespace": "ml",
        "name": obj["metadata"]["name"],
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        out["oldObject"] = old
    return out


def denial(obj: Any, *, config: models.DriverConfig, **kwargs: Any) -> str:
    response = admission.review(request(obj, **kwargs), config=config)
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    text: str = response["status"]["message"]
    return text


def allowed(obj: Any, *, config: models.DriverConfig, **kwargs: Any) -> bool:
    result: bool = admission.review(request(obj, **kwargs), config=config)["allowed"]
    return result


# ---------------------------------------------------------------- allowed


@BOTH_MODES
@pytest.mark.parametrize(
    "parameters",
    [
        gpu_params(),
        gpu_params(sharing={"strategy": "TimeSlicing"}),
        gpu_params(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        gpu_params("MigDeviceConfig"),
        gpu_params("MigDeviceConfig", sharing={"strategy": "TimeSlicing"}),
    ],
    ids=["gpu", "gpu-ts", "gpu-ts-long", "mig", "mig-ts"],
)
def test_review_allows_valid_gpu_and_mig_configs(
    config: models.DriverConfig, parameters: dict[str, Any]
) -> None:
    assert allowed(claim(opaque(parameters)), config=config)
    assert allowed(template(opaque(parameters)), config=config)


def test_review_allows_a_vfio_config_when_passthrough_is_on() -> None:
    parameters = gpu_params("VfioDeviceConfig", iommu={"backendPolicy": "PreferIommuFD"})
    assert allowed(claim(opaque(parameters)), config=PASSTHROUGH_ON)


def test_review_allows_gpu_and_compute_domain_configs_side_by_side() -> None:
    channel = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
               "domainID": "4f1c1b0e-cd"}
    obj = claim(opaque(gpu_params()), opaque(channel, driver=names.DRIVER_NAME))
    assert allowed(obj, config=DEFAULT_GATES)


def test_review_allows_an_update_that_keeps_gpu_configs_as_they_were() -> None:
    old = claim(opaque(gpu_params(sharing={"strategy": "MPS"})))
    new = claim(opaque(gpu_params(sharing={"strategy": "MPS"})))
    new["metadata"]["finalizers"] = []
    assert allowed(new, config=SHARING_ON, operation="UPDATE", old=old)


# ---------------------------------------------------------------- denied


@BOTH_MODES
@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
def test_review_refuses_mps_without_its_gate_with_the_decoders_message(
    config: models.DriverConfig, kind: str
) -> None:
    text = denial(claim(opaque(gpu_params(kind, sharing={"strategy": "MPS"}))), config=config)
    assert text == (
        f"ResourceClaim ml/infer has an invalid {GPU} device config: "
        "spec.devices.config[0].opaque.parameters.sharing.strategy: "
        f"{kind}.sharing.strategy 'MPS' needs feature gate MPSSupport, which is off: enable it "
        "(Helm featureGates.MPSSupport=true) or use strategy TimeSlicing"
    )


def test_review_allows_mps_with_its_gate_and_valid_limits() -> None:
    mps = {"strategy": "MPS", "mpsConfig": {
        "defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi",
        "defaultPerDevicePinnedMemoryLimit": {"0": "4Gi"}}}
    assert allowed(claim(opaque(gpu_params(sharing=mps))), config=MPS_ON)


@pytest.mark.parametrize(("mps_config", "field"), [
    ({"defaultActiveThreadPercentage": 150}, "defaultActiveThreadPercentage"),
    ({"defaultPinnedDeviceMemoryLimit": "ten gigs"}, "defaultPinnedDeviceMemoryLimit"),
    ({"defaultPerDevicePinnedMemoryLimit": {"0": "1Ki"}}, "defaultPerDevicePinnedMemoryLimit.0"),
])
def test_review_refuses_a_bad_mps_config_naming_the_field(
    mps_config: dict[str, Any], field: str
) -> None:
    obj = claim(opaque(gpu_params(sharing={"strategy": "MPS", "mpsConfig": mps_config})))
    text = denial(obj, config=MPS_ON)
    assert f"spec.devices.config[0].opaque.parameters.sharing.mpsConfig.{field}: " in text


def test_review_refuses_time_slicing_when_the_webhook_runs_without_its_gate() -> None:
    obj = claim(opaque(gpu_params(sharing={"strategy": "TimeSlicing"})))
    text = denial(obj, config=DEFAULT_GATES)
    assert "spec.devices.config[0].opaque.parameters.sharing.strategy" in text
    assert "needs feature gate TimeSlicingSettings, which is off" in text
    assert allowed(obj, config=SHARING_ON)


def test_review_refuses_a_vfio_config_when_passthrough_is_off() -> None:
    obj = claim(opaque(gpu_params("VfioDeviceConfig")))
    text = denial(obj, config=SHARING_ON)
    assert "spec.devices.config[0].opaque.parameters.kind" in text
    assert "needs feature gate PassthroughSupport" in text


def test_review_names_a_nested_unknown_field_by_its_full_path_in_a_template() -> None:
    parameters = gpu_params(sharing={
        "strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}
    })
    text = denial(template(opaque(parameters)), config=SHARING_ON)
    assert text.startswith(f"ResourceClaimTemplate ml/infer-gpu has an invalid {GPU} device")
    assert (
        "spec.spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.intervall: "
        'strict decoding error: unknown field "sharing.timeSlicingConfig.intervall"'
    ) in text


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        (gpu_params(apiVersion="resource.nvidia.com/v1"), "apiVersion"),
        (gpu_params("GpuConfigs"), "kind"),
        (gpu_params("ComputeDomainChannelConfig", domainID="x"), "kind"),
        (gpu_params(sharing={"strategy": "Exclusive"}), "sharing.strategy"),
        (gpu_params("VfioDeviceConfig", iommu={"backendPolicy": "legacy"}), "kind"),
    ],
)
def test_review_refuses_bad_gpu_configs_naming_the_field(
    parameters: dict[str, Any], field: str
) -> None:
    text = denial(claim(opaque(parameters)), config=SHARING_ON)
    assert f"spec.devices.config[0].opaque.parameters.{field}: " in text


def test_review_refuses_a_gpu_config_without_parameters() -> None:
    obj = claim({"opaque": {"driver": GPU}})
    text = denial(obj, config=SHARING_ON)
    assert "spec.devices.config[0].opaque.parameters: " in text
    assert "must be a JSON object" in text


def test_review_lists_bad_configs_of_both_drivers_naming_both() -> None:
    channel = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
               "domainID": "x", "extra": 1}
    obj = claim(
        opaque(channel, driver=names.DRIVER_NAME),
        opaque(gpu_params()),
        opaque(gpu_params(sharing={"strategy": "MPS"})),
    )
    text = denial(obj, config=SHARING_ON)
    assert text.startswith(
        f"ResourceClaim ml/infer has 2 invalid {names.DRIVER_NAME} and {GPU} device configs: "
    )
    assert "(1) spec.devices.config[0]" in text
    assert "(2) spec.devices.config[2]" in text


def test_review_denies_an_update_that_introduces_a_bad_gpu_config() -> None:
    old = claim(opaque(gpu_params()))
    new = claim(opaque(gpu_params(sharing={"strategy": "MPS"})))
    assert "needs feature gate MPSSupport" in denial(
        new, config=SHARING_ON, operation="UPDATE", old=old
    )


# ---------------------------------------------------------------- never raises


_KEYS = st.sampled_from(
    ["apiVersion", "kind", "sharing", "strategy", "timeSlicingConfig", "interval", "mpsConfig",
     "iommu", "backendPolicy", "enableAPIDevice"]
)
_VALUES = st.sampled_from(
    [gpu_configs.API_VERSION, *gpu_configs.KINDS, "TimeSlicing", "MPS", "Long", "LegacyOnly"]
)
SHAPED: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.integers() | st.booleans() | _VALUES | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200)
@given(parameters=SHAPED, gates=st.sampled_from([DEFAULT_GATES, SHARING_ON, PASSTHROUGH_ON]))
def test_review_never_raises_on_arbitrary_gpu_parameters(
    parameters: Any, gates: models.DriverConfig
) -> None:
    response = admission.review(request(claim(opaque(parameters))), config=gates)
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert GPU in response["status"]["message"]
