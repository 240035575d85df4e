"""The IMEX mode/isolation matrix of DESIGN §1: one clear startup error per invalid combination."""

from __future__ import annotations

import pytest

from core import errors, gates, models
from core.computedomain import modes


def resolve(
    *, mode: str = "", isolation: str = "", feature_gates: str = ""
) -> modes.ResolvedConfig:
    return modes.resolve_driver_config(
        mode=mode, isolation=isolation, feature_gates=feature_gates, namespace="dra"
    )


def config_error(**kwargs: str) -> str:
    with pytest.raises(errors.ConfigError) as caught:
        resolve(**kwargs)
    return caught.value.message


# ---------------------------------------------------------------- valid combinations


def test_empty_mode_and_isolation_mean_driver_managed_domain_with_default_gates() -> None:
    resolved = resolve()
    assert resolved.config.mode is models.IMEXMode.DRIVER_MANAGED
    assert resolved.config.isolation is models.Isolation.DOMAIN
    assert resolved.config.namespace == "dra"
    assert resolved.config.gates == gates.resolve_gates({})
    assert resolved.notes == ()


def test_driver_managed_accepts_explicit_domain_isolation() -> None:
    resolved = resolve(mode="driverManaged", isolation="domain")
    assert resolved.config.isolation is models.Isolation.DOMAIN


