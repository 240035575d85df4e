"""CEL in the chart, evaluated with cel-python against what the driver really produces.

DeviceClass selectors run against the devices
`core.computedomain.slice_devices.plan_slice_devices` publishes in each mode, shaped the way
the DRA scheduler builds the CEL `device` variable. The ValidatingAdmissionPolicy runs against
admission requests for ResourceSlice writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import celpy
import celpy.adapter
import chart_rendering as cr
import pytest

from core import names
from core.computedomain import modes, slice_devices


def _device_variable(device: Mapping[str, Any], *, driver: str) -> Any:
    """The CEL `device` of a ResourceSlice v1 device, as DRA builds it.

    attributes: domain -> name -> value, where a bare name belongs to the driver's domain and a
    `domain/name` key to that domain; each typed value ({string|int|bool|version: v}) unwrapped.
    """
    attributes: dict[str, dict[str, Any]] = {}
    for key, typed in device.get("attributes", {}).items():
        domain, _, name = key.rpartition("/")
        (value,) = typed.values()
        attributes.setdefault(domain or driver, {})[name] = value
    capacity: dict[str, dict[str, Any]] = {}
    for key, quantity in device.get("capacity", {}).items():
        domain, _, name = key.rpartition("/")
        capacity.setdefault(domain or driver, {})[name] = quantity["value"]
    variable = {"driver": driver, "attributes": attributes, "capacity": capacity}
    return celpy.adapter.json_to_cel(variable)


def _selected(device_class: cr.Obj, devices: tuple[Mapping[str, Any], ...]) -> list[str]:
    env = celpy.Environment()
    programs = [
        env.program(env.compile(selector["cel"]["expression"]))
        for selector in device_class["spec"]["selectors"]
    ]
    return sorted(
        str(device["name"])
        for device in devices
        if all(
            bool(p.evaluate({"device": _device_variable(device, driver=names.DRIVER_NAME)}))
            for p in programs
        )
    )


def _published(values: cr.Obj) -> tuple[Mapping[str, Any], ...]:
    imex = values.get("resources", {}).get("computeDomains", {}).get("imex", {})
    config = modes.resolve_driver_config(
        mode=imex.get("mode", ""), isolation=imex.get("isolation", ""),
        feature_gates=values.get("featureGates", {}), namespace=cr.NAMESPACE,
    ).config
    return slice_devices.plan_slice_devices(config)


@pytest.mark.parametrize(
    ("values", "daemon_selected"),
    [({}, ["daemon-0"]), (cr.host_managed(), None)],
    ids=["driverManaged", "hostManaged"],
)
def test_device_classes_select_exactly_channel_0_and_daemon_0_only_when_driver_managed(
    values: cr.Obj, daemon_selected: list[str] | None
) -> None:
    objects = cr.render(values)
    devices = _published(values)
    channel_class = cr.one(objects, "DeviceClass", names.CHANNEL_DEVICE_CLASS)
    assert _selected(channel_class, devices) == ["channel-0"]
    daemon_classes = cr.find(objects, "DeviceClass", names.DAEMON_DEVICE_CLASS)
    if daemon_selected is None:
        assert daemon_classes == []
        assert "daemon-0" not in {d["name"] for d in devices}
    else:
        assert _selected(daemon_classes[0], devices) == daemon_selected


def test_channel_class_rejects_other_channels_and_other_drivers() -> None:
    channel_class = cr.one(cr.render({}), "DeviceClass", names.CHANNEL_DEVICE_CLASS)
    env = celpy.Environment()
    (selector,) = channel_class["spec"]["selectors"]
    program = env.program(env.compile(selector["cel"]["expression"]))

    def matches(device: Mapping[str, Any], driver: str = names.DRIVER_NAME) -> bool:
        return bool(program.evaluate({"device": _device_variable(device, driver=driver)}))

    def channel(channel_id: int) -> cr.Obj:
        attributes = {"type": {"string": "channel"}, "id": {"int": channel_id}}
        return {"name": f"channel-{channel_id}", "attributes": attributes}

    channel_7, channel_0 = channel(7), channel(0)
    qualified = {"name": "channel-0", "attributes": {
        f"{names.DRIVER_NAME}/type": {"string": "channel"}, f"{names.DRIVER_NAME}/id": {"int": 0},
    }}
    assert not matches(channel_7)
    assert not matches(channel_0, driver="gpu.nvidia.com")
    assert matches(channel_0)
    assert matches(qualified)


# ---------------------------------------------------------------- admission policy

PLUGIN_SA = (
    f"system:serviceaccount:{cr.NAMESPACE}:{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin"
)
NODE_KEY = "authentication.kubernetes.io/node-name"
SLICE_POLICY = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin-resourceslices"


def _admit(
    request: Mapping[str, Any], obj: Any, old: Any, *, values: cr.Obj | None = None
) -> str | None:
    """Run the policy like the API server: None = allowed (or not matched), else the denial."""
    policy = cr.one(cr.render(values or {}), "ValidatingAdmissionPolicy", SLICE_POLICY)["spec"]
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": celpy.adapter.json_to_cel(dict(request)),
        "object": celpy.adapter.json_to_cel(obj),
        "oldObject": celpy.adapter.json_to_cel(old),
    }

    def run(expression: str) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    if not all(bool(run(c["expression"])) for c in policy["matchConditions"]):
        return None
    variables = {v["name"]: run(v["expression"]) for v in policy["variables"]}
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    for validation in policy["validations"]:
        if not bool(run(validation["expression"])):
            if "messageExpression" in validation:
                return str(run(validation["messageExpression"]))
            return str(validation["message"])
    return None


def _request(operation: str, *, user: str = PLUGIN_SA, node: str | None = "node-a") -> cr.Obj:
    extra = {NODE_KEY: [node]} if node is not None else {}
    return {"operation": operation, "userInfo": {"username": user, "extra": extra}}


def _slice(node: str, driver: str = names.DRIVER_NAME) -> cr.Obj:
    return {"spec": {"nodeName": node, "driver": driver}}


def test_plugin_may_write_its_own_nodes_slice() -> None:
    assert _admit(_request("CREATE"), _slice("node-a"), None) is None
    assert _admit(_request("UPDATE"), _slice("node-a"), _slice("node-a")) is None
    assert _admit(_request("DELETE"), None, _slice("node-a")) is None


def test_plugin_may_not_write_or_delete_another_nodes_slice() -> None:
    denial = _admit(_request("CREATE"), _slice("node-b"), None)
    assert denial is not None and "node-a" in denial and "node-b" in denial
    assert _admit(_request("DELETE"), None, _slice("node-b")) is not None
    assert _admit(_request("CREATE"), {"spec": {"allNodes": True}}, None) is not None


@pytest.mark.parametrize(
    "values",
    [
        {"resources": {"gpus": {"enabled": True}}},
        {"resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}},
    ],
    ids=["both-halves", "gpus-only"],
)
def test_gpu_plugin_may_write_its_own_nodes_gpu_slices_and_no_other_nodes(
    values: cr.Obj,
) -> None:
    # The GPU container runs under the same ServiceAccount: the policy binds by node, not driver.
    own, other = _slice("node-a", "gpu.nvidia.com"), _slice("node-b", "gpu.nvidia.com")
    assert _admit(_request("CREATE"), own, None, values=values) is None
    assert _admit(_request("UPDATE"), own, own, values=values) is None
    assert _admit(_request("DELETE"), None, own, values=values) is None
    denial = _admit(_request("CREATE"), other, None, values=values)
    assert denial is not None and "node-b" in denial
    assert _admit(_request("DELETE"), None, other, values=values) is not None


def test_plugin_token_without_node_is_denied() -> None:
    denial = _admit(_request("CREATE", node=None), _slice("node-a"), None)
    assert denial is not None and "names no node" in denial


def test_policy_ignores_other_users() -> None:
    other = _request("CREATE", user="system:serviceaccount:kube-system:other", node=None)
    assert _admit(other, _slice("node-b"), None) is None


def test_a_static_token_without_user_extra_gets_the_policys_own_message() -> None:
    # Static tokens and client certificates carry no `extra` at all, not even an empty map.
    request = {"operation": "CREATE", "userInfo": {"username": PLUGIN_SA}}
    denial = _admit(request, _slice("node-a"), None)
    assert denial is not None and "names no node" in denial


# ---------------------------------------------------------------- ComputeDomain warnings

CD_POLICY = f"{cr.RELEASE}-compute-domain-dra-driver-controller-computedomains"


def _warnings(values: Mapping[str, Any], cd: Mapping[str, Any]) -> list[str]:
    """Run the ComputeDomain policy as the API server would: the messages it warns with."""
    objects = cr.render(dict(values))
    policy = cr.one(objects, "ValidatingAdmissionPolicy", CD_POLICY)["spec"]
    assert cr.one(objects, "ValidatingAdmissionPolicyBinding", CD_POLICY)["spec"][
        "validationActions"] == ["Warn"], "the CRD's compatibility forbids refusing these"
    env = celpy.Environment()
    activation: dict[str, Any] = {"object": celpy.adapter.json_to_cel(dict(cd))}

    def run(expression: str) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(v["name"]): run(v["expression"]) for v in policy["variables"]}
    )
    return [str(run(v["messageExpression"])) for v in policy["validations"]
            if not bool(run(v["expression"]))]


def _cd(rct: str, num_nodes: int = 0) -> dict[str, Any]:
    return {"spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": rct}}}}


def test_a_compute_domain_with_a_bad_rct_name_or_absurd_num_nodes_gets_a_warning() -> None:
    assert _warnings({}, _cd("good-name.v1", 18)) == []
    [bad_name] = _warnings({}, _cd("Bad_Name"))
    assert '"Bad_Name" is not a valid object name' in bad_name
    assert _warnings({}, _cd("x" * 254))
    [huge] = _warnings({}, _cd("ok", 10**12))
    assert "1000000000000" in huge and "numNodes: 0" in huge


def test_host_managed_mode_does_not_warn_about_num_nodes_it_ignores() -> None:
    imex = {"mode": "hostManaged", "isolation": "none"}
    values = {"resources": {"computeDomains": {"imex": imex}},
              "featureGates": {"HostManagedIMEXDaemon": True}}
    assert _warnings(values, _cd("ok", 10**12)) == []
