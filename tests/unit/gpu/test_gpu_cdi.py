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


# ------------------------------------------------------------ the toolkit's hooks (issue 19)

HOOK = "/var/lib/kubelet/plugins/gpu.nvidia.com/nvidia-cdi-hook"
LIB = "/usr/lib/x86_64-linux-gnu"
HOOKED = devices.DriverFiles(
    control_nodes=(devices.DeviceNode(path="/dev/nvidiactl", major=195, minor=255),),
    libraries=(
        ("/h/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", f"{LIB}/libcuda.so"),
        ("/h/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", f"{LIB}/libcuda.so.1"),
        ("/h/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", f"{LIB}/libcuda.so.580.65.06"),
        ("/h/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06", f"{LIB}/libnvidia-ml.so.1"),
        ("/h/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06",
         f"{LIB}/libnvidia-ml.so.580.65.06"),
        ("/h/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.580.65.06",
         f"{LIB}/vdpau/libvdpau_nvidia.so.580.65.06"),
    ),
    binaries=(("/h/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),),
    driver_version="580.65.06",
    library_dir=LIB,
    library_links=(
        devices.LibraryLink(path=f"{LIB}/libcuda.so", target="libcuda.so.1",
                            file=f"{LIB}/libcuda.so.580.65.06"),
        devices.LibraryLink(path=f"{LIB}/libcuda.so.1", target="libcuda.so.580.65.06",
                            file=f"{LIB}/libcuda.so.580.65.06"),
        devices.LibraryLink(path=f"{LIB}/libnvidia-ml.so.1", target="libnvidia-ml.so.580.65.06",
                            file=f"{LIB}/libnvidia-ml.so.580.65.06"),
    ),
    cdi_hook_path=HOOK,
)


def _hook(*args: str) -> dict[str, object]:
    return {"hookName": "createContainer", "path": HOOK, "args": ["nvidia-cdi-hook", *args],
            "env": ["NVIDIA_CTK_DEBUG=false"]}


def _mount(host: str, container: str) -> dict[str, object]:
    return {"hostPath": host, "containerPath": container,
            "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}


def test_with_a_hook_binary_the_edits_take_the_toolkits_layout_in_its_order() -> None:
    edits = cdi.common_edits(HOOKED)
    assert list(edits) == ["env", "deviceNodes", "hooks", "mounts"]
    assert edits["env"] == [f"NVIDIA_CTK_LIBCUDA_DIR={LIB}", "NVIDIA_VISIBLE_DEVICES=void"]
    assert edits["hooks"] == [
        _hook("create-symlinks",
              "--link", f"libcuda.so.1::{LIB}/libcuda.so",
              "--link", f"libcuda.so.580.65.06::{LIB}/libcuda.so.1",
              "--link", f"libnvidia-ml.so.580.65.06::{LIB}/libnvidia-ml.so.1"),
        _hook("enable-cuda-compat", "--host-driver-version=580.65.06"),
        _hook("update-ldcache", "--folder", LIB, "--folder", f"{LIB}/vdpau"),
        _hook("disable-device-node-modification"),
    ]
    # Links are the hook's to make: only the versioned files are mounted.
    assert edits["mounts"] == [
        _mount("/h/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", f"{LIB}/libcuda.so.580.65.06"),
        _mount("/h/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06",
               f"{LIB}/libnvidia-ml.so.580.65.06"),
        _mount("/h/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.580.65.06",
               f"{LIB}/vdpau/libvdpau_nvidia.so.580.65.06"),
        _mount("/h/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
    ]


def test_without_a_hook_binary_the_edits_stay_as_before() -> None:
    edits = cdi.common_edits(dataclasses.replace(HOOKED, cdi_hook_path=""))
    assert list(edits) == ["env", "deviceNodes", "mounts"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert [m["containerPath"] for m in edits["mounts"]][:3] == [
        f"{LIB}/libcuda.so", f"{LIB}/libcuda.so.1", f"{LIB}/libcuda.so.580.65.06"
    ]
    assert {tuple(m["options"]) for m in edits["mounts"]} == {("ro", "nosuid", "nodev", "bind")}


def test_a_passthrough_only_claim_gets_no_hooks() -> None:
    assert cdi.common_edits(HOOKED, driver_files=False) == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"]
    }


def test_hooked_spec_validates_and_keeps_its_cdi_version() -> None:
    device = cdi.gpu_device(UID, f.gpu(0), files=HOOKED)
    spec = f.check_cdi(cdi.claim_spec(devices_json=[device], edits=cdi.common_edits(HOOKED)))
    assert spec["cdiVersion"] == "0.5.0"
    assert len(spec["containerEdits"]["hooks"]) == 4


def test_nvidia_ctk_takes_the_hooks_under_its_hook_subcommand() -> None:
    assert cdi.hook("/usr/bin/nvidia-ctk", "update-ldcache")["args"] == [
        "nvidia-ctk", "hook", "update-ldcache"
    ]


def test_the_toolkits_fixed_links_come_first_and_duplicates_go() -> None:
    files = devices.DriverFiles(library_links=(
        devices.LibraryLink(path="/l/libcuda.so", target="libcuda.so.1",
                            file="/l/libcuda.so.1.2"),
    ))
    assert cdi.library_symlinks(
        files, library_files=["/l/libcuda.so.1.2", "/l/libGLX_nvidia.so.1.2",
                              "/l/libnvidia-opticalflow.so.1.2"]
    ) == [
        "libcuda.so.1::/l/libcuda.so",
        "libGLX_nvidia.so.1.2::/l/libGLX_indirect.so.0",
        "libnvidia-opticalflow.so.1::/l/libnvidia-opticalflow.so",
    ]


def test_no_links_no_symlink_hook_and_an_unknown_version_adds_no_compat_flag() -> None:
    files = devices.DriverFiles(cdi_hook_path=HOOK)
    hooks = cdi.driver_hooks(files, library_files=["/l/libnvidia-ml.so.9.9"])
    assert [h["args"][1:] for h in hooks] == [
        ["enable-cuda-compat"], ["update-ldcache", "--folder", "/l"],
        ["disable-device-node-modification"],
    ]


def test_ldcache_folders_take_library_names_only() -> None:
    assert cdi.ldcache_folders(
        ["/a/libx.so.1", "/a/liby.so", "/b/notalib.txt", "/c/libz.sober", "/d/libq.so.5.1"]
    ) == ["/a", "/d"]
