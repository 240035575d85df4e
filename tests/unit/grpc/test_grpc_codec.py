"""Proto <-> core translation of the kubelet API, and the wire facts the kubelet depends on.

Covers: claim/device/result round trips (property-based), errors dropping devices, v1beta1
conversion, registration info and version choice, and the descriptor names and field numbers that
make the method paths and wire format of Kubernetes 1.34+.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from adapters.grpc import _codec
from adapters.grpc.generated import (
    dra_health_v1_pb2,
    dra_health_v1alpha1_pb2,
    dra_health_v1beta1_pb2,
    dra_v1_pb2,
    dra_v1beta1_pb2,
    pluginregistration_v1_pb2,
)
from core import device_health, models, names

text = st.text(max_size=12)
uids = st.text(min_size=1, max_size=12).map(names.ClaimUID)
refs = st.builds(models.ClaimRef, uid=uids, namespace=text, name=text)
devices = st.builds(
    models.PreparedDevice,
    request_names=st.lists(text, max_size=3).map(tuple),
    pool_name=text,
    device_name=text,
    cdi_device_ids=st.lists(text, max_size=3).map(tuple),
)
results = st.one_of(
    st.builds(models.ClaimResult, devices=st.lists(devices, max_size=3).map(tuple)),
    st.builds(models.ClaimResult, error=st.text(min_size=1, max_size=20)),
)
result_maps = st.dictionaries(uids, results, max_size=5)


@given(st.lists(refs, max_size=5).map(tuple))
def test_claim_refs_round_trip_in_request_order(claims: tuple[models.ClaimRef, ...]) -> None:
    request = _codec.prepare_request_to_pb(claims)
    assert _codec.claim_refs_from_pb(request.claims) == claims


@given(result_maps)
def test_prepare_results_round_trip(mapping: dict[names.ClaimUID, models.ClaimResult]) -> None:
    assert _codec.prepare_response_from_pb(_codec.prepare_response_to_pb(mapping)) == mapping


@given(result_maps)
def test_prepare_results_survive_the_v1beta1_wire(
    mapping: dict[names.ClaimUID, models.ClaimResult],
) -> None:
    beta = _codec.convert(
        _codec.prepare_response_to_pb(mapping), dra_v1beta1_pb2.NodePrepareResourcesResponse
    )
    back = _codec.convert(beta, dra_v1_pb2.NodePrepareResourcesResponse)
    assert _codec.prepare_response_from_pb(back) == mapping


@given(st.dictionaries(uids, st.builds(models.ClaimResult, error=text), max_size=5))
def test_unprepare_results_round_trip(mapping: dict[names.ClaimUID, models.ClaimResult]) -> None:
    assert _codec.unprepare_response_from_pb(_codec.unprepare_response_to_pb(mapping)) == mapping


def test_errored_claim_carries_only_its_error() -> None:
    device = models.PreparedDevice(
        request_names=("channel",), pool_name="n1", device_name="channel-0", cdi_device_ids=("x",)
    )
    result = models.ClaimResult(devices=(device,), error="no clique on this node")
    response = _codec.prepare_response_to_pb({names.ClaimUID("u1"): result})
    assert response.claims["u1"].error == "no clique on this node"
    assert list(response.claims["u1"].devices) == []


def test_device_fields_map_one_to_one() -> None:
    device = models.PreparedDevice(
        request_names=("channel",),
        pool_name="node-a",
        device_name="channel-0",
        cdi_device_ids=("k8s.compute-domain.nvidia.com/claim=u1-channel-0",),
    )
    pb = _codec.device_to_pb(device)
    assert list(pb.request_names) == ["channel"]
    assert pb.pool_name == "node-a"
    assert pb.device_name == "channel-0"
    assert list(pb.cdi_device_ids) == ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"]


def test_failed_results_give_every_claim_the_same_error() -> None:
    claims = (
        models.ClaimRef(uid=names.ClaimUID("a"), namespace="ns", name="x"),
        models.ClaimRef(uid=names.ClaimUID("b"), namespace="ns", name="y"),
    )
    assert _codec.failed_results(claims, error="boom") == {
        "a": models.ClaimResult(error="boom"),
        "b": models.ClaimResult(error="boom"),
    }


def test_empty_results_give_an_empty_response() -> None:
    assert _codec.prepare_response_to_pb({}).SerializeToString() == b""
    assert _codec.unprepare_response_to_pb({}).SerializeToString() == b""


def test_plugin_info_advertises_v1_before_v1beta1() -> None:
    info = _codec.plugin_info_to_pb(driver_name="compute-domain.nvidia.com", endpoint="/p/dra.sock")
    assert info.type == "DRAPlugin"
    assert info.name == "compute-domain.nvidia.com"
    assert info.endpoint == "/p/dra.sock"
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_choose_version_prefers_the_first_spoken_version_advertised() -> None:
    spoken = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert _codec.choose_version(["v1beta1.DRAPlugin", "v1.DRAPlugin"], spoken=spoken) == (
        "v1.DRAPlugin"
    )
    assert _codec.choose_version(["v1beta1.DRAPlugin"], spoken=spoken) == "v1beta1.DRAPlugin"
    assert _codec.choose_version(["v1beta1"], spoken=spoken) == "v1beta1.DRAPlugin"
    assert _codec.choose_version(["v1alpha4.DRAPlugin"], spoken=spoken) is None


def _fields(descriptor: object) -> dict[str, int]:
    return {f.name: f.number for f in descriptor.fields}  # type: ignore[attr-defined]


def test_dra_services_have_the_kubelet_method_paths() -> None:
    for module, package in (
        (dra_v1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1"),
        (dra_v1beta1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1beta1"),
    ):
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert service.full_name == f"{package}.DRAPlugin"
        assert sorted(m.name for m in service.methods) == [
            "NodePrepareResources",
            "NodeUnprepareResources",
        ]


def test_dra_messages_have_the_upstream_field_numbers() -> None:
    for module in (dra_v1_pb2, dra_v1beta1_pb2):
        assert _fields(module.Claim.DESCRIPTOR) == {"namespace": 1, "uid": 2, "name": 3}
        shares = {"share_id": 5} if module is dra_v1_pb2 else {}  # v1 only, as upstream
        assert _fields(module.Device.DESCRIPTOR) == {
            "request_names": 1,
            "pool_name": 2,
            "device_name": 3,
            "cdi_device_ids": 4,
            **shares,
        }
        assert _fields(module.NodePrepareResourceResponse.DESCRIPTOR) == {"devices": 1, "error": 2}
        assert _fields(module.NodeUnprepareResourceResponse.DESCRIPTOR) == {"error": 1}
        for name in ("NodePrepareResourcesRequest", "NodeUnprepareResourcesRequest"):
            assert _fields(getattr(module, name).DESCRIPTOR) == {"claims": 1}
        for name in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
            assert _fields(getattr(module, name).DESCRIPTOR) == {"claims": 1}


def test_registration_and_health_have_the_upstream_names_and_numbers() -> None:
    registration = pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert registration.full_name == "pluginregistration.Registration"
    assert _fields(pluginregistration_v1_pb2.PluginInfo.DESCRIPTOR) == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert _fields(pluginregistration_v1_pb2.RegistrationStatus.DESCRIPTOR) == {
        "plugin_registered": 1,
        "error": 2,
    }
    for module, package in (
        (dra_health_v1alpha1_pb2, "v1alpha1"),
        (dra_health_v1beta1_pb2, "v1beta1"),
        (dra_health_v1_pb2, "v1"),
    ):
        watch = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
        assert watch.full_name == f"{package}.DRAResourceHealth"
        assert watch.methods_by_name["NodeWatchResources"].server_streaming
        # 4 and 5 arrived in 1.36, in v1alpha1 too.
        assert _fields(module.DeviceHealth.DESCRIPTOR) == {
            "device": 1,
            "health": 2,
            "last_updated_time": 3,
            "health_check_timeout_seconds": 4,
            "message": 5,
        }
        assert _fields(module.DeviceIdentifier.DESCRIPTOR) == {"pool_name": 1, "device_name": 2}
        assert _fields(module.NodeWatchResourcesResponse.DESCRIPTOR) == {"devices": 1}
        assert dict(module.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_health_list_round_trips_and_reads_the_same_in_every_version() -> None:
    entries = device_health.plan_device_health(
        pool="node-a", published=("gpu-1", "gpu-0"),
        observed={"gpu-0": device_health.Observation(
            status=device_health.HealthStatus.UNHEALTHY, message="XID 79")},
        now_s=1_700_000_000,
    )
    pb = _codec.health_response_to_pb(entries)
    assert _codec.health_response_from_pb(pb) == entries
    for module in (dra_health_v1alpha1_pb2, dra_health_v1beta1_pb2):
        other = _codec.convert(pb, module.NodeWatchResourcesResponse)
        assert [(d.device.device_name, module.HealthStatus.Name(d.health), d.message)
                for d in other.devices] == [
            ("gpu-0", "UNHEALTHY", "XID 79"), ("gpu-1", "UNKNOWN",
                                              device_health.NOT_OBSERVED_MESSAGE)]


def test_health_versions_are_advertised_after_the_dra_versions() -> None:
    info = _codec.plugin_info_to_pb(
        driver_name="d", endpoint="/e",
        supported_versions=(*_codec.SUPPORTED_VERSIONS, *_codec.HEALTH_VERSIONS),
    )
    assert list(info.supported_versions) == [
        "v1.DRAPlugin", "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth", "v1beta1.DRAResourceHealth", "v1alpha1.DRAResourceHealth",
    ]


def test_a_shares_id_goes_to_the_kubelet_and_an_unshared_device_sends_none() -> None:
    shared = models.PreparedDevice(request_names=("gpu",), pool_name="node-a",
                                   device_name="gpu-0", cdi_device_ids=("k8s.x/claim=u-gpu-0",),
                                   share_id="7f3c0b5e-share")
    pb = _codec.device_to_pb(shared)
    assert pb.HasField("share_id") and pb.share_id == "7f3c0b5e-share"
    assert _codec.device_from_pb(pb) == shared
    plain = _codec.device_to_pb(dataclasses.replace(shared, share_id=""))
    assert not plain.HasField("share_id")
    # NB: a v1beta1 kubelet (no share_id) reads the same bytes without the field.
    assert _codec.convert(pb, dra_v1beta1_pb2.Device).device_name == "gpu-0"
