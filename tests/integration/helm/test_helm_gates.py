"""The chart accepts every gate the apps know and refuses what the apps refuse, word for word.

Covered: upstream's thirteen gates and the logging gates render with upstream's defaults
(the chart passes only what was set); an unknown gate fails with the apps' list of known
gates; each of upstream's dependency rules fails rendering with the apps' message, in both
halves; gates whose feature is not built here still render (the binary refuses them).
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import pytest

from core import errors, gates


def _core_message(explicit: dict[str, bool]) -> str:
    with pytest.raises(errors.ConfigError) as caught:
        gates.validate_gate_dependencies(gates.resolve_gates(explicit))
    return caught.value.message


def _gpus_only(**values: Any) -> dict[str, Any]:
    return {"resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
            **values}


def test_every_known_gate_renders_and_reaches_the_apps_as_set() -> None:
    every = {name: False for name in gates.known_gate_names()}
    every["HostManagedIMEXDaemon"] = False
    env = cr.container_env(cr.one(cr.render({"featureGates": every}), "DaemonSet"))
    assert gates.parse_feature_gates(env["FEATURE_GATES"]) == {
        name: False for name in gates.known_gate_names()
    }


@pytest.mark.parametrize(
    "gate",
    ["NVMLDeviceHealthCheck", "DynamicMIG", "ConsumableShares", "DRAListTypeAttributes",
     "FabricManagerPartitioning", "ContextualLogging", "LoggingAlphaOptions"],
)
def test_a_gate_whose_feature_is_not_built_still_renders(gate: str) -> None:
    env = cr.container_env(cr.one(cr.render({"featureGates": {gate: True}}), "DaemonSet"))
    assert env["FEATURE_GATES"] == f"{gate}=true"


def test_an_unknown_gate_fails_with_the_apps_message() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gates.parse_feature_gates("FancyGate=true")
    assert caught.value.message in cr.render_error({"featureGates": {"FancyGate": True}})


RULE_BREAKERS = [
    {"IMEXDaemonsWithDNSNames": False},
    {"DynamicMIG": True, "PassthroughSupport": True},
    {"DynamicMIG": True, "NVMLDeviceHealthCheck": True},
    {"DynamicMIG": True, "MPSSupport": True},
    {"PassthroughSupport": True, "NVMLDeviceHealthCheck": True},
    {"DeviceMetadata": True},
    {"FabricTopologySupport": True},
    # Two rules broken at once: upstream's order decides which one is reported.
    {"DynamicMIG": True, "MPSSupport": True, "PassthroughSupport": True},
]


@pytest.mark.parametrize("explicit", RULE_BREAKERS)
def test_an_upstream_gate_rule_fails_rendering_with_the_apps_message(
    explicit: dict[str, bool],
) -> None:
    message = _core_message(explicit)
    assert message in cr.render_error({"featureGates": explicit})
    if "IMEXDaemonsWithDNSNames" not in explicit:
        assert message in cr.render_error(_gpus_only(featureGates=explicit))


def test_gates_satisfying_upstreams_rules_render() -> None:
    explicit = {"DeviceMetadata": True, "PassthroughSupport": True, "MPSSupport": True}
    gates.validate_gate_dependencies(gates.resolve_gates(explicit))
    assert cr.render(_gpus_only(featureGates=explicit))


# ---------------------------------------------------------------- AllAlpha / AllBeta
#
# component-base's toggles, which upstream's binaries accept: every alpha (beta) gate not set
# explicitly takes the toggle's value. The chart computes the effective gates the same way
# (the vfio DeviceClass follows the effective PassthroughSupport) and refuses what the apps
# refuse, with their message.


def _vfio_class(values: dict[str, Any]) -> bool:
    return any(o["metadata"]["name"] == "vfio.gpu.nvidia.com"
               for o in cr.find(cr.render(values), "DeviceClass"))


def test_all_alpha_reaches_the_apps_and_turns_on_alpha_gates_in_the_chart() -> None:
    explicit = {"AllAlpha": True, "DynamicMIG": False, "NVMLDeviceHealthCheck": False}
    resolved = gates.resolve_gates(explicit)
    gates.validate_gate_dependencies(resolved)
    assert resolved.enabled("PassthroughSupport")
    values = _gpus_only(featureGates=explicit)
    env = cr.container_env(cr.one(cr.render(values), "DaemonSet"))
    assert gates.parse_feature_gates(env["FEATURE_GATES"]) == explicit
    assert _vfio_class(values)
    # An explicit setting wins over the toggle.
    assert not _vfio_class(_gpus_only(featureGates={
        **explicit, "PassthroughSupport": False, "DeviceMetadata": False}))


@pytest.mark.parametrize("explicit", [
    {"AllAlpha": True},  # DynamicMIG and PassthroughSupport both on: excluded, as upstream
    {"AllBeta": False, "ComputeDomainCliques": True},  # its dependency turned off
    {"AllBeta": False, "AllAlpha": True, "DynamicMIG": False},
])
def test_a_toggle_breaking_an_upstream_rule_fails_rendering_with_the_apps_message(
    explicit: dict[str, bool],
) -> None:
    message = _core_message(explicit)
    assert message in cr.render_error({"featureGates": explicit})


def test_all_beta_false_renders_when_the_rules_still_hold() -> None:
    gates.validate_gate_dependencies(gates.resolve_gates({"AllBeta": False}))
    env = cr.container_env(cr.one(cr.render({"featureGates": {"AllBeta": False}}), "DaemonSet"))
    assert env["FEATURE_GATES"] == "AllBeta=false"


def test_all_alpha_unlocks_host_managed_in_the_chart_as_in_the_apps() -> None:
    explicit = {"AllAlpha": True, "DynamicMIG": False, "NVMLDeviceHealthCheck": False}
    values = cr.imex("hostManaged", "", featureGates=explicit)
    env = cr.container_env(cr.one(cr.render(values), "DaemonSet"))
    assert env["IMEX_MODE"] == "hostManaged"
    assert "AllAlpha=true" in env["FEATURE_GATES"]
