"""`core.upstream_checkpoint`: the checksum, who wrote a file, and what a V1-only file holds."""

from __future__ import annotations

import pytest

from core import checkpoint, errors, models, upstream_checkpoint
from core.computedomain import checkpoint_records as cd_records


def test_the_checksum_is_the_kubelet_checkpoint_managers() -> None:
    # Values printed by upstream's vendored checkpointmanager/checksum.New([]byte(...)).
    assert upstream_checkpoint.go_checksum(b"ab") == 72496377
    assert upstream_checkpoint.go_checksum(b'{"checksum":0}') == 4166374854


def test_origin_tells_ours_from_upstreams() -> None:
    ours = checkpoint.encode(cd_records.empty(boot_id="b"))
    assert upstream_checkpoint.origin(ours) is upstream_checkpoint.Origin.OURS
    upstream = b'{"checksum":4166374854}'
    assert upstream_checkpoint.origin(b'{"checksum":1,"v1":{}}') is (
        upstream_checkpoint.Origin.UPSTREAM)
    for other in (b"", b"[]", b"not json", upstream, b'{"checksum":"ab","v1":{}}'):
        assert upstream_checkpoint.origin(other) is upstream_checkpoint.Origin.UNKNOWN


def _v1_only(claims: str) -> bytes:
    v1 = '{"preparedClaims":{' + claims + "}}"
    top = upstream_checkpoint.go_checksum(('{"checksum":0,"v1":' + v1 + "}").encode())
    return f'{{"checksum":{top},"v1":{v1}}}'.encode()


def test_a_v1_only_file_holds_prepare_completed_claims() -> None:
    data = _v1_only('"u1":{"status":{},"preparedDevices":[{"devices":[{"channel":{"info":'
                    '{"id":4},"device":{"Requests":["r"],"PoolName":"p","DeviceName":"channel-4",'
                    '"CDIDeviceIDs":["k8s.compute-domain.nvidia.com/claim=u1-channel-4"]}},'
                    '"daemon":null}],"configState":{"Type":"t","ComputeDomain":"d"}}]}')
    decoded = upstream_checkpoint.decode(data)
    assert decoded.boot_id == ""
    (claim,) = decoded.claims
    assert claim.state is models.ClaimState.PREPARE_COMPLETED
    (device,) = claim.devices
    assert (device.kind, dict(device.info)) == ("channel", {"id": 4})
    assert device.device.cdi_device_ids == ("k8s.compute-domain.nvidia.com/claim=u1-channel-4",)


def test_a_changed_byte_fails_the_checksum() -> None:
    data = _v1_only('"u1":{"status":{}}')
    upstream_checkpoint.decode(data)
    with pytest.raises(errors.CheckpointCorruptError):
        upstream_checkpoint.decode(data.replace(b'"u1"', b'"u2"'))


# ---------------------------------------------------------------- older formats
#
# Written from upstream's Go types, not copied: releases 25.3.0-rc.1/rc.2 wrote
# `{"checksum", "v1": {"preparedClaims": {uid: [group, ...]}}}` with the kubelet's
# protobuf `Device` (json tags `request_names`, `pool_name`, `device_name`, `cdi_device_ids`);
# rc.3 to 25.3.x wrote the V1 claim object (`status`, `preparedDevices`) alone, a MIG device's
# details under `info` (later releases: `concrete`).


def test_a_2503rc2_file_is_read_with_its_protobuf_device_fields() -> None:
    data = _v1_only('"u1":[{"devices":[{"channel":{"info":{"id":0},"device":{"request_names":'
                    '["channel"],"pool_name":"node-a","device_name":"channel-0","cdi_device_ids":'
                    '["k8s.compute-domain.nvidia.com/claim=u1-channel-0"]}},"daemon":null}],'
                    '"configState":{"Type":"ComputeDomainChannelConfig","ComputeDomain":"d"}}]')
    decoded = upstream_checkpoint.decode(data)
    assert decoded.format is upstream_checkpoint.Format.RC2503
    (claim,) = decoded.claims
    assert (claim.state, claim.namespace, claim.name) == (
        models.ClaimState.PREPARE_COMPLETED, "", "")
    (device,) = claim.devices
    assert device.device == models.PreparedDevice(
        request_names=("channel",), pool_name="node-a", device_name="channel-0",
        cdi_device_ids=("k8s.compute-domain.nvidia.com/claim=u1-channel-0",))
    assert (device.kind, dict(device.info), device.config_state["ComputeDomain"]) == (
        "channel", {"id": 0}, "d")


def test_a_2503rc2_file_with_a_changed_byte_is_refused_with_what_to_do() -> None:
    data = _v1_only('"u1":[{"devices":[],"configState":{"Type":"t","ComputeDomain":"d"}}]')
    upstream_checkpoint.decode(data)
    with pytest.raises(errors.CheckpointCorruptError) as caught:
        upstream_checkpoint.decode(data.replace(b'"t"', b'"x"'))
    assert "checksum" in caught.value.message
    assert "drain" in caught.value.message  # says what to do about the claims it held


def test_a_file_of_no_known_shape_is_refused_naming_the_formats_read() -> None:
    data = _v1_only('"u1":"what"')
    with pytest.raises(errors.CheckpointCorruptError) as caught:
        upstream_checkpoint.decode(data)
    assert "25.3.0-rc.2" in caught.value.message and "drain" in caught.value.message


def test_formats_are_told_apart() -> None:
    assert upstream_checkpoint.decode(_v1_only('"u1":{"status":{}}')).format is (
        upstream_checkpoint.Format.V1)
    assert upstream_checkpoint.decode(_v1_only("")).format is upstream_checkpoint.Format.V1


def test_a_v1_mig_device_keeps_its_details_under_info() -> None:
    data = _v1_only('"u1":{"status":{},"preparedDevices":[{"devices":[{"gpu":null,"mig":{"info":'
                    '{"uuid":"MIG-1"},"device":{"Requests":["r"],"PoolName":"p","DeviceName":'
                    '"gpu-0-mig-1g.10gb-0-1","CDIDeviceIDs":[]}}}],"configState":'
                    '{"mpsControlDaemonID":""}}]}')
    (claim,) = upstream_checkpoint.decode(data).claims
    (device,) = claim.devices
    assert (device.kind, dict(device.info)) == ("mig", {"uuid": "MIG-1"})
