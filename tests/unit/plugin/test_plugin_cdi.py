"""CDI spec naming, device nodes and the minimum cdiVersion rules."""

from __future__ import annotations

from typing import Any

import pytest

from core import cdi, names

UID = "0a1b2c3d-1111-4222-8333-444455556666"


def test_claim_spec_has_one_device_node_per_channel() -> None:
    spec = cdi.claim_spec(claim_uid=UID, channel_ids=[3, 0, 3], major=242, domain_id="cd")
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{UID}-channel-0", f"{UID}-channel-3"]
    assert spec["devices"][1]["containerEdits"] == {
        "env": ["COMPUTE_DOMAIN_UUID=cd"],
        "deviceNodes": [
            {
                "path": "/dev/nvidia-caps-imex-channels/channel3",
                "type": "c",
                "major": 242,
                "minor": 3,
                "fileMode": 438,
            }
        ]
    }


def test_qualified_device_id_uses_vendor_class_and_device_name() -> None:
    assert cdi.qualified_device_id(UID, 0) == (
        f"k8s.compute-domain.nvidia.com/claim={UID}-channel-0"
    )


def test_spec_file_name_is_per_claim() -> None:
    assert names.cdi_spec_file_name(UID) == f"k8s.compute-domain.nvidia.com-claim_{UID}.json"


def test_claim_spec_needs_0_5_0_when_the_uid_starts_with_a_digit() -> None:
    spec = cdi.claim_spec(claim_uid=UID, channel_ids=[0], major=242, domain_id="cd")
    assert spec["cdiVersion"] == "0.5.0"


def test_claim_spec_uses_the_earliest_version_when_the_uid_starts_with_a_letter() -> None:
    spec = cdi.claim_spec(claim_uid="abc-uid", channel_ids=[0], major=242, domain_id="cd")
    assert spec["cdiVersion"] == "0.3.0"


def test_daemon_spec_tells_the_daemon_its_domain() -> None:
    spec = cdi.daemon_claim_spec(claim_uid="d-uid", domain_id="cd-1")
    assert spec["devices"] == [
        {"name": "d-uid-daemon", "containerEdits": {"env": ["COMPUTE_DOMAIN_UUID=cd-1"]}}
    ]
    assert spec["cdiVersion"] == "0.3.0"


def _dev(name: str = "dev", **edits: Any) -> dict[str, Any]:
    return {"name": name, "containerEdits": edits}


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        ({"kind": "v.com/c", "devices": [_dev()]}, "0.3.0"),
        ({"kind": "v.com/c", "devices": [_dev(mounts=[{"type": "bind"}])]}, "0.4.0"),
        ({"kind": "v.com/c", "devices": [_dev("0dev")]}, "0.5.0"),
        ({"kind": "v.com/c", "devices": [_dev("_dev")]}, "0.5.0"),
        ({"kind": "v.com/c", "devices": [_dev(deviceNodes=[{"hostPath": "/x"}])]}, "0.5.0"),
        ({"kind": "v.com/c", "devices": [], "containerEdits": {
            "deviceNodes": [{"path": "/x", "hostPath": "/y"}]}}, "0.5.0"),
        ({"kind": "v.com/c", "annotations": {"a": "b"}, "devices": [_dev()]}, "0.6.0"),
        ({"kind": "v.com/c", "devices": [{**_dev(), "annotations": {"a": "b"}}]}, "0.6.0"),
        ({"kind": "v.com/c.d", "devices": [_dev()]}, "0.6.0"),
        ({"kind": "v.com/c", "devices": [_dev(additionalGids=[5])]}, "0.7.0"),
        ({"kind": "v.com/c", "devices": [], "containerEdits": {"intelRdt": {}}}, "0.7.0"),
        ({"kind": "v.com/c", "devices": [_dev(intelRdt={"enableMonitoring": True})]}, "1.1.0"),
        ({"kind": "v.com/c", "devices": [_dev(netDevices=[{"name": "n"}])]}, "1.1.0"),
    ],
)
def test_minimum_cdi_version_follows_the_cdi_rules(spec: dict[str, Any], version: str) -> None:
    assert cdi.minimum_cdi_version(spec) == version
