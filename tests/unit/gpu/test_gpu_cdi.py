"""The GPU claim's CDI spec: names, ids, nodes, mounts and the cdiVersion it needs."""

from __future__ import annotations

import dataclasses

import gpu_prep_fixtures as f

from core.gpu import cdi, devices

UID = "0a1b2c3d-1111-4222-8333-444455556666"


def test_qualified_name_is_what_the_kubelet_hands_the_runtime() -> None:
    assert cdi.qualified_name(UID, "gpu-0") == f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"
    assert cdi.spec_file_name(UID) == f"k8s.gpu.nvidia.com-claim_{UID}.json"


def test_slice_device_of_reads_back_only_this_claims_devices() -> None:
    assert cdi.slice_device_of(UID, f"{UID}-gpu-3") == "gpu-3"
    assert cdi.slice_device_of(UID, "other-gpu-3") is None
    assert cdi.slice_device_of(UID, f"{UID}-") is None


def test_spec_needs_0_5_0_when_the_uid_starts_with_a_digit() -> None:
    device = cdi.gpu_device(UID, f.gpu(0), files=f.FILES)
    spec = f.check_cdi(cdi.claim_spec(devices_json=[device], edits=cdi.common_edits(f.FILES)))
    assert spec["cdiVersion"] == "0.5.0"
    device = cdi.gpu_device("abc", f.gpu(0), files=f.FILES)
    spec = f.check_cdi(cdi.claim_spec(devices_json=[device], edits=cdi.common_edits(f.FILES)))
    assert spec["cdiVersion"] == "0.3.0"


def test_one_mount_per_container_path_the_first_wins() -> None:
    files = dataclasses.replace(
        f.FILES, libraries=(("/a/libx.so", "/usr/lib/libx.so"), ("/b/libx.so", "/usr/lib/libx.so"))
    )
    mounts = cdi.common_edits(files)["mounts"]
    assert [m["hostPath"] for m in mounts if m["containerPath"] == "/usr/lib/libx.so"] == [
        "/a/libx.so"
    ]


def test_common_edits_without_driver_files_keep_only_the_env() -> None:
    assert cdi.common_edits(f.FILES, driver_files=False) == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"]
    }
    empty = cdi.common_edits(devices.DriverFiles())
    assert empty == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}


def test_spec_devices_skips_malformed_items() -> None:
    assert cdi.spec_devices({"devices": [{"name": "a"}, {"name": 1}, "x"]}) == ("a",)
    assert cdi.spec_devices({}) == ()
