"""core.admission.mutate: fabricTopologyConfig written into claims as constraints and selectors.

Covers: Auto with partitionSize gets `matchAttribute: gpu.nvidia.com/partition<N>` over the
config's requests (all of them when it names none), beside constraints already there; Manual
gets a CEL selector on each request it reaches, in the v1/v1beta2 (`exactly`, per
`firstAvailable` subrequest) and v1beta1 shapes, for claims and templates; applying the patch
and mutating again adds nothing (idempotent); nothing is patched without the config, for Auto
without partitionSize, Disabled, VGPU, a config that does not decode (gate off), other
drivers, UPDATE, other kinds or a malformed spec; a malformed review is a 400. The selector
itself is run by the CEL evaluator against the HGX GPUs' published attributes.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import celpy
import celpy.adapter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import admission, models
from core.computedomain import modes
from core.gpu import fabric_constraints, fm_partitions


def driver_config(gates: str) -> models.DriverConfig:
    return modes.resolve_driver_config(
        mode="driverManaged", isolation="", feature_gates=gates, namespace="nvidia-dra-driver"
    ).config


ON = driver_config("FabricTopologySupport=true,FabricManagerPartitioning=true")
OFF = driver_config("FabricManagerPartitioning=true")


def gpu_config(topology: Any | None, *, requests: list[str] | None = None) -> dict[str, Any]:
    parameters: dict[str, Any] = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    if topology is not None:
        parameters["fabricTopologyConfig"] = topology
    entry: dict[str, Any] = {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def v1_request(name: str = "gpus", count: int = 4, **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com",
                                       "allocationMode": "ExactCount", "count": count, **exactly}}


def claim(*configs: Any, requests: list[Any] | None = None, **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"devices": {"requests": requests or [v1_request()], "config": list(configs),
                             **devices}},
    }


def request_for(obj: Any, *, kind: str = "ResourceClaim", version: str = "v1",
                operation: str = "CREATE") -> dict[str, Any]:
    return {"uid": "u-1", "kind": {"group": "resource.k8s.io", "version": version, "kind": kind},
            "namespace": "ml", "name": "train", "operation": operation, "object": obj}


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


def apply(obj: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 `add` (the only operation the webhook writes), on a copy."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = op["path"].lstrip("/").split("/")
        node = out
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if last == "-":
            node.append(op["value"])
        else:
            node[last] = op["value"]
    return out


AUTO_4 = {"strategy": "Auto", "partitionSize": 4}
CONSTRAINT_4 = {"matchAttribute": "gpu.nvidia.com/partition4", "requests": ["gpus"]}


def test_auto_with_a_partition_size_gets_a_match_attribute_constraint_over_its_requests() -> None:
    obj = claim(gpu_config(AUTO_4, requests=["gpus"]))
    response = admission.mutate(request_for(obj), config=ON)
    assert response["uid"] == "u-1"
    assert patch_of(response) == [
        {"op": "add", "path": "/spec/devices/constraints", "value": [CONSTRAINT_4]}]


def test_mutating_the_mutated_claim_adds_nothing() -> None:
    obj = claim(gpu_config(AUTO_4, requests=["gpus"]))
    mutated = apply(obj, patch_of(admission.mutate(request_for(obj), config=ON)))
    assert admission.mutate(request_for(mutated), config=ON) == {"uid": "u-1", "allowed": True}


def test_a_constraint_written_by_hand_is_not_duplicated() -> None:
    obj = claim(gpu_config(AUTO_4, requests=["gpus"]),
                constraints=[{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/partition4"}])
    assert admission.mutate(request_for(obj), config=ON) == {"uid": "u-1", "allowed": True}


def test_the_constraint_is_appended_beside_other_constraints() -> None:
    other = {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
    obj = claim(gpu_config(AUTO_4, requests=["gpus"]), constraints=[other])
    assert patch_of(admission.mutate(request_for(obj), config=ON)) == [
        {"op": "add", "path": "/spec/devices/constraints/-", "value": CONSTRAINT_4}]


def test_a_config_naming_no_requests_constrains_them_all() -> None:
    obj = claim(gpu_config({"partitionSize": 8}))
    assert patch_of(admission.mutate(request_for(obj), config=ON)) == [
        {"op": "add", "path": "/spec/devices/constraints",
         "value": [{"matchAttribute": "gpu.nvidia.com/partition8"}]}]


def test_full_passthrough_is_constrained_too_since_the_guest_needs_a_partition() -> None:
    obj = claim(gpu_config({**AUTO_4, "virtualizationModel": "FullPassthrough"}))
    assert len(patch_of(admission.mutate(request_for(obj), config=ON))) == 1


def test_a_template_is_mutated_at_its_spec_spec() -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "train", "namespace": "ml"},
                "spec": {"spec": claim(gpu_config(AUTO_4, requests=["gpus"]))["spec"]}}
    response = admission.mutate(request_for(template, kind="ResourceClaimTemplate"), config=ON)
    assert patch_of(response) == [
        {"op": "add", "path": "/spec/spec/devices/constraints", "value": [CONSTRAINT_4]}]


MANUAL = {"strategy": "Manual", "partitionSize": 4, "partitionIDs": [2]}
SELECTOR_2 = {"cel": {"expression": (
    'has(device.attributes["gpu.nvidia.com"].partition4) && '
    'device.attributes["gpu.nvidia.com"].partition4 in [2]')}}


def test_manual_gets_a_selector_on_its_requests_in_the_v1_shape() -> None:
    selector = {"cel": {"expression": "(" + SELECTOR_2["cel"]["expression"] + ")"}}
    other = v1_request("other", selectors=[{"cel": {"expression": "x"}}])
    obj = claim(gpu_config(MANUAL, requests=["gpus"]), requests=[v1_request(), other])
    assert patch_of(admission.mutate(request_for(obj), config=ON)) == [
        {"op": "add", "path": "/spec/devices/requests/0/exactly/selectors", "value": [selector]}]
    mutated = apply(obj, patch_of(admission.mutate(request_for(obj), config=ON)))
    assert admission.mutate(request_for(mutated), config=ON)["allowed"] is True
    assert "patch" not in admission.mutate(request_for(mutated), config=ON)


def test_manual_appends_to_selectors_already_there_and_reaches_every_request_by_default() -> None:
    obj = claim(gpu_config(MANUAL),
                requests=[v1_request(selectors=[{"cel": {"expression": "true"}}]), v1_request("b")])
    ops = patch_of(admission.mutate(request_for(obj), config=ON))
    assert [op["path"] for op in ops] == [
        "/spec/devices/requests/0/exactly/selectors/-",
        "/spec/devices/requests/1/exactly/selectors",
    ]


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_manual_selects_on_each_first_available_subrequest_it_reaches(version: str) -> None:
    sub = {"deviceClassName": "gpu.nvidia.com", "count": 4}
    request = {"name": "gpus", "firstAvailable": [{"name": "big", **sub}, {"name": "small", **sub}]}
    every = claim(gpu_config(MANUAL, requests=["gpus"]), requests=[request])
    paths = [op["path"] for op in
             patch_of(admission.mutate(request_for(every, version=version), config=ON))]
    assert paths == ["/spec/devices/requests/0/firstAvailable/0/selectors",
                     "/spec/devices/requests/0/firstAvailable/1/selectors"]
    one = claim(gpu_config(MANUAL, requests=["gpus/small"]), requests=[request])
    paths = [op["path"] for op in
             patch_of(admission.mutate(request_for(one, version=version), config=ON))]
    assert paths == ["/spec/devices/requests/0/firstAvailable/1/selectors"]


def test_manual_selects_on_the_request_itself_in_the_v1beta1_shape() -> None:
    request = {"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": 4}
    obj = claim(gpu_config(MANUAL, requests=["gpus"]), requests=[request])
    obj["apiVersion"] = "resource.k8s.io/v1beta1"
    paths = [op["path"] for op in
             patch_of(admission.mutate(request_for(obj, version="v1beta1"), config=ON))]
    assert paths == ["/spec/devices/requests/0/selectors"]


def test_two_configs_on_one_request_add_one_array_then_append() -> None:
    other = {"strategy": "Manual", "partitionIDs": [1, "3"]}
    obj = claim(gpu_config(MANUAL, requests=["gpus"]), gpu_config(other, requests=["gpus"]))
    ops = patch_of(admission.mutate(request_for(obj), config=ON))
    assert [op["path"] for op in ops] == [
        "/spec/devices/requests/0/exactly/selectors",
        "/spec/devices/requests/0/exactly/selectors/-"]
    assert ops[1]["value"]["cel"]["expression"].count("in [1, 3]") == 4


@pytest.mark.parametrize(
    "entry",
    [
        gpu_config(None),
        gpu_config({"strategy": "Auto"}),
        gpu_config({"strategy": "Disabled"}),
        gpu_config({**AUTO_4, "virtualizationModel": "VGPU"}),
        gpu_config({"strategy": "Manual", "partitionIDs": [2], "virtualizationModel": "VGPU"}),
        gpu_config({"strategy": "Bogus", "partitionSize": 4}),
        {"opaque": {"driver": "other.example.com",
                    "parameters": {"fabricTopologyConfig": AUTO_4}}},
        {**gpu_config(AUTO_4), "requests": "gpus"},
        "not an object",
    ],
    ids=["no-topology", "auto-without-size", "disabled", "vgpu", "vgpu-manual", "bad-config",
         "other-driver", "bad-requests", "bad-entry"],
)
def test_nothing_is_patched_where_the_config_implies_no_constraint(entry: Any) -> None:
    assert admission.mutate(request_for(claim(entry)), config=ON) == {
        "uid": "u-1", "allowed": True}


def test_without_the_gate_nothing_is_patched_the_validating_endpoint_refuses_it() -> None:
    obj = claim(gpu_config(AUTO_4))
    assert admission.mutate(request_for(obj), config=OFF) == {"uid": "u-1", "allowed": True}
    denied = admission.review(request_for(obj), config=OFF)
    assert denied["allowed"] is False
    assert "needs feature gate FabricTopologySupport" in denied["status"]["message"]


@pytest.mark.parametrize(
    "request_",
    [
        request_for(claim(gpu_config(AUTO_4)), operation="UPDATE"),
        request_for(claim(gpu_config(AUTO_4)), kind="Pod"),
        {**request_for(claim(gpu_config(AUTO_4))),
         "kind": {"group": "", "version": "v1", "kind": "ResourceClaim"}},
        request_for({"spec": {"devices": "nope"}}),
        request_for({"spec": {"devices": {"config": [gpu_config(AUTO_4)], "requests": {}}}}),
        request_for({"spec": []}),
    ],
    ids=["update", "other-kind", "other-group", "devices-not-object", "requests-not-list",
         "spec-not-object"],
)
def test_other_requests_are_allowed_unchanged(request_: dict[str, Any]) -> None:
    assert admission.mutate(request_, config=ON) == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ("x", "AdmissionReview.request must be a JSON object"),
        ({"kind": {}}, "AdmissionReview.request.uid must be a non-empty string"),
        ({"uid": "u", "kind": []}, "AdmissionReview.request.kind must be an object"),
        ({"uid": "u", "kind": {"group": 1}},
         "AdmissionReview.request.kind.group and .kind must be strings"),
        ({"uid": "u", "kind": {"group": "resource.k8s.io", "kind": "ResourceClaim"}},
         "AdmissionReview.request.operation must be a string"),
        ({"uid": "u", "kind": {"group": "resource.k8s.io", "kind": "ResourceClaim"},
          "operation": "CREATE", "object": None},
         "AdmissionReview.request.object must be the ResourceClaim to admit, got null"),
    ],
)
def test_a_malformed_request_is_a_bad_request(request_: Any, message: str) -> None:
    response = admission.mutate(request_, config=ON)
    assert response["allowed"] is False
    assert response["status"] == {"code": 400, "reason": "BadRequest", "message": message}


def test_the_document_endpoint_wraps_the_response_in_an_admission_review() -> None:
    document = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": request_for(claim(gpu_config(AUTO_4)))}
    reply = admission.mutate_document(document, config=ON)
    assert (reply["apiVersion"], reply["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert patch_of(reply["response"])[0]["path"] == "/spec/devices/constraints"
    wrong = admission.mutate_document({**document, "apiVersion": "admission.k8s.io/v1beta1"},
                                      config=ON)
    assert wrong["response"]["status"]["message"].endswith(
        'set admissionReviewVersions: ["v1"] in the webhook configuration')


# ---------------------------------------------------------------- properties

TOPOLOGIES = st.one_of(
    st.fixed_dictionaries({"strategy": st.just("Auto"),
                           "partitionSize": st.sampled_from([2, 4, 8])}),
    st.fixed_dictionaries({"strategy": st.just("Manual"),
                           "partitionIDs": st.lists(st.integers(0, 14), min_size=1,
                                                    max_size=3, unique=True)}),
    st.fixed_dictionaries({"strategy": st.sampled_from(["Auto", "Disabled"])}),
)
REQUEST_NAMES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)


@st.composite
def claims(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A claim of random requests (plain, or firstAvailable) and fabric configs, and its
    API version."""
    version = draw(st.sampled_from(["v1", "v1beta2", "v1beta1"]))
    requests = []
    for name in draw(REQUEST_NAMES):
        if draw(st.booleans()):
            subs = [{"name": s, "deviceClassName": "gpu.nvidia.com"} for s in ("x", "y")]
            requests.append({"name": name, "firstAvailable": subs})
        elif version == "v1beta1":
            requests.append({"name": name, "deviceClassName": "gpu.nvidia.com", "count": 2})
        else:
            requests.append(v1_request(name, count=2))
    names = [r["name"] for r in requests]
    configs = [
        gpu_config(draw(TOPOLOGIES), requests=draw(st.one_of(
            st.none(), st.lists(st.sampled_from(names), max_size=2, unique=True))))
        for _ in range(draw(st.integers(1, 3)))
    ]
    return claim(*configs, requests=requests), version


