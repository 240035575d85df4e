"""core.gpu.configs: strict decoding of GpuConfig, MigDeviceConfig and VfioDeviceConfig.

Pins upstream's defaulting (Normalize) and validation (Validate), the gate-dependent rules
(TimeSlicingSettings, MPSSupport, PassthroughSupport), MpsConfig's fields, unknown
fields named by path at every level, and the helpers the prepare planner uses.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import errors, gates, models
from core.gpu import configs, devices

ALL_ON = models.FeatureGates(
    values={gates.TIME_SLICING_SETTINGS: True, gates.MPS_SUPPORT: True,
            gates.PASSTHROUGH_SUPPORT: True}
)
ALL_OFF = models.FeatureGates(values={})
TIME_SLICING_ON = models.FeatureGates(values={gates.TIME_SLICING_SETTINGS: True})


def params(kind: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": configs.API_VERSION, "kind": kind, **fields}


def refused(parameters: Any, *, gates: models.FeatureGates = ALL_ON) -> errors.DecodeError:
    with pytest.raises(errors.DecodeError) as caught:
        configs.decode_device_config(parameters, gates=gates)
    return caught.value


def time_sliced(interval: configs.TimeSliceInterval) -> configs.Sharing:
    return configs.Sharing(
        strategy=configs.SharingStrategy.TIME_SLICING,
        time_slicing=configs.TimeSlicing(interval=interval),
    )


# ---------------------------------------------------------------- apiVersion and kind


@pytest.mark.parametrize("kind", configs.KINDS)
def test_a_bare_config_of_each_kind_decodes_to_its_defaults(kind: str) -> None:
    expected = {
        "GpuConfig": configs.GpuConfig(),
        "MigDeviceConfig": configs.MigDeviceConfig(),
        "VfioDeviceConfig": configs.VfioDeviceConfig(),
    }[kind]
    assert configs.decode_device_config(params(kind), gates=ALL_ON) == expected


@pytest.mark.parametrize(
    "api_version", [None, "", "resource.nvidia.com/v1alpha1", "resource.nvidia.com/v1", 3]
)
def test_a_wrong_or_missing_api_version_is_refused_naming_the_supported_one(
    api_version: Any,
) -> None:
    parameters = {"apiVersion": api_version, "kind": "GpuConfig"}
    if api_version is None:
        del parameters["apiVersion"]
    error = refused(parameters)
    assert error.field == "apiVersion"
    assert "use resource.nvidia.com/v1beta1" in error.message


@pytest.mark.parametrize("kind", [None, "", "gpuconfig", "MigConfig", "ComputeDomain", 7])
def test_an_unknown_kind_is_refused_listing_the_three_kinds(kind: Any) -> None:
    error = refused({"apiVersion": configs.API_VERSION, "kind": kind})
    assert error.field == "kind"
    assert "use GpuConfig or MigDeviceConfig or VfioDeviceConfig" in error.message


@pytest.mark.parametrize("kind", ["ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"])
def test_a_compute_domain_kind_is_refused_pointing_at_the_other_driver(kind: str) -> None:
    error = refused(params(kind, domainID="x"))
    assert error.field == "kind"
    assert "belongs to driver compute-domain.nvidia.com" in error.message
    assert "set opaque.driver to compute-domain.nvidia.com" in error.message


@pytest.mark.parametrize("parameters", [None, [], "GpuConfig", 1])
def test_parameters_that_are_not_an_object_are_refused(parameters: Any) -> None:
    error = refused(parameters)
    assert error.field == "parameters"
    assert "must be a JSON object" in error.message


# ---------------------------------------------------------------- unknown fields


@pytest.mark.parametrize(
    ("parameters", "path", "accepted"),
    [
        (params("GpuConfig", metadata={}), "metadata", "apiVersion, kind, sharing"),
        (params("MigDeviceConfig", shareing={}), "shareing", "apiVersion, kind, sharing"),
        (params("VfioDeviceConfig", iommuu={}), "iommuu", "apiVersion, kind, iommu"),
        (
            params("GpuConfig", sharing={"strategy": "TimeSlicing", "timeslicingConfig": {}}),
            "sharing.timeslicingConfig",
            "strategy, timeSlicingConfig, mpsConfig",
        ),
        (
            params("GpuConfig", sharing={
                "strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}
            }),
            "sharing.timeSlicingConfig.intervall",
            "interval",
        ),
        (
            params("VfioDeviceConfig", iommu={"backend": "LegacyOnly"}),
            "iommu.backend",
            "backendPolicy, enableAPIDevice",
        ),
    ],
)
def test_an_unknown_field_at_any_level_is_refused_by_its_path(
    parameters: dict[str, Any], path: str, accepted: str
) -> None:
    error = refused(parameters)
    assert error.field == path
    assert f'strict decoding error: unknown field "{path}"' in error.message
    assert f"accepted fields are {accepted}" in error.message


def test_a_mig_device_config_has_no_time_slicing_config() -> None:
    # Upstream's MigDeviceSharing has no such field: the interval belongs to the whole GPU.
    error = refused(params("MigDeviceConfig", sharing={
        "strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}
    }))
    assert error.field == "sharing.timeSlicingConfig"
    assert "in MigDeviceConfig.sharing: accepted fields are strategy, mpsConfig" in error.message


def test_several_unknown_fields_are_all_named_the_first_as_the_field() -> None:
    error = refused(params("GpuConfig", zeta=1, alpha=2))
    assert error.field == "alpha"
    assert (
        'strict decoding error: unknown field "alpha", unknown field "zeta" in GpuConfig'
    ) in error.message


def test_non_strict_decoding_ignores_unknown_fields_at_every_level() -> None:
    parameters = params(
        "GpuConfig",
        future=True,
        sharing={"strategy": "TimeSlicing", "later": 1,
                 "timeSlicingConfig": {"interval": "Short", "more": {}}},
    )
    decoded = configs.decode_device_config(parameters, gates=ALL_ON, strict=False)
    assert decoded == configs.GpuConfig(sharing=time_sliced(configs.TimeSliceInterval.SHORT))


def test_non_strict_decoding_still_validates() -> None:
    with pytest.raises(errors.DecodeError, match="defaultActiveThreadPercentage 101"):
        configs.decode_device_config(
            params("GpuConfig", sharing={
                "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
            gates=ALL_ON, strict=False,
        )


# ---------------------------------------------------------------- sharing


@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
def test_null_sharing_means_no_sharing(kind: str) -> None:
    decoded = configs.decode_device_config(params(kind, sharing=None), gates=ALL_ON)
    assert not configs.allows_sharing(decoded)


def test_gpu_time_slicing_defaults_its_interval_to_default() -> None:
    decoded = configs.decode_device_config(
        params("GpuConfig", sharing={"strategy": "TimeSlicing"}), gates=TIME_SLICING_ON
    )
    assert decoded == configs.GpuConfig(sharing=time_sliced(configs.TimeSliceInterval.DEFAULT))


@pytest.mark.parametrize("time_slicing_config", [None, {}, {"interval": None}])
def test_an_empty_or_null_time_slicing_config_means_the_default_interval(
    time_slicing_config: Any,
) -> None:
    decoded = configs.decode_device_config(
        params("GpuConfig", sharing={
            "strategy": "TimeSlicing", "timeSlicingConfig": time_slicing_config
        }),
        gates=TIME_SLICING_ON,
    )
    assert decoded == configs.GpuConfig(sharing=time_sliced(configs.TimeSliceInterval.DEFAULT))


@pytest.mark.parametrize("interval", list(configs.TimeSliceInterval))
def test_every_upstream_interval_is_accepted(interval: configs.TimeSliceInterval) -> None:
    decoded = configs.decode_device_config(
        params("GpuConfig", sharing={
            "strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval.value}
        }),
        gates=TIME_SLICING_ON,
    )
    assert decoded == configs.GpuConfig(sharing=time_sliced(interval))


@pytest.mark.parametrize("interval", ["", "long", "Longest", 3, True])
def test_an_unknown_interval_is_refused_listing_the_four(interval: Any) -> None:
    error = refused(params("GpuConfig", sharing={
        "strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}
    }))
    assert error.field == "sharing.timeSlicingConfig.interval"
    assert "use Default or Short or Medium or Long" in error.message


def test_mig_time_slicing_decodes_without_an_interval() -> None:
    decoded = configs.decode_device_config(
        params("MigDeviceConfig", sharing={"strategy": "TimeSlicing"}), gates=TIME_SLICING_ON
    )
    assert decoded == configs.MigDeviceConfig(
        sharing=configs.Sharing(strategy=configs.SharingStrategy.TIME_SLICING)
    )


MPS_ON = models.FeatureGates(values={gates.MPS_SUPPORT: True})


def mps(**fields: Any) -> configs.Sharing:
    return configs.Sharing(strategy=configs.SharingStrategy.MPS, mps=configs.MpsConfig(**fields))


@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
@pytest.mark.parametrize("mps_config", [None, {}])
def test_mps_with_its_gate_decodes_with_the_daemons_own_defaults(
    kind: str, mps_config: Any
) -> None:
    decoded = configs.decode_device_config(
        params(kind, sharing={"strategy": "MPS", "mpsConfig": mps_config}), gates=MPS_ON
    )
    assert configs.mps_of(decoded) == configs.MpsConfig()
    # NB: an MPS daemon serves one claim; only TimeSlicing lets claims share a device.
    assert not configs.allows_sharing(decoded)


def test_every_mps_config_field_decodes_and_round_trips() -> None:
    raw = {
        "defaultActiveThreadPercentage": 40,
        "defaultPinnedDeviceMemoryLimit": "10Gi",
        "defaultPerDevicePinnedMemoryLimit": {"1": "2Gi", "GPU-b": 1073741824},
        "multiUser": True,
    }
    decoded = configs.decode_device_config(
        params("GpuConfig", sharing={"strategy": "MPS", "mpsConfig": raw}), gates=MPS_ON
    )
    assert decoded == configs.GpuConfig(sharing=mps(
        default_active_thread_percentage=40,
        default_pinned_device_memory_limit="10Gi",
        default_per_device_pinned_memory_limit=(("1", "2Gi"), ("GPU-b", "1073741824")),
        multi_user=True,
    ))
    again = configs.device_config_to_k8s(decoded)
    assert configs.decode_device_config(again, gates=MPS_ON) == decoded


@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
def test_mps_is_refused_without_its_gate_naming_the_gate(kind: str) -> None:
    error = refused(params(kind, sharing={"strategy": "MPS", "mpsConfig": {}}), gates=ALL_OFF)
    assert error.field == "sharing.strategy"
    assert error.message == (
        f"{kind}.sharing.strategy 'MPS' needs feature gate MPSSupport, which is off: enable it "
        "(Helm featureGates.MPSSupport=true) or use strategy TimeSlicing"
    )


def test_a_time_slicing_config_with_mps_is_refused() -> None:
    error = refused(params("GpuConfig", sharing={
        "strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}}))
    assert error.field == "sharing.timeSlicingConfig"
    assert "cannot be used with strategy MPS" in error.message


@pytest.mark.parametrize(("mps_config", "field", "says"), [
    ({"defaultActiveThreadPercentage": -1}, "defaultActiveThreadPercentage", "0 to 100"),
    ({"defaultActiveThreadPercentage": 101}, "defaultActiveThreadPercentage", "0 to 100"),
    ({"defaultActiveThreadPercentage": "50"}, "defaultActiveThreadPercentage", "0 to 100"),
    ({"defaultActiveThreadPercentage": True}, "defaultActiveThreadPercentage", "0 to 100"),
    ({"defaultPinnedDeviceMemoryLimit": "lots"}, "defaultPinnedDeviceMemoryLimit",
     "is not a quantity"),
    ({"defaultPinnedDeviceMemoryLimit": "512Ki"}, "defaultPinnedDeviceMemoryLimit",
     "below 1Mi"),
    ({"defaultPinnedDeviceMemoryLimit": ["1Gi"]}, "defaultPinnedDeviceMemoryLimit",
     'a quantity such as "10Gi"'),
    ({"defaultPerDevicePinnedMemoryLimit": {"0": "-1Gi"}},
     "defaultPerDevicePinnedMemoryLimit.0", "below 1Mi"),
    ({"defaultPerDevicePinnedMemoryLimit": ["0"]}, "defaultPerDevicePinnedMemoryLimit",
     "must be an object"),
    ({"multiUser": "yes"}, "multiUser", "must be true or false"),
])
def test_a_bad_mps_config_is_refused_naming_its_field(
    mps_config: dict[str, Any], field: str, says: str
) -> None:
    error = refused(params("GpuConfig", sharing={"strategy": "MPS", "mpsConfig": mps_config}))
    assert error.field == f"sharing.mpsConfig.{field}"
    assert says in error.message
    assert f"GpuConfig.sharing.mpsConfig.{field}" in error.message


def test_an_unknown_mps_config_field_is_refused_listing_the_four() -> None:
    error = refused(params("GpuConfig", sharing={"strategy": "MPS", "mpsConfig": {"pin": 1}}))
    assert error.field == "sharing.mpsConfig.pin"
    assert "accepted fields are defaultActiveThreadPercentage, defaultPinnedDeviceMemoryLimit, "\
        "defaultPerDevicePinnedMemoryLimit, multiUser" in error.message


@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
def test_time_slicing_is_refused_without_its_gate_whatever_the_interval(kind: str) -> None:
    # Upstream's validateSharingStrategy refuses the strategy itself when the gate is off.
    error = refused(params(kind, sharing={"strategy": "TimeSlicing"}), gates=ALL_OFF)
    assert error.field == "sharing.strategy"
    assert "needs feature gate TimeSlicingSettings, which is off" in error.message
    assert "featureGates.TimeSlicingSettings=true" in error.message


def test_a_non_default_interval_is_refused_without_the_gate() -> None:
    error = refused(
        params("GpuConfig", sharing={
            "strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}
        }),
        gates=ALL_OFF,
    )
    assert error.field == "sharing.strategy"
    assert "TimeSlicingSettings" in error.message


@pytest.mark.parametrize("strategy", [None, ""])
def test_a_missing_strategy_is_refused_saying_what_to_use(strategy: Any) -> None:
    error = refused(params("GpuConfig", sharing={"strategy": strategy}))
    assert error.field == "sharing.strategy"
    assert "is required: use TimeSlicing or MPS, or remove sharing" in error.message


@pytest.mark.parametrize("strategy", ["timeslicing", "Exclusive", 1, ["TimeSlicing"]])
def test_an_unknown_strategy_is_refused(strategy: Any) -> None:
    error = refused(params("MigDeviceConfig", sharing={"strategy": strategy}))
    assert error.field == "sharing.strategy"
    assert "is not valid: use TimeSlicing or MPS" in error.message


def test_an_mps_config_with_time_slicing_is_refused() -> None:
    # Upstream accepts it at Validate and fails later at prepare (GetTimeSlicingConfig).
    error = refused(params("GpuConfig", sharing={"strategy": "TimeSlicing", "mpsConfig": {}}))
    assert error.field == "sharing.mpsConfig"
    assert "cannot be used with strategy TimeSlicing" in error.message


@pytest.mark.parametrize(
    ("parameters", "path"),
    [
        (params("GpuConfig", sharing="TimeSlicing"), "sharing"),
        (params("MigDeviceConfig", sharing=[]), "sharing"),
        (
            params("GpuConfig", sharing={"strategy": "TimeSlicing", "timeSlicingConfig": "Long"}),
            "sharing.timeSlicingConfig",
        ),
        (params("VfioDeviceConfig", iommu=True), "iommu"),
    ],
)
def test_a_level_that_is_not_an_object_is_refused_by_its_path(
    parameters: dict[str, Any], path: str
) -> None:
    error = refused(parameters)
    assert error.field == path
    assert f".{path} must be an object" in error.message


# ---------------------------------------------------------------- VFIO


def test_vfio_config_is_refused_without_the_passthrough_gate() -> None:
    error = refused(params("VfioDeviceConfig"), gates=TIME_SLICING_ON)
    assert error.field == "kind"
    assert "needs feature gate PassthroughSupport, which is off" in error.message


@pytest.mark.parametrize("iommu", [None, {}, {"backendPolicy": ""}, {"enableAPIDevice": None}])
def test_vfio_iommu_defaults_to_legacy_only_without_the_api_device(iommu: Any) -> None:
    decoded = configs.decode_device_config(params("VfioDeviceConfig", iommu=iommu), gates=ALL_ON)
    assert decoded == configs.VfioDeviceConfig(
        iommu_backend=configs.IommuBackendPolicy.LEGACY_ONLY, enable_api_device=False
    )


def test_vfio_iommu_fields_are_read() -> None:
    decoded = configs.decode_device_config(
        params("VfioDeviceConfig", iommu={"backendPolicy": "PreferIommuFD",
                                          "enableAPIDevice": True}),
        gates=ALL_ON,
    )
    assert decoded == configs.VfioDeviceConfig(
        iommu_backend=configs.IommuBackendPolicy.PREFER_IOMMU_FD, enable_api_device=True
    )


@pytest.mark.parametrize("policy", ["legacy", "iommufd", "PreferIOMMUFD", 1])
def test_an_unknown_iommu_backend_policy_is_refused(policy: Any) -> None:
    error = refused(params("VfioDeviceConfig", iommu={"backendPolicy": policy}))
    assert error.field == "iommu.backendPolicy"
    assert "use LegacyOnly or PreferIommuFD" in error.message


@pytest.mark.parametrize("enable", ["true", 1, {}])
def test_a_non_boolean_enable_api_device_is_refused(enable: Any) -> None:
    error = refused(params("VfioDeviceConfig", iommu={"enableAPIDevice": enable}))
    assert error.field == "iommu.enableAPIDevice"
    assert "must be true or false" in error.message


# ---------------------------------------------------------------- defaults and helpers


@pytest.mark.parametrize(
    ("device_type", "expected"),
    [
        (devices.GPU_TYPE, configs.GpuConfig()),
        (devices.MIG_TYPE, configs.MigDeviceConfig()),
        (devices.VFIO_TYPE, configs.VfioDeviceConfig(
            iommu_backend=configs.IommuBackendPolicy.LEGACY_ONLY, enable_api_device=False
        )),
    ],
)
def test_default_config_per_device_type_is_upstreams(
    device_type: str, expected: configs.DeviceConfig
) -> None:
    assert configs.default_config(device_type) == expected
    assert not configs.allows_sharing(configs.default_config(device_type))


def test_default_config_of_an_unknown_device_type_is_refused() -> None:
    with pytest.raises(errors.PermanentError, match="unknown GPU device type 'nic'"):
        configs.default_config("nic")


@pytest.mark.parametrize("device_type", [devices.GPU_TYPE, devices.MIG_TYPE, devices.VFIO_TYPE])
def test_each_kind_applies_to_its_own_device_type_only(device_type: str) -> None:
    own = configs.default_config(device_type)
    configs.check_applies(own, device_type=device_type, request="r")
    for other in (devices.GPU_TYPE, devices.MIG_TYPE, devices.VFIO_TYPE):
        assert configs.applies_to(own, device_type=other) is (other == device_type)


def test_a_gpu_config_on_a_mig_device_is_refused_naming_request_and_fix() -> None:
    with pytest.raises(errors.PermanentError) as caught:
        configs.check_applies(configs.GpuConfig(), device_type=devices.MIG_TYPE, request="slice")
    assert caught.value.message == (
        "a GpuConfig cannot apply to request 'slice': it was allocated a mig device, which "
        "takes a MigDeviceConfig; use a MigDeviceConfig for that request, or remove the "
        "request from this config's requests"
    )


def test_a_mig_config_on_a_vfio_device_is_refused() -> None:
    with pytest.raises(errors.PermanentError, match="takes a VfioDeviceConfig"):
        configs.check_applies(
            configs.MigDeviceConfig(), device_type=devices.VFIO_TYPE, request="vm"
        )


def test_check_applies_refuses_an_unknown_device_type() -> None:
    with pytest.raises(errors.PermanentError, match="unknown GPU device type"):
        configs.check_applies(configs.GpuConfig(), device_type="cpu", request="r")


def test_only_time_sliced_configs_allow_sharing() -> None:
    assert configs.allows_sharing(
        configs.GpuConfig(sharing=time_sliced(configs.TimeSliceInterval.LONG))
    )
    assert configs.allows_sharing(configs.MigDeviceConfig(
        sharing=configs.Sharing(strategy=configs.SharingStrategy.TIME_SLICING)
    ))
    assert not configs.allows_sharing(configs.GpuConfig())
    assert not configs.allows_sharing(configs.VfioDeviceConfig())


def test_encoding_writes_every_default_out() -> None:
    decoded = configs.decode_device_config(
        params("GpuConfig", sharing={"strategy": "TimeSlicing"}), gates=ALL_ON
    )
    assert configs.device_config_to_k8s(decoded) == params(
        "GpuConfig",
        sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
    )
    assert configs.device_config_to_k8s(configs.VfioDeviceConfig()) == params(
        "VfioDeviceConfig", iommu={"backendPolicy": "LegacyOnly", "enableAPIDevice": False}
    )
    assert configs.device_config_to_k8s(configs.MigDeviceConfig()) == params("MigDeviceConfig")
