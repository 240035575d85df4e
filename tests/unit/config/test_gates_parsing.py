"""Feature-gate parsing, defaults, aliases and dependency validation (DESIGN §3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import errors, gates, models

UNKNOWN_GATE_SUFFIX = (
    ": known gates are ComputeDomainCliques, CrashOnNVLinkFabricErrors, HostManagedIMEX, "
    "IMEXDaemonsWithDNSNames, MPSSupport, PassthroughSupport, TimeSlicingSettings"
)


def test_parse_empty_string_gives_no_explicit_gates() -> None:
    assert gates.parse_feature_gates("") == {}
    assert gates.parse_feature_gates("  ,  ") == {}


def test_parse_reads_true_and_false_tolerating_whitespace() -> None:
    parsed = gates.parse_feature_gates(" HostManagedIMEX = true ,ComputeDomainCliques=false, ")
    assert parsed == {"ComputeDomainCliques": False, "HostManagedIMEX": True}


def test_parse_accepts_the_boolean_spellings_upstream_accepts() -> None:
    assert gates.parse_feature_gates("HostManagedIMEX=True") == {"HostManagedIMEX": True}
    assert gates.parse_feature_gates("HostManagedIMEX=1") == {"HostManagedIMEX": True}
    assert gates.parse_feature_gates("HostManagedIMEX=FALSE") == {"HostManagedIMEX": False}


def test_parse_later_item_wins() -> None:
    parsed = gates.parse_feature_gates("HostManagedIMEX=true,HostManagedIMEX=false")
    assert parsed == {"HostManagedIMEX": False}


def test_parse_accepts_upstream_alias_host_managed_imex_daemon() -> None:
    assert gates.parse_feature_gates("HostManagedIMEXDaemon=true") == {"HostManagedIMEX": True}


def test_parse_rejects_unknown_gate_with_exact_message() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.parse_feature_gates("HostManagedIMEX=true,FancyGate=true")
    assert caught.value.message == "unknown feature gate 'FancyGate'" + UNKNOWN_GATE_SUFFIX


def test_parse_rejects_item_without_value_naming_it() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.parse_feature_gates("HostManagedIMEX")
    assert "'HostManagedIMEX'" in caught.value.message
    assert "Name=true or Name=false" in caught.value.message


def test_parse_rejects_item_without_name() -> None:
    with pytest.raises(errors.ConfigError, match="malformed feature gate item '=true'"):
        gates.parse_feature_gates("=true")


def test_parse_rejects_non_boolean_value_naming_item_and_allowed_values() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.parse_feature_gates("HostManagedIMEX=yes")
    assert "'HostManagedIMEX=yes'" in caught.value.message
    assert "values are true or false" in caught.value.message


def test_registry_matches_upstream_defaults_and_stages() -> None:
    registry = gates.REGISTRY
    assert {name: (g.default, g.stage.value) for name, g in registry.items()} == {
        "IMEXDaemonsWithDNSNames": (True, "beta"),
        "ComputeDomainCliques": (True, "beta"),
        "CrashOnNVLinkFabricErrors": (True, "beta"),
        "HostManagedIMEX": (False, "alpha"),
        "TimeSlicingSettings": (False, "alpha"),
        "MPSSupport": (False, "alpha"),
        "PassthroughSupport": (False, "alpha"),
    }
    assert registry["ComputeDomainCliques"].requires == ("IMEXDaemonsWithDNSNames",)


def test_resolve_fills_in_defaults_for_unset_gates() -> None:
    resolved = gates.resolve_gates({"HostManagedIMEX": True, "CrashOnNVLinkFabricErrors": False})
    assert resolved.values == {
        "ComputeDomainCliques": True,
        "CrashOnNVLinkFabricErrors": False,
        "HostManagedIMEX": True,
        "IMEXDaemonsWithDNSNames": True,
        "MPSSupport": False,
        "PassthroughSupport": False,
        "TimeSlicingSettings": False,
    }


def test_resolve_canonicalises_alias_and_rejects_unknown() -> None:
    assert gates.resolve_gates({"HostManagedIMEXDaemon": True}).enabled("HostManagedIMEX")
    with pytest.raises(errors.ConfigError, match="unknown feature gate 'Nope'"):
        gates.resolve_gates({"Nope": True})


def test_dependency_violation_has_exact_message() -> None:
    resolved = gates.resolve_gates({"IMEXDaemonsWithDNSNames": False})
    with pytest.raises(errors.ConfigError) as caught:
        gates.validate_gate_dependencies(resolved)
    assert caught.value.message == (
        "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true"
    )


def test_dependency_satisfied_when_dependent_gate_is_off() -> None:
    resolved = gates.resolve_gates(
        {"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False}
    )
    gates.validate_gate_dependencies(resolved)


def test_defaults_pass_dependency_validation() -> None:
    gates.validate_gate_dependencies(gates.resolve_gates({}))


@given(st.dictionaries(st.sampled_from(sorted(gates.REGISTRY)), st.booleans()))
def test_format_then_parse_round_trips(values: dict[str, bool]) -> None:
    text = gates.format_feature_gates(values)
    assert gates.parse_feature_gates(text) == values
    resolved = gates.resolve_gates(values)
    assert gates.resolve_gates(gates.parse_feature_gates(gates.format_feature_gates(resolved))) == (
        resolved
    )


def test_format_accepts_resolved_gates() -> None:
    resolved = models.FeatureGates(values={"HostManagedIMEX": True, "ComputeDomainCliques": False})
    assert gates.format_feature_gates(resolved) == "ComputeDomainCliques=false,HostManagedIMEX=true"
