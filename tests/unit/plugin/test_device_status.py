"""`status.devices` planning: our entries from the prepared devices, merged beside other
drivers' entries, cleared on unprepare, idempotent; the ComputeDomain half's data."""

from __future__ import annotations

from typing import Any

from core import device_status, models
from core.computedomain import checkpoint_records
from core.computedomain import device_status as cd_device_status

DRIVER = "gpu.nvidia.com"
NOW = "2026-01-02T03:04:05Z"
LATER = "2026-01-02T04:00:00Z"


def prepared(device: str, *, request: str = "gpu", share: str = "") -> models.PreparedDevice:
    return models.PreparedDevice(request_names=(request,), pool_name="node-a",
                                 device_name=device, cdi_device_ids=(f"x/{device}",),
                                 share_id=share)


def other_driver() -> dict[str, Any]:
    return {"driver": "nic.example.com", "pool": "node-a", "device": "eth1",
            "conditions": [], "networkData": {"interfaceName": "eth1"}}


def merge(current: list[dict[str, Any]], ours: tuple[device_status.DeviceStatus, ...],
          now: str = NOW) -> list[dict[str, Any]] | None:
    return device_status.merged_devices(current, driver=DRIVER, ours=ours, now=now,
                                        message="prepared on node node-a")


def test_one_status_per_distinct_device_sorted_with_the_halfs_data() -> None:
    statuses = device_status.planned(
        (prepared("gpu-1"), prepared("gpu-0"), prepared("gpu-0", request="other"),
         prepared("gpu-0", share="s1")),
        {"gpu-0": {"uuid": "GPU-0"}},
    )
    assert [(s.device, s.share_id, dict(s.data)) for s in statuses] == [
        ("gpu-0", "", {"uuid": "GPU-0"}), ("gpu-0", "s1", {"uuid": "GPU-0"}),
        ("gpu-1", "", {}),
    ]


def test_our_entries_are_added_beside_other_drivers_entries() -> None:
    ours = device_status.planned((prepared("gpu-0", share="s1"),), {"gpu-0": {"uuid": "U"}})
    merged = merge([other_driver()], ours)
    assert merged == [other_driver(), {
        "driver": DRIVER, "pool": "node-a", "device": "gpu-0", "shareID": "s1",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                        "message": "prepared on node node-a", "lastTransitionTime": NOW}],
        "data": {"uuid": "U"},
    }]


def test_writing_the_same_again_changes_nothing_and_keeps_the_transition_time() -> None:
    ours = device_status.planned((prepared("gpu-0"),), {"gpu-0": {"uuid": "U"}})
    first = merge([other_driver()], ours)
    assert first is not None
    assert merge(first, ours, now=LATER) is None
    changed = device_status.planned((prepared("gpu-0"),), {"gpu-0": {"uuid": "V"}})
    again = merge(first, changed, now=LATER)
    assert again is not None
    assert again[1]["conditions"][0]["lastTransitionTime"] == NOW
    assert again[1]["data"] == {"uuid": "V"}


def test_a_condition_not_ready_before_gets_a_new_transition_time() -> None:
    stale = {"driver": DRIVER, "pool": "node-a", "device": "gpu-0", "conditions": [
        {"type": "Ready", "status": "False", "lastTransitionTime": NOW}]}
    merged = merge([stale], device_status.planned((prepared("gpu-0"),), {}), now=LATER)
    assert merged is not None
    assert merged[0]["conditions"][0]["lastTransitionTime"] == LATER


def test_clearing_removes_only_our_entries() -> None:
    ours = device_status.planned((prepared("gpu-0"), prepared("gpu-1")), {})
    written = merge([other_driver()], ours)
    assert written is not None
    assert merge(written, ()) == [other_driver()]
    assert merge([other_driver()], ()) is None
    assert merge([], ()) is None


def test_a_device_no_longer_ours_is_dropped() -> None:
    written = merge([], device_status.planned((prepared("gpu-0"), prepared("gpu-1")), {}))
    assert written is not None
    after = merge(written, device_status.planned((prepared("gpu-1"),), {}))
    assert after is not None and [e["device"] for e in after] == ["gpu-1"]


def test_a_channel_shows_its_domain_channels_clique_and_mode() -> None:
    record = checkpoint_records.ComputeDomainClaimRecord(
        mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.CHANNEL,
        domain_id="cd-uid", channel_ids=(7,),
    )
    data = cd_device_status.device_data(
        record, devices=(prepared("channel-0", request="channel"),), clique_id="c.1")
    assert data == {"channel-0": {
        "type": "channel", "domainID": "cd-uid", "channelIDs": [7], "cliqueID": "c.1",
        "imexMode": "hostManaged", "isolation": "channel",
    }}


def test_a_daemon_device_shows_its_domain() -> None:
    record = checkpoint_records.ComputeDomainClaimRecord(
        mode=models.IMEXMode.DRIVER_MANAGED, isolation=models.Isolation.DOMAIN,
        domain_id="cd-uid",
    )
    data = cd_device_status.device_data(
        record, devices=(prepared("daemon-0", request="daemon"),), clique_id="")
    assert data == {"daemon-0": {"type": "daemon", "domainID": "cd-uid"}}
