"""Opaque config decoding: strict for claims, tolerant for checkpointed copies (DESIGN §3)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import decoding, errors, models, names


def channel_params(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": "cd-uid-1",
        **extra,
    }


def decode_error(params: Any, *, strict: bool = True) -> errors.DecodeError:
    with pytest.raises(errors.DecodeError) as caught:
        decoding.decode_opaque_config(params, strict=strict)
    return caught.value


def test_decodes_channel_config() -> None:
    cfg = decoding.decode_opaque_config(channel_params(allocationMode="Single"), strict=True)
    assert cfg == models.ChannelConfig(domain_id="cd-uid-1", allocation_mode="Single")


def test_channel_config_allocation_mode_is_optional_and_kept_raw() -> None:
    assert decoding.decode_opaque_config(channel_params(), strict=True) == models.ChannelConfig(
        domain_id="cd-uid-1"
    )
    # Validity of the value depends on the IMEX mode: the prepare planner decides.
    cfg = decoding.decode_opaque_config(channel_params(allocationMode="foo"), strict=True)
    assert cfg == models.ChannelConfig(domain_id="cd-uid-1", allocation_mode="foo")


def test_decodes_daemon_config() -> None:
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "cd-uid-2",
    }
    assert decoding.decode_opaque_config(params, strict=True) == models.DaemonConfig(
        domain_id="cd-uid-2"
    )


def test_strict_rejects_unknown_field_naming_it_and_the_accepted_fields() -> None:
    err = decode_error(channel_params(numChannels=4))
    assert err.field == "numChannels"
    assert 'unknown field "numChannels"' in err.message
    assert "accepted fields are apiVersion, kind, domainID, allocationMode" in err.message


def test_the_unknown_field_error_carries_upstreams_strict_decoding_phrase() -> None:
    """Upstream's tests grep the plugin's log for this phrase; ours keeps its helpful tail."""
    err = decode_error(channel_params(unexpectedField=1))
    assert err.message.startswith(
        'strict decoding error: unknown field "unexpectedField" in ComputeDomainChannelConfig: '
        "accepted fields are apiVersion, kind, domainID, allocationMode"
    )
    several = decode_error(channel_params(zeta=1, alpha=2))
    assert several.message.startswith(
        'strict decoding error: unknown field "alpha", unknown field "zeta" in '
        "ComputeDomainChannelConfig: accepted fields are"
    )


def test_strict_rejects_allocation_mode_on_daemon_config() -> None:
    params = {
        "apiVersion": names.GROUP_VERSION,
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "d",
        "allocationMode": "Single",
    }
    err = decode_error(params)
    assert err.field == "allocationMode"
    assert "accepted fields are apiVersion, kind, domainID" in err.message


def test_non_strict_ignores_unknown_field() -> None:
    cfg = decoding.decode_opaque_config(channel_params(futureField={"a": 1}), strict=False)
    assert cfg == models.ChannelConfig(domain_id="cd-uid-1")


def test_wrong_kind_names_accepted_kinds() -> None:
    err = decode_error(channel_params(kind="GpuConfig"))
    assert err.field == "kind"
    assert "'GpuConfig'" in err.message
    assert "ComputeDomainChannelConfig or ComputeDomainDaemonConfig" in err.message


def test_wrong_kind_rejected_in_non_strict_mode_too() -> None:
    assert decode_error(channel_params(kind="GpuConfig"), strict=False).field == "kind"


def test_missing_kind_is_rejected() -> None:
    params = channel_params()
    del params["kind"]
    assert decode_error(params).field == "kind"


def test_wrong_api_version_names_accepted_value() -> None:
    err = decode_error(channel_params(apiVersion="resource.nvidia.com/v1alpha1"))
    assert err.field == "apiVersion"
    assert "'resource.nvidia.com/v1alpha1'" in err.message
    assert "use resource.nvidia.com/v1beta1" in err.message


@pytest.mark.parametrize("domain_id", ["", None, 7, ["x"]])
def test_empty_missing_or_non_string_domain_id_is_rejected(domain_id: Any) -> None:
    params = channel_params(domainID=domain_id)
    if domain_id is None:
        del params["domainID"]
    err = decode_error(params)
    assert err.field == "domainID"
    assert "domainID must be a non-empty string" in err.message


def test_non_string_allocation_mode_is_rejected() -> None:
    assert decode_error(channel_params(allocationMode=1)).field == "allocationMode"


def test_non_object_parameters_are_rejected() -> None:
    err = decode_error(["not", "an", "object"])
    assert "must be a JSON object, got array" in err.message


def test_long_values_are_truncated_in_messages() -> None:
    err = decode_error(channel_params(kind="K" * 10_000))
    assert len(err.message) < 300


def test_encode_omits_empty_allocation_mode() -> None:
    assert decoding.opaque_config_to_k8s(models.ChannelConfig(domain_id="u")) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": "u",
    }


def test_encode_daemon_config() -> None:
    assert decoding.opaque_config_to_k8s(models.DaemonConfig(domain_id="u")) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "u",
    }


opaque_configs = st.one_of(
    st.builds(
        models.ChannelConfig,
        domain_id=st.text(min_size=1),
        allocation_mode=st.sampled_from(["", "Single", "All", "foo"]),
    ),
    st.builds(models.DaemonConfig, domain_id=st.text(min_size=1)),
)


@given(opaque_configs, st.booleans())
def test_opaque_config_round_trips(cfg: models.OpaqueConfig, strict: bool) -> None:
    assert decoding.decode_opaque_config(decoding.opaque_config_to_k8s(cfg), strict=strict) == cfg
