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
