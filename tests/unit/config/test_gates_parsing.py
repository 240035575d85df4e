"""Feature-gate parsing, defaults, aliases and dependency validation (DESIGN §3)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import errors, gates, models

UNKNOWN_GATE_SUFFIX = (
    ": known gates are ComputeDomainBindingConditions, ComputeDomainCliques, ConsumableShares, "
    "ContextualLogging, CrashOnNVLinkFabricErrors, DRAListTypeAttributes, DeviceMetadata, "
    "DynamicMIG, FabricManagerPartitioning, FabricTopologySupport, HostManagedIMEXDaemon, "
    "IMEXDaemonsWithDNSNames, "
    "LoggingAlphaOptions, LoggingBetaOptions, MPSSupport, NVMLDeviceHealthCheck, "
    "PassthroughSupport, TimeSlicingSettings (and AllAlpha, AllBeta; HostManagedIMEX is an "
    "alias of HostManagedIMEXDaemon)"
)

# Upstream's thirteen (pkg/featuregates/featuregates.go) with their defaults and stages, the
# logging gates component-base registers beside them (ContextualLogging overridden to true).
UPSTREAM_DEFAULTS = {
    "ComputeDomainCliques": (True, "beta"),
    "ConsumableShares": (False, "alpha"),
    "CrashOnNVLinkFabricErrors": (True, "beta"),
    "DRAListTypeAttributes": (False, "alpha"),
    "DeviceMetadata": (False, "alpha"),
    "DynamicMIG": (False, "alpha"),
    "FabricManagerPartitioning": (False, "alpha"),
    # The seed's gate (not upstream's).
    "FabricTopologySupport": (False, "alpha"),
    "HostManagedIMEXDaemon": (False, "alpha"),
    "IMEXDaemonsWithDNSNames": (True, "beta"),
    "MPSSupport": (False, "alpha"),
    "NVMLDeviceHealthCheck": (False, "alpha"),
    "PassthroughSupport": (False, "alpha"),
    "TimeSlicingSettings": (False, "alpha"),
    "ContextualLogging": (True, "beta"),
    "LoggingAlphaOptions": (False, "alpha"),
    "LoggingBetaOptions": (True, "beta"),
    # Ours: binding conditions on driver-managed channel devices (docs/operations.md).
    "ComputeDomainBindingConditions": (False, "alpha"),
}


def test_parse_empty_string_gives_no_explicit_gates() -> None:
    assert gates.parse_feature_gates("") == {}
    assert gates.parse_feature_gates("  ,  ") == {}


def test_parse_reads_true_and_false_tolerating_whitespace() -> None:
    parsed = gates.parse_feature_gates(
        " HostManagedIMEXDaemon = true ,ComputeDomainCliques=false, ")
    assert parsed == {"ComputeDomainCliques": False, "HostManagedIMEXDaemon": True}


def test_parse_accepts_the_boolean_spellings_upstream_accepts() -> None:
    assert gates.parse_feature_gates("MPSSupport=True") == {"MPSSupport": True}
    assert gates.parse_feature_gates("MPSSupport=1") == {"MPSSupport": True}
    assert gates.parse_feature_gates("MPSSupport=FALSE") == {"MPSSupport": False}


def test_parse_later_item_wins() -> None:
    parsed = gates.parse_feature_gates("HostManagedIMEXDaemon=true,HostManagedIMEX=false")
    assert parsed == {"HostManagedIMEXDaemon": False}


def test_host_managed_imex_daemon_is_canonical_and_our_older_name_an_alias() -> None:
    assert gates.parse_feature_gates("HostManagedIMEXDaemon=true") == {
        "HostManagedIMEXDaemon": True}
    assert gates.parse_feature_gates("HostManagedIMEX=true") == {"HostManagedIMEXDaemon": True}
    assert gates.HOST_MANAGED_IMEX == "HostManagedIMEXDaemon"
    assert gates.ALIASES == {"HostManagedIMEX": "HostManagedIMEXDaemon"}


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
    assert {name: (g.default, g.stage.value) for name, g in registry.items()} == (
        UPSTREAM_DEFAULTS
    )


def test_every_upstream_gate_is_accepted_under_its_own_name() -> None:
    text = ",".join(f"{name}=false" for name in UPSTREAM_DEFAULTS)
    assert set(gates.parse_feature_gates(text)) == set(UPSTREAM_DEFAULTS)
    assert gates.parse_feature_gates("HostManagedIMEX=false") == {"HostManagedIMEXDaemon": False}


def test_resolve_fills_in_defaults_for_unset_gates() -> None:
    resolved = gates.resolve_gates(
        {"HostManagedIMEXDaemon": True, "CrashOnNVLinkFabricErrors": False})
    expected = {name: default for name, (default, _) in UPSTREAM_DEFAULTS.items()}
    expected.update(HostManagedIMEXDaemon=True, CrashOnNVLinkFabricErrors=False)
    assert resolved.values == expected
    assert list(resolved.values) == sorted(resolved.values)


def test_resolve_canonicalises_alias_and_rejects_unknown() -> None:
    assert gates.resolve_gates({"HostManagedIMEX": True}).enabled("HostManagedIMEXDaemon")
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


@pytest.mark.parametrize(
    ("explicit", "message"),
    [
        (
            {"DynamicMIG": True, "PassthroughSupport": True},
            "feature gate DynamicMIG=true cannot be combined with PassthroughSupport=true",
        ),
        (
            {"DynamicMIG": True, "NVMLDeviceHealthCheck": True},
            "feature gate DynamicMIG=true cannot be combined with NVMLDeviceHealthCheck=true",
        ),
        (
            {"DynamicMIG": True, "MPSSupport": True},
            "feature gate DynamicMIG=true cannot be combined with MPSSupport=true",
        ),
        (
            {"PassthroughSupport": True, "NVMLDeviceHealthCheck": True},
            "feature gate PassthroughSupport=true cannot be combined with "
            "NVMLDeviceHealthCheck=true",
        ),
        (
            {"DeviceMetadata": True},
            "feature gate DeviceMetadata=true requires PassthroughSupport=true",
        ),
        (
            {"FabricTopologySupport": True},
            "feature gate FabricTopologySupport=true requires FabricManagerPartitioning=true",
        ),
    ],
)
def test_upstream_dependency_rules_are_enforced(explicit: dict[str, bool], message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.validate_gate_dependencies(gates.resolve_gates(explicit))
    assert caught.value.message.startswith(message)
    assert "set one of them to false" in caught.value.message or "requires" in message


def test_dependency_rules_report_upstreams_first_broken_rule() -> None:
    # Breaks both DynamicMIG rules: upstream checks PassthroughSupport before MPSSupport.
    resolved = gates.resolve_gates(
        {"DynamicMIG": True, "MPSSupport": True, "PassthroughSupport": True}
    )
    with pytest.raises(errors.ConfigError, match="with PassthroughSupport=true"):
        gates.validate_gate_dependencies(resolved)


def test_allowed_combinations_pass_dependency_validation() -> None:
    for explicit in (
        {"DeviceMetadata": True, "PassthroughSupport": True},
        {"DynamicMIG": True},
        {"NVMLDeviceHealthCheck": True, "MPSSupport": True},
        {"FabricManagerPartitioning": True, "PassthroughSupport": True},
        {"FabricTopologySupport": True, "FabricManagerPartitioning": True},
    ):
        gates.validate_gate_dependencies(gates.resolve_gates(explicit))


@pytest.fixture
def partly_built(monkeypatch: pytest.MonkeyPatch) -> str:
    """FabricManagerPartitioning as a gate whose feature the CD plugin lacks (every gate of
    today is built everywhere; the refusal stays for the next gate that is not)."""
    name = gates.FABRIC_MANAGER_PARTITIONING
    partial = dataclasses.replace(
        gates.REGISTRY[name], unbuilt_in=frozenset({gates.Component.COMPUTE_DOMAIN_PLUGIN}),
        feature="single-node NVLink system handling",
    )
    monkeypatch.setattr(gates, "REGISTRY", {**gates.REGISTRY, name: partial})
    return name


def test_a_binary_refuses_a_gate_whose_feature_it_does_not_build(partly_built: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.refuse_unbuilt(
            gates.resolve_gates({partly_built: True}), gates.Component.COMPUTE_DOMAIN_PLUGIN
        )
    message = caught.value.message
    assert message.startswith(f"feature gate {partly_built}=true: single-node NVLink")
    assert "is not implemented yet in this driver's compute-domain-kubelet-plugin" in message
    assert f"set {partly_built}=false" in message
    assert "\n" not in message


def test_unbuilt_gate_is_refused_only_where_its_feature_lives_and_only_when_on(
    partly_built: str,
) -> None:
    on = gates.resolve_gates({partly_built: True, "ContextualLogging": False})
    gates.refuse_unbuilt(on, gates.Component.CONTROLLER)
    gates.refuse_unbuilt(on, gates.Component.GPU_PLUGIN)
    gates.refuse_unbuilt(
        gates.resolve_gates({partly_built: False}), gates.Component.COMPUTE_DOMAIN_PLUGIN
    )


def test_every_gate_is_built_in_every_binary() -> None:
    everything = gates.resolve_gates({"AllAlpha": True, "AllBeta": True})
    for component in gates.Component:
        gates.refuse_unbuilt(everything, component)
    assert all(not g.unbuilt_in for g in gates.REGISTRY.values())


def test_defaults_pass_dependency_validation_and_start_every_binary() -> None:
    for component in gates.Component:
        gates.refuse_unbuilt(gates.resolve_gates({}), component)


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
    resolved = models.FeatureGates(values={"MPSSupport": True, "ComputeDomainCliques": False})
    assert gates.format_feature_gates(resolved) == "ComputeDomainCliques=false,MPSSupport=true"


# ---------------------------------------------------------------- AllAlpha / AllBeta
#
# Kubernetes component-base (which upstream's featuregates package builds on) knows two more
# gates: AllAlpha and AllBeta set every alpha (beta) gate that is not set explicitly; an
# explicit setting wins whatever its position. Upstream sets ContextualLogging=true
# explicitly when it builds its gates, so AllBeta=false leaves that one on.

ALPHA = sorted(n for n, (_, stage) in UPSTREAM_DEFAULTS.items() if stage == "alpha")
BETA = sorted(n for n, (_, stage) in UPSTREAM_DEFAULTS.items() if stage == "beta")


def test_all_alpha_and_all_beta_are_accepted_as_set() -> None:
    assert gates.parse_feature_gates("AllAlpha=true,AllBeta=false") == {
        "AllAlpha": True, "AllBeta": False}


def test_all_alpha_turns_on_every_alpha_gate_not_set_explicitly() -> None:
    for text in ("AllAlpha=true,DynamicMIG=false", "DynamicMIG=false,AllAlpha=true"):
        resolved = gates.resolve_gates(gates.parse_feature_gates(text))
        assert {n for n in ALPHA if resolved.enabled(n)} == set(ALPHA) - {"DynamicMIG"}
        assert {n for n in BETA if resolved.enabled(n)} == set(BETA)  # defaults
        assert "AllAlpha" not in resolved.values


def test_all_beta_false_turns_off_every_beta_gate_but_upstreams_preset_one() -> None:
    resolved = gates.resolve_gates(gates.parse_feature_gates("AllBeta=false"))
    assert {n for n in BETA if resolved.enabled(n)} == {"ContextualLogging"}
    assert not any(resolved.enabled(n) for n in ALPHA)
    gates.validate_gate_dependencies(resolved)  # Cliques and DNS names are both off


def test_all_beta_false_with_one_dependent_gate_back_on_breaks_its_rule() -> None:
    resolved = gates.resolve_gates(
        gates.parse_feature_gates("AllBeta=false,ComputeDomainCliques=true"))
    with pytest.raises(errors.ConfigError) as caught:
        gates.validate_gate_dependencies(resolved)
    assert caught.value.message == (
        "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true")


def test_all_alpha_alone_breaks_upstreams_exclusions_as_upstream_does() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.validate_gate_dependencies(gates.resolve_gates({"AllAlpha": True}))
    assert caught.value.message == gates.exclusion_message("DynamicMIG", "PassthroughSupport")
    explicit = gates.parse_feature_gates(
        "AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false")
    gates.validate_gate_dependencies(gates.resolve_gates(explicit))


def test_all_alpha_unlocks_host_managed_imex_like_the_gate_itself() -> None:
    assert gates.resolve_gates({"AllAlpha": True}).enabled("HostManagedIMEXDaemon")


def test_a_mapping_with_both_spellings_takes_the_gates_own_name_as_the_chart_does() -> None:
    for explicit in ({"HostManagedIMEX": True, "HostManagedIMEXDaemon": False},
                     {"HostManagedIMEXDaemon": False, "HostManagedIMEX": True}):
        assert gates.canonical_gates(explicit) == {"HostManagedIMEXDaemon": False}
