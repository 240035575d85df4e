"""`computedomain demo --profile <GPU profile>`: the GPU half's story on the embedded cluster.

The GPU plugin runs for one simulated node, registers with the kubelet emulator, publishes its
slice; claims allocated by the chart's DeviceClass selectors (full GPU; MIG device on the
A100 MIG profile) are prepared and unprepared over the DRA socket; then, with consumable
shares on, two one-share claims are given the same GPU and prepared beside each other; then,
with MPSSupport on, an MPS claim is prepared once its daemon Deployment is Ready (GPU in
EXCLUSIVE_PROCESS, CDI env CUDA_MPS_PIPE_DIRECTORY) and unprepared back to DEFAULT with no
Deployment left; then, with DynamicMIG on (a100-mig), the scheduler picks non-overlapping MIG
placements by the counters, one claim too many stays pending, the MIG devices are created at
prepare and destroyed at unprepare; then, with NVMLDeviceHealthCheck on (hgx-h100), a fatal XID
raised in the simulated NVML taints gpu-0, a claim for it stays pending naming the taint, a
tolerating claim gets it, an informational XID refuses nothing. The CDI specs written are
valid against the reference CDI schema; an unknown profile is refused with the known ones.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cdi"))

import test_cdi_schema as cdi_schema

from apps.cli import gpu_demo, gpu_mig_demo, gpu_mps_demo
from core import errors

REPO = str(pathlib.Path(__file__).resolve().parents[3])


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", "demo", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
    )


def _quiet(_line: str) -> None:
    return None


def test_hgx_h100_demo_publishes_eight_gpus_and_prepares_gpu_0() -> None:
    done = _demo("--profile", "hgx-h100")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "GPU DRA driver demo (gpu.nvidia.com): profile=hgx-h100",
        "registered through plugins_registry as gpu.nvidia.com",
        "8 devices: gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, gpu-5, gpu-6, gpu-7",
        "productName=NVIDIA H100 80GB HBM3 architecture=Hopper",
        "claim gpu-demo/full-gpu (DeviceClass gpu.nvidia.com) allocated gpu-0",
        "NodePrepareResources for full-gpu: k8s.gpu.nvidia.com/claim=",
        "deviceNodes=['/dev/nvidia0']",
        "deviceNodes=['/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']",
        "env=['NVIDIA_VISIBLE_DEVICES=void']",
        "left: 0 CDI spec files, 0 checkpoint entries",
        # The consumable-shares chapter: two pods on one GPU.
        "restarted the GPU plugin with --consumable-shares=2 (gate ConsumableShares)",
        "gpu-0 published with allowMultipleAllocations: shares=2 (each claim takes 1 by default)",
        "claim gpu-demo/share-a (capacity.requests shares=1) allocated gpu-0 shareID=",
        "claim gpu-demo/share-b (capacity.requests shares=1) allocated gpu-0 shareID=",
        "NodePrepareResources for share-b: gpu-0 share_id=",
        "2 pods share gpu-0: both claims prepared beside each other",
        "NodeUnprepareResources for the 2 shares; left: 0 CDI spec files, 0 checkpoint entries",
        # The MPS chapter: one claim's daemon as a Deployment, the GPU exclusive meanwhile.
        "restarted the GPU plugin with --feature-gates=MPSSupport=true",
        "claim gpu-demo/mps-gpu (GpuConfig sharing.strategy=MPS, "
        "defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit=10Gi) allocated gpu-0",
        "(answered once its daemon was Ready)",
        "Deployment nvidia-dra-driver/mps-control-daemon-",
        "readyReplicas=1, pod mps-control-daemon-",
        "Ready=True (runs `gpu-kubelet-plugin mps-control-daemon` on gpu-node-0)",
        "nvidia-cuda-mps-control daemon: activeThreadPercentage=50 pinnedMemLimits={'GPU-",
        "': '10240M'}",
        "compute mode of gpu-0 (GPU-",
        "): EXCLUSIVE_PROCESS",
        "env=['CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps']",
        "/pipe:/tmp/nvidia-mps'",
        "NodeUnprepareResources for mps-gpu: daemon quit and its Deployment deleted, compute "
        "mode of gpu-0 DEFAULT again; left: 0 MPS Deployments, 0 daemon directories, 0 CDI "
        "spec files, 0 checkpoint entries",
        # The device health chapter: a fatal XID taints gpu-0, which is then refused.
        "restarted the GPU plugin with --feature-gates=NVMLDeviceHealthCheck=true",
        "NVML event loop watching 8 GPU(s); raising XID 79 on gpu-0 (GPU-",
        "gpu-0 tainted gpu.nvidia.com/xid=79:NoSchedule in the ResourceSlice ",
        "claim wants-sick-gpu (selects gpu-0) stays pending: ",
        "tainted and not tolerated: gpu-0 (gpu.nvidia.com/xid=79:NoSchedule)",
        "claim tolerates-xid (toleration gpu.nvidia.com/xid Exists NoSchedule) gets gpu-0",
        "XID 13 (an application error) on gpu-1: gpu.nvidia.com/xid=13:None only informs; "
        "claim wants-noisy-gpu gets gpu-1",
        "4 claim(s) prepared and unprepared, clean",
    ):
        assert expected in out, f"{expected!r} missing from:\n{out}"
    assert "mig.nvidia.com" not in out


def test_a100_mig_demo_prepares_a_full_gpu_and_a_mig_device() -> None:
    done = _demo("--profile", "a100-mig")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "5 devices: gpu-0-mig-1g5gb-19-2, gpu-0-mig-1g5gb-19-3, gpu-0-mig-2g10gb-14-0, "
        "gpu-0-mig-3g20gb-9-4, gpu-1",
        "type=mig productName=NVIDIA A100-SXM4-40GB",
        "profile=1g.5gb",
        # gpu-0 is in MIG mode: it publishes its MIG devices, so the full GPU is gpu-1.
        "claim gpu-demo/full-gpu (DeviceClass gpu.nvidia.com) allocated gpu-1",
        "claim gpu-demo/mig-slice (DeviceClass mig.nvidia.com) allocated gpu-0-mig-",
        "NodePrepareResources for mig-slice: k8s.gpu.nvidia.com/claim=",
        "/dev/nvidia-caps/nvidia-cap",
        "2 pods share gpu-1: both claims prepared beside each other",
        "claim gpu-demo/mps-gpu (GpuConfig sharing.strategy=MPS, "
        "defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit=10Gi) allocated gpu-1",
        "compute mode of gpu-1 DEFAULT again; left: 0 MPS Deployments",
        "restarted the GPU plugin with --feature-gates=DynamicMIG=true",
        "start-up teardown destroyed 4 MIG device(s)",
        "claim mig-0-2g-10gb (2g.10gb): the scheduler chose gpu-0-mig-2g10gb-14-0",
        "claim mig-1-2g-10gb (2g.10gb): the scheduler chose gpu-0-mig-2g10gb-14-2",
        "claim mig-2-3g-20gb (3g.20gb): the scheduler chose gpu-0-mig-3g20gb-9-4",
        "claim mig-3-1g-5gb (1g.5gb) stays pending: ",
        "would exceed counter",
        "MIG devices created in the simulated NVML: 2g.10gb@gpu0:0, 2g.10gb@gpu0:2, "
        "3g.20gb@gpu0:4",
        "MIG devices destroyed; left: 0",
        "8 claim(s) prepared and unprepared, clean",
    ):
        assert expected in out, f"{expected!r} missing from:\n{out}"


def test_an_unknown_profile_is_refused_listing_every_profile() -> None:
    done = _demo("--profile", "dgx-a100")
    assert done.returncode == 2
    assert "unknown demo profile 'dgx-a100'" in done.stderr
    for profile in ("gb200-nvl72", "gb200-2racks", "h100", "hgx-h100", "a100-mig", "gb200"):
        assert profile in done.stderr


def test_start_gpu_node_refuses_an_unknown_profile_naming_the_gpu_profiles() -> None:
    with pytest.raises(errors.ConfigError, match="a100-mig, gb200, hgx-h100"):
        gpu_demo.start_gpu_node("", profile="gb200-nvl72")


@pytest.mark.parametrize("profile", gpu_demo.gpu_profiles())
def test_every_cdi_spec_the_story_writes_is_valid_and_nothing_is_left(profile: str) -> None:
    node = gpu_demo.start_gpu_node("", profile=profile)
    try:
        report = gpu_demo.run_story(node, say=_quiet)
    finally:
        node.stop()
    assert not os.path.exists(node.workdir), "a temp workdir is removed on stop"
    assert report.cdi_specs.keys() == report.cdi_ids.keys() == report.allocated.keys()
    for claim, spec in report.cdi_specs.items():
        cdi_schema._check(dict(spec))
        assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
        names = [f"{spec['kind']}={d['name']}" for d in spec["devices"]]
        assert list(report.cdi_ids[claim]) == names
        assert report.cdi_ids[claim][0].endswith("-" + report.allocated[claim])
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)
    expected = {"full-gpu", "mig-slice"} if profile == "a100-mig" else {"full-gpu"}
    assert set(report.allocated) == expected


@pytest.mark.parametrize("profile", gpu_demo.gpu_profiles())
def test_the_mps_chapter_prepares_with_its_daemon_and_leaves_nothing(profile: str) -> None:
    node = gpu_demo.start_gpu_node("", profile=profile, feature_gates=gpu_demo.MPS_GATES)
    try:
        report = gpu_mps_demo.run_mps_story(node, say=_quiet)
        assert gpu_mps_demo.daemon_deployments(node) == ()
        assert gpu_mps_demo.daemon_dirs(node) == ()
    finally:
        node.stop()
    assert report.deployment.startswith("mps-control-daemon-") and report.ready
    assert report.pipe_env
    assert (report.mode_prepared, report.mode_after) == ("EXCLUSIVE_PROCESS", "DEFAULT")
    assert report.clean, report


def test_the_mig_chapter_chooses_disjoint_placements_and_leaves_no_mig_device() -> None:
    node = gpu_demo.start_gpu_node("", profile=gpu_mig_demo.PROFILE,
                                   feature_gates=gpu_demo.MIG_GATES)
    try:
        report = gpu_mig_demo.run_mig_story(node, torn_down=4, say=_quiet)
        assert gpu_mig_demo.mig_devices(node) == ()
    finally:
        node.stop()
    assert report.created == ("2g.10gb@gpu0:0", "2g.10gb@gpu0:2", "3g.20gb@gpu0:4")
    assert list(report.refused) == ["mig-3-1g-5gb"]
    assert "would exceed counter" in report.refused["mig-3-1g-5gb"]
    assert report.clean, report