def test_host_managed_forces_daemon_gates_off_and_passes_validation() -> None:
    resolved = resolve(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true")
    config = resolved.config
    assert config.mode is models.IMEXMode.HOST_MANAGED
    assert config.isolation is models.Isolation.NONE
    assert config.gates.values["IMEXDaemonsWithDNSNames"] is False
    assert config.gates.values["ComputeDomainCliques"] is False
    assert config.gates.values["HostManagedIMEXDaemon"] is True
    assert config.gates.values["CrashOnNVLinkFabricErrors"] is True
    assert len(resolved.notes) == 1
    assert "ComputeDomainCliques=false" in resolved.notes[0]
    assert "IMEXDaemonsWithDNSNames=false" in resolved.notes[0]


def test_host_managed_overrides_explicit_cliques_true_and_says_so() -> None:
    resolved = resolve(
        mode="hostManaged",
        isolation="none",
        feature_gates="HostManagedIMEXDaemon=true,ComputeDomainCliques=true",
    )
    assert resolved.config.gates.enabled("ComputeDomainCliques") is False
    assert resolved.config.gates.enabled("IMEXDaemonsWithDNSNames") is False
    (note,) = resolved.notes
    assert "ComputeDomainCliques=false (was set true explicitly)" in note
    assert "hostManaged" in note


def test_host_managed_passes_even_when_user_set_cliques_without_dns_names() -> None:
    # Would be a dependency violation in driverManaged; the override runs before validation.
    resolved = resolve(
        mode="hostManaged",
        isolation="none",
        feature_gates="HostManagedIMEXDaemon=true,ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false",
    )
    assert resolved.config.gates.enabled("ComputeDomainCliques") is False
    (note,) = resolved.notes
    assert "ComputeDomainCliques" in note
    assert "IMEXDaemonsWithDNSNames" not in note


def test_host_managed_note_omitted_when_no_gate_changed() -> None:
    resolved = resolve(
        mode="hostManaged",
        isolation="none",
        feature_gates="HostManagedIMEXDaemon=true,ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false",
    )
    assert resolved.notes == ()


def test_host_managed_accepts_upstream_gate_alias() -> None:
    resolved = resolve(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true"
    )
    assert resolved.config.mode is models.IMEXMode.HOST_MANAGED


def test_gates_may_come_as_a_mapping() -> None:
    resolved = modes.resolve_driver_config(
        mode="hostManaged",
        isolation="none",
        feature_gates={"HostManagedIMEXDaemon": True},
        namespace="dra",
        host_imex_check=True,
        daemon_image="example.com/imex:1",
    )
    assert resolved.config.host_imex_check is True
    assert resolved.config.daemon_image == "example.com/imex:1"


def test_daemon_image_defaults_to_model_default() -> None:
    assert resolve().config.daemon_image == models.DriverConfig(
        mode=models.IMEXMode.DRIVER_MANAGED,
        isolation=models.Isolation.DOMAIN,
        gates=models.FeatureGates(values={}),
    ).daemon_image


# ---------------------------------------------------------------- invalid combinations


def test_unknown_mode_is_rejected() -> None:
    assert config_error(mode="hostmanaged") == (
        "unknown IMEX mode 'hostmanaged': use driverManaged or hostManaged"
    )


def test_unknown_isolation_is_rejected() -> None:
    assert config_error(isolation="strict") == (
        "unknown IMEX isolation 'strict': use domain or channel "
        "(none is accepted as an old name of domain under hostManaged)"
    )


def test_host_managed_without_gate_is_rejected() -> None:
    message = config_error(mode="hostManaged", isolation="none")
    assert message == modes.HOST_MANAGED_NEEDS_GATE
    assert message == (
        "IMEX mode hostManaged requires feature gate HostManagedIMEXDaemon=true: set "
        "featureGates.HostManagedIMEXDaemon=true (Helm) or "
        "FEATURE_GATES=HostManagedIMEXDaemon=true, or use mode driverManaged"
    )


def test_host_managed_with_gate_explicitly_false_is_rejected() -> None:
    message = config_error(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=false"
    )
    assert message == modes.HOST_MANAGED_NEEDS_GATE


@pytest.mark.parametrize("isolation", ["", "domain", "none"])
def test_host_managed_domain_isolation_is_upstreams_host_channel_0(isolation: str) -> None:
    # Upstream's meaning: `domain` (the default in both modes) under hostManaged is the host's
    # one IMEX domain, every ComputeDomain on channel 0; `none` is our earlier name for it.
    resolved = resolve(
        mode="hostManaged", isolation=isolation, feature_gates="HostManagedIMEXDaemon=true"
    )
    assert resolved.config.isolation is models.Isolation.NONE
    assert not resolved.config.channel_isolation
    assert modes.host_managed_channel_grant(resolved.config) == "every workload channel 0 only"


def test_host_managed_with_channel_isolation_resolves_to_one_channel_per_domain() -> None:
    resolved = modes.resolve_driver_config(
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
        namespace="ns",
    )
    assert resolved.config.isolation is models.Isolation.CHANNEL
    assert resolved.config.channel_isolation
    assert (resolved.config.max_channels, resolved.config.channel_slots) == (2048, 8)


@pytest.mark.parametrize("max_channels", [0, 1, 2049])
def test_a_channel_maximum_outside_the_kernel_range_is_refused(max_channels: int) -> None:
    with pytest.raises(errors.ConfigError, match=r"imex\.channels\.max is"):
        modes.resolve_driver_config(
            mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
            namespace="ns", max_channels=max_channels,
        )


@pytest.mark.parametrize("slots", [0, 129])
def test_a_slot_count_outside_1_to_128_is_refused(slots: int) -> None:
    with pytest.raises(errors.ConfigError, match=r"slotsPerNode is"):
        modes.resolve_driver_config(
            mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
            namespace="ns", channel_slots=slots,
        )


def test_driver_managed_with_channel_isolation_is_rejected() -> None:
    assert config_error(mode="driverManaged", isolation="channel") == (
        "isolation 'channel' is only valid with mode hostManaged: with mode driverManaged "
        "leave isolation empty or set it to 'domain'"
    )


def test_driver_managed_with_none_isolation_is_rejected() -> None:
    assert config_error(isolation="none") == modes.driver_managed_isolation_message("none")
    assert "isolation 'none' is only valid with mode hostManaged" in config_error(isolation="none")


def test_driver_managed_dependency_violation_is_rejected() -> None:
    message = config_error(
        mode="driverManaged",
        feature_gates="ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false",
    )
    assert message == "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true"


def test_unknown_gate_is_rejected_before_the_mode_is_looked_at() -> None:
    message = config_error(mode="bogus", feature_gates="Bogus=true")
    assert message.startswith("unknown feature gate 'Bogus'")


def test_unknown_gate_in_mapping_is_rejected() -> None:
    with pytest.raises(errors.ConfigError, match="unknown feature gate 'Bogus'"):
        modes.resolve_driver_config(
            mode="", isolation="", feature_gates={"Bogus": True}, namespace="dra"
        )


def test_gate_check_precedes_isolation_check_in_host_managed() -> None:
    # Both are wrong; the operator first learns about the gate.
    assert config_error(mode="hostManaged", isolation="domain") == modes.HOST_MANAGED_NEEDS_GATE


# ---------------------------------------------------------------- describe


def test_describe_is_one_key_value_line() -> None:
    config = resolve(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEXDaemon=true"
    ).config
    line = modes.describe(config)
    assert "\n" not in line
    assert line.startswith(
        "mode=hostManaged isolation=none namespace=dra host_imex_check=false "
        "feature_gates=ComputeDomainBindingConditions=false,ComputeDomainCliques=false,"
    )
    assert ",HostManagedIMEXDaemon=true,IMEXDaemonsWithDNSNames=false," in line


# ---------------------------------------------------------------- the gate without the mode


@pytest.mark.parametrize("mode", ["", "driverManaged"])
@pytest.mark.parametrize("gate", ["HostManagedIMEXDaemon=true", "HostManagedIMEX=true"])
def test_host_managed_gate_only_unlocks_the_mode(mode: str, gate: str) -> None:
    # Upstream: the gate changes no behaviour by itself; driverManaged with it on is valid.
    resolved = resolve(mode=mode, feature_gates=gate)
    assert resolved.config.mode is models.IMEXMode.DRIVER_MANAGED
    assert resolved.config.isolation is models.Isolation.DOMAIN
    assert resolved.config.gates.enabled("HostManagedIMEXDaemon")
    assert resolved.config.gates.enabled("IMEXDaemonsWithDNSNames")


def test_host_managed_gate_set_false_keeps_driver_managed() -> None:
    resolved = resolve(mode="driverManaged", feature_gates="HostManagedIMEXDaemon=false")
    assert resolved.config.mode is models.IMEXMode.DRIVER_MANAGED


def test_other_mistakes_are_reported_before_the_gate_without_the_mode() -> None:
    # Same order as the chart, which checks the gate-without-mode rule last.
    message = config_error(mode="driverManaged", isolation="none",
                           feature_gates="HostManagedIMEXDaemon=true")
    assert message == modes.driver_managed_isolation_message("none")


def test_all_alpha_unlocks_host_managed_and_its_dependency_rules_still_apply() -> None:
    # AllAlpha (component-base's, as upstream) sets HostManagedIMEXDaemon with every other
    # alpha gate, so upstream's exclusions need the conflicting ones set false explicitly.
    with pytest.raises(errors.ConfigError) as caught:
        resolve(mode="hostManaged", isolation="none", feature_gates="AllAlpha=true")
    assert caught.value.message == gates.exclusion_message("DynamicMIG", "PassthroughSupport")
    resolved = resolve(
        mode="hostManaged", isolation="none",
        feature_gates="AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false",
    )
    assert resolved.config.mode is models.IMEXMode.HOST_MANAGED
    assert resolved.config.gates.enabled("HostManagedIMEXDaemon")
