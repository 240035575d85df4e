"""Properties of core.gpu.configs: the encoder round-trips, and any JSON decodes or is refused.

Valid configs are built from the models, so the round trip covers every interval, backend
policy and sharing shape; arbitrary JSON is shaped with our field names and values so the
search reaches the nested levels.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core import errors, gates, models
from core.gpu import configs

ALL_ON = models.FeatureGates(
    values={gates.TIME_SLICING_SETTINGS: True, gates.MPS_SUPPORT: True,
            gates.PASSTHROUGH_SUPPORT: True}
)
GATE_SETS = st.builds(
    lambda ts, mps, pt: models.FeatureGates(values={
        gates.TIME_SLICING_SETTINGS: ts, gates.MPS_SUPPORT: mps, gates.PASSTHROUGH_SUPPORT: pt,
    }),
    st.booleans(), st.booleans(), st.booleans(),
)

_gpu_sharing = st.none() | st.builds(
    configs.Sharing,
    strategy=st.just(configs.SharingStrategy.TIME_SLICING),
    time_slicing=st.builds(
        configs.TimeSlicing, interval=st.sampled_from(configs.TimeSliceInterval)
    ),
)
_mig_sharing = st.none() | st.just(
    configs.Sharing(strategy=configs.SharingStrategy.TIME_SLICING)
)
VALID_CONFIGS: st.SearchStrategy[configs.DeviceConfig] = st.one_of(
    st.builds(configs.GpuConfig, sharing=_gpu_sharing),
    st.builds(configs.MigDeviceConfig, sharing=_mig_sharing),
    st.builds(
        configs.VfioDeviceConfig,
        iommu_backend=st.sampled_from(configs.IommuBackendPolicy),
        enable_api_device=st.booleans(),
    ),
)

_KEYS = st.sampled_from(
    ["apiVersion", "kind", "sharing", "strategy", "timeSlicingConfig", "interval", "mpsConfig",
     "iommu", "backendPolicy", "enableAPIDevice", "metadata"]
)
_VALUES = st.sampled_from(
    [configs.API_VERSION, *configs.KINDS, "TimeSlicing", "MPS", "Default", "Long",
     "LegacyOnly", "PreferIommuFD", "ComputeDomainChannelConfig", True, False, ""]
)
SHAPED: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.integers() | _VALUES | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(_KEYS | st.text(max_size=4), children, max_size=5),
    max_leaves=30,
)
NEAR_VALID = st.fixed_dictionaries(
    {"apiVersion": st.just(configs.API_VERSION), "kind": st.sampled_from(configs.KINDS)},
    optional={"sharing": SHAPED, "iommu": SHAPED},
)


@given(config=VALID_CONFIGS)
def test_decoding_the_encoding_of_a_valid_config_gives_it_back(
    config: configs.DeviceConfig,
) -> None:
    encoded = configs.device_config_to_k8s(config)
    assert configs.decode_device_config(encoded, gates=ALL_ON) == config


@settings(max_examples=300)
@given(parameters=SHAPED | NEAR_VALID, gate_values=GATE_SETS, strict=st.booleans())
def test_any_json_decodes_to_a_config_or_is_refused_with_a_decode_error_naming_a_field(
    parameters: Any, gate_values: models.FeatureGates, strict: bool
) -> None:
    try:
        decoded = configs.decode_device_config(parameters, gates=gate_values, strict=strict)
    except errors.DecodeError as exc:
        assert exc.field
        assert exc.message
        return
    # What decodes is normalized: encoding and decoding again changes nothing.
    again = configs.decode_device_config(
        configs.device_config_to_k8s(decoded), gates=gate_values
    )
    assert again == decoded


@settings(max_examples=200)
@given(parameters=NEAR_VALID)
def test_mps_never_decodes_whatever_the_gates(parameters: dict[str, Any]) -> None:
    try:
        decoded = configs.decode_device_config(parameters, gates=ALL_ON)
    except errors.DecodeError:
        return
    if not isinstance(decoded, configs.VfioDeviceConfig) and decoded.sharing is not None:
        assert decoded.sharing.strategy is configs.SharingStrategy.TIME_SLICING
