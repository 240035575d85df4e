"""The chart under channel isolation: slot DeviceClass (real CEL), values, shared defaults."""

from __future__ import annotations

import chart_rendering as cr
import pytest
from test_helm_cel import _published, _selected

from apps.controller import settings as controller_settings
from apps.kubeletplugin import settings as plugin_settings
from core import names
from core.computedomain import modes

CHANNEL = cr.imex("hostManaged", "channel", featureGates={"HostManagedIMEXDaemon": True})


def _env(objects: list[cr.Obj], kind: str, name_suffix: str) -> dict[str, str]:
    (workload,) = [o for o in objects if o["kind"] == kind
                   and o["metadata"]["name"].endswith(name_suffix)]
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_slot_class_selects_exactly_the_slot_devices_a_node_publishes() -> None:
    objects = cr.render(CHANNEL)
    devices = _published(CHANNEL)
    slot_class = cr.one(objects, "DeviceClass", names.SLOT_DEVICE_CLASS)
    assert _selected(slot_class, devices) == sorted(f"slot-{i}" for i in range(8))
    # And nothing of another mode's devices: no channel-0, no daemon-0.
    other = _published(cr.host_managed()) + _published({})
    assert _selected(slot_class, other) == []


@pytest.mark.parametrize("values", [{}, cr.host_managed()], ids=["driverManaged", "none"])
def test_no_slot_class_outside_channel_isolation(values: cr.Obj) -> None:
    assert cr.find(cr.render(values), "DeviceClass", names.SLOT_DEVICE_CLASS) == []


def test_chart_and_apps_agree_on_the_channel_defaults() -> None:
    objects = cr.render(CHANNEL)
    controller = _env(objects, "Deployment", "-controller")
    plugin = _env(objects, "DaemonSet", "-kubelet-plugin")
    assert controller["IMEX_ISOLATION"] == plugin["IMEX_ISOLATION"] == "channel"
    parsed_controller = controller_settings.parse([], controller)
    parsed_plugin = plugin_settings.parse([], {**plugin, "NODE_NAME": "n1"})
    defaults = modes.resolve_driver_config(
        mode="hostManaged", isolation="channel", feature_gates="HostManagedIMEXDaemon=true",
        namespace="ns",
    ).config
    assert parsed_controller.max_channels == defaults.max_channels == 2048
    assert parsed_plugin.channel_slots == defaults.channel_slots == 8
    assert controller_settings.parse([], {}).max_channels == 2048
    assert plugin_settings.parse([], {"NODE_NAME": "n1"}).channel_slots == 8


def test_channel_values_reach_both_apps() -> None:
    values = cr.imex("hostManaged", "channel", featureGates={"HostManagedIMEXDaemon": True})
    values["resources"]["computeDomains"]["imex"]["channels"] = {"max": 3, "slotsPerNode": 2}
    objects = cr.render(values)
    assert _env(objects, "Deployment", "-controller")["IMEX_CHANNELS_MAX"] == "3"
    assert _env(objects, "DaemonSet", "-kubelet-plugin")["IMEX_CHANNEL_SLOTS"] == "2"


@pytest.mark.parametrize("channels", [{"max": 2049}, {"max": 1}, {"slotsPerNode": 0},
                                      {"slotsPerNode": 129}, {"unknown": 1}])
def test_out_of_range_channel_values_fail_schema_validation(channels: cr.Obj) -> None:
    values = cr.imex("hostManaged", "channel", featureGates={"HostManagedIMEXDaemon": True})
    values["resources"]["computeDomains"]["imex"]["channels"] = channels
    with pytest.raises(Exception, match="channels"):
        cr.render(values)


def test_host_managed_without_an_isolation_installs_domain_isolation_like_the_apps() -> None:
    # As upstream: domain is the default in both modes; under hostManaged it means host
    # channel 0 for every ComputeDomain, so no slot DeviceClass is installed.
    values = cr.imex("hostManaged", "", featureGates={"HostManagedIMEXDaemon": True})
    objects = cr.render(values)
    for kind, suffix in (("Deployment", "-controller"), ("DaemonSet", "-kubelet-plugin")):
        assert _env(objects, kind, suffix)["IMEX_ISOLATION"] == "domain"
    assert not [o for o in objects if o["kind"] == "DeviceClass"
                and o["metadata"]["name"] == names.SLOT_DEVICE_CLASS]
    resolved = modes.resolve_driver_config(
        mode="hostManaged", isolation="domain", feature_gates="HostManagedIMEXDaemon=true",
        namespace="ns",
    )
    assert not resolved.config.channel_isolation
