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