@settings(max_examples=150)
@given(drawn=claims())
def test_mutating_a_mutated_claim_adds_nothing(drawn: tuple[dict[str, Any], str]) -> None:
    obj, version = drawn
    response = admission.mutate(request_for(obj, version=version), config=ON)
    mutated = apply(obj, patch_of(response)) if "patch" in response else obj
    assert admission.mutate(request_for(mutated, version=version), config=ON) == {
        "uid": "u-1", "allowed": True}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12,
)


@settings(max_examples=200)
@given(devices=JSON, version=st.sampled_from(["v1", "v1beta1", "x"]))
def test_any_json_in_the_spec_is_answered_without_raising(devices: Any, version: str) -> None:
    response = admission.mutate(request_for({"spec": {"devices": devices}}, version=version),
                                config=ON)
    assert response["allowed"] is True


# ---------------------------------------------------------------- the selector, evaluated


def _hgx_device(module_id: int) -> Any:
    attributes = fm_partitions.published_attributes(module_id, fm_partitions.HGX_8GPU_PARTITIONS)
    return celpy.adapter.json_to_cel(
        {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": attributes}})


def _selected(expression: str) -> list[int]:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    chosen = []
    for module_id in range(1, 9):
        result = program.evaluate({"device": _hgx_device(module_id)})
        assert isinstance(result, celpy.celtypes.BoolType), result
        if result:
            chosen.append(module_id)
    return chosen


@pytest.mark.parametrize(
    ("ids", "size", "modules"),
    [((3,), 4, [3, 4, 7, 8]), ((4, 7), None, [1, 3, 6, 8]), ((1,), None, list(range(1, 9))),
     ((10,), None, [3]), ((1,), 2, [])],
)
def test_the_selector_admits_exactly_the_gpus_of_the_listed_partitions(
    ids: tuple[int, ...], size: int | None, modules: list[int],
) -> None:
    assert _selected(fabric_constraints.partition_selector(ids, size=size)) == modules


def test_the_selector_is_false_not_an_error_on_a_device_without_partitions() -> None:
    env = celpy.Environment()
    program = env.program(env.compile(fabric_constraints.partition_selector((1,), size=None)))
    bare = celpy.adapter.json_to_cel(
        {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": {"type": "gpu"}}})
    assert program.evaluate({"device": bare}) == celpy.celtypes.BoolType(False)
