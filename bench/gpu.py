"""The GPU half's bench goals (issue 11), each returning a JSON-able dict.

- `prepare_vs_channel`: prepare of one full-GPU claim through the real gRPC socket against the
  ComputeDomain channel prepare measured the same way in the same run, interleaved sample by
  sample so both share the machine's load of the moment; goal: p50_gpu / p50_channel <= 1.5.
- `start_to_slice`: a fresh `gpu-kubelet-plugin` process on the simulated 8-GPU node
  (hgx-h100) until its ResourceSlice is present in the embedded API server (the kubelet
  emulator registers it, as the kubelet would); goal: <= 1 s.
- `consumable_share_vs_full_gpu` (issue 20): prepare of one consumable share of gpu-0 (a node
  published with `--consumable-shares=unlimited`; another share of gpu-0 held throughout, so
  every prepare runs the equal-config overlap check) against a full-GPU prepare on a node
  without shares, interleaved in the same run; reported as p50/p99/n and their ratios.
- `mps_vs_full_gpu` (issue 20): prepare of one MPS claim of gpu-0 (gate MPSSupport), which
  answers only once the claim's control daemon Deployment is Ready, against a full-GPU prepare
  on a node without the gate, interleaved in the same run. The daemon is real as far as this
  machine allows: `apps.cli.mps_runner` plays deployment controller and kubelet, running our
  wrapper, which starts the stand-in `nvidia-cuda-mps-control` (a Python process) and sends it
  the settings; compute modes go through the stand-in `nvidia-smi`. Unprepare (the daemon
  quit, its pod gone, DEFAULT again) is reported too. p50/p99/n and their ratios.
- `fabric_partition_vs_full_gpus` (issue 23): prepare of one 4-GPU claim (gpu-0, 1, 4, 5:
  modules 1, 2, 5, 6) on a node with gate FabricManagerPartitioning, which records and activates
  Fabric Manager partition 2 (the simulated Fabric Manager, its state file in the driver root) and
  deactivates it at unprepare, against the same 4-GPU claim on a node without the gate,
  interleaved in the same run. p50/p99/n and their ratios.
- `health` (issue 22): on a node with gate NVMLDeviceHealthCheck, an XID event appended to the
  simulated events file until a watch of the in-memory cluster delivers the ResourceSlice
  carrying its taint (the whole path: watch child, reader thread, state saved, slice
  republished); and full-GPU prepare with 64 DRAResourceHealth v1 streams open against none,
  in alternating blocks on the same plugin. p50/p99/n and the 64-streams / none ratio.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from adapters.grpc import client, kubelet_emulator
from adapters.grpc.generated import dra_health_v1_pb2, dra_health_v1_pb2_grpc
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from adapters.nvml import health_events as nvml_health
from apps.cli import embedded, gpu_demo
from bench import scenarios, stats
from core import errors, kinds, models, names
from core.gpu import health as gpu_health

GPU_DRIVER = gpu_demo.DRIVER
PROFILE = "hgx-h100"
RATIO_GOAL = 1.5
START_GOAL_S = 1.0


def _gpu_claims(
    node: gpu_demo.GpuNode, count: int, *, device: str, shared: bool = False, first: int = 0,
    config: tuple[dict[str, Any], ...] = (), more: tuple[str, ...] = (),
) -> list[models.ClaimRef]:
    """`count` claims allocated `device` (and the devices `more`, as the scheduler would)
    and reserved for a pod; with `shared`, each result is a consumable share (a shareID, one
    share consumed); `config` is the allocation's device config (e.g. a GpuConfig)."""
    cluster = node.cluster
    node_name = node.settings.node_name
    refs = []
    for i in range(first, first + count):
        name = f"bench-gpu-{i}"
        created = cluster.create(
            kinds.RESOURCE_CLAIM.kind, gpu_demo.claim_object(name, "gpu.nvidia.com"))
        pod = cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": gpu_demo.NAMESPACE},
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]},
        })
        results: list[dict[str, Any]] = [
            {"request": "gpu", "driver": GPU_DRIVER, "pool": node_name, "device": d}
            for d in (device, *more)]
        if shared:
            for result in results:
                result["shareID"] = str(uuid.uuid4())
                result["consumedCapacity"] = {"memory": "0"}
        allocation = {"devices": {"results": results, "config": list(config)}}
        reserved = [{"resource": "pods", "name": f"{name}-pod", "uid": pod["metadata"]["uid"]}]
        cluster.patch(kinds.RESOURCE_CLAIM.kind, namespace=gpu_demo.NAMESPACE, name=name,
                      patch={"status": {"allocation": allocation, "reservedFor": reserved}},
                      subresource="status")
        refs.append(models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]),
                                    namespace=gpu_demo.NAMESPACE, name=name))
    return refs


Side = tuple[str, kubelet_emulator.KubeletEmulator, Sequence[models.ClaimRef]]


def _interleaved(
    sides: Sequence[Side], indices: Iterable[int], timings: dict[str, list[float]]
) -> None:
    """Prepare then unprepare claim `i` of each side for each `i`, timing each call into
    `timings["<side>_<step>"]`; which side goes first alternates, so neither always follows
    the other's fsyncs."""
    for i in indices:
        for side, kubelet, refs in sides if i % 2 == 0 else sides[::-1]:
            for step, call in (("prepare", kubelet.prepare), ("unprepare", kubelet.unprepare)):
                started = time.perf_counter()
                result = call(GPU_DRIVER, (refs[i],))
                timings.setdefault(f"{side}_{step}", []).append(time.perf_counter() - started)
                scenarios._checked(result)


def prepare_vs_channel(workdir: str, *, samples: int) -> dict[str, Any]:
    """One full-GPU claim vs one channel claim: prepare and unprepare, interleaved."""
    cd_env, cd_uid = scenarios._node_with_domain(os.path.join(workdir, "cd"))
    gpu_node: gpu_demo.GpuNode | None = None
    try:
        gpu_node = gpu_demo.start_gpu_node("", profile=PROFILE)
        cd_kubelet = next(iter(cd_env.nodes.values())).kubelet
        channel_refs = scenarios._make_claims(cd_env, 0, samples, cd_uid)
        gpu_refs = _gpu_claims(gpu_node, samples, device="gpu-0")
        timings: dict[str, list[float]] = {
            "gpu_prepare": [], "channel_prepare": [], "gpu_unprepare": [],
            "channel_unprepare": [],
        }
        sides = (("channel", cd_kubelet, names.DRIVER_NAME, channel_refs),
                 ("gpu", gpu_node.kubelet, GPU_DRIVER, gpu_refs))
        for i in range(samples):
            # Alternate which side goes first so neither always follows the other's fsyncs.
            for side, kubelet, driver, refs in sides if i % 2 == 0 else sides[::-1]:
                for step, call in (("prepare", kubelet.prepare), ("unprepare", kubelet.unprepare)):
                    started = time.perf_counter()
                    result = call(driver, (refs[i],))
                    timings[f"{side}_{step}"].append(time.perf_counter() - started)
                    scenarios._checked(result)
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        ratio = scenarios._ratio(summary["gpu_prepare"]["p50_ms"],
                                 summary["channel_prepare"]["p50_ms"])
        return {
            "samples": samples,
            "profile": PROFILE,
            **summary,
            "gpu_prepare_p50_over_channel_prepare_p50": ratio,
            "gpu_prepare_p99_over_channel_prepare_p99": scenarios._ratio(
                summary["gpu_prepare"]["p99_ms"], summary["channel_prepare"]["p99_ms"]),
            "goal_ratio_max": RATIO_GOAL,
            "goal_met": ratio <= RATIO_GOAL,
        }
    finally:
        if gpu_node is not None:
            gpu_node.stop()
        cd_env.stop()


def _slice_present(cluster: memory_cluster.InMemoryCluster, node_name: str) -> bool:
    return any(
        s["spec"].get("driver") == GPU_DRIVER and s["spec"].get("nodeName") == node_name
        and s["spec"].get("devices")
        for s in cluster.list(kinds.RESOURCE_SLICE.kind).items
    )


def _delete_slices(cluster: memory_cluster.InMemoryCluster) -> None:
    for s in cluster.list(kinds.RESOURCE_SLICE.kind).items:
        if s["spec"].get("driver") == GPU_DRIVER:
            cluster.delete(kinds.RESOURCE_SLICE.kind, namespace="", name=s["metadata"]["name"])


def start_to_slice(*, runs: int) -> dict[str, Any]:
    """`gpu-kubelet-plugin` spawned -> its ResourceSlice present in the embedded API server.

    Includes interpreter start, imports and discovery of the simulated 8-GPU node (the driver
    root's ld cache read by the real `ldconfig`); the slice follows the kubelet emulator's
    registration, as it does on a node. Each run starts from no slice in the cluster.
    """
    node_name = gpu_demo.NODE_NAME
    root, _owned = embedded.short_workdir("")
    cluster = memory_cluster.InMemoryCluster()
    samples: list[float] = []
    try:
        files = gpu_demo.lay_out_node_files(root, profile=PROFILE, node_name=node_name)
        cluster.create(kinds.NODE.kind, gpu_demo.node_object(node_name))
        with apiserver.EmbeddedAPIServer(cluster) as server:
            kubeconfig = os.path.join(root, "kubeconfig")
            server.write_kubeconfig(kubeconfig)
            for run in range(runs):
                _delete_slices(cluster)
                registry = os.path.join(root, f"registry-{run}")
                started = time.perf_counter()
                child = subprocess.Popen(
                    [sys.executable, "-m", "apps.gpuplugin", "--node-name", node_name,
                     "--nvml", f"simulated:{PROFILE}",
                     "--nvidia-driver-root", files.driver_root, "--dev-root", files.dev_root,
                     "--boot-id-path", files.boot_id_path,
                     "--plugin-dir", os.path.join(root, "plugin"), "--registry-dir", registry,
                     "--cdi-root", os.path.join(root, "cdi"), "--kubeconfig", kubeconfig,
                     "--sysfs-root", os.path.join(root, "sys"), "--health-port", "0"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                kubelet = kubelet_emulator.KubeletEmulator(registry_dir=registry)
                try:
                    kubelet.wait_for_plugin(GPU_DRIVER, timeout_s=60)
                    # Poll finely: the poll interval must not be what we measure.
                    embedded.wait_until(lambda: _slice_present(cluster, node_name),
                                        timeout_s=60, what="the GPU ResourceSlice",
                                        every_s=0.0005)
                    samples.append(time.perf_counter() - started)
                finally:
                    kubelet.close()
                    child.send_signal(signal.SIGTERM)
                    if child.wait(timeout=30) not in (0, -signal.SIGTERM):
                        raise errors.RetryableError(
                            f"gpu-kubelet-plugin exited {child.returncode} in run {run}")
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    summary = stats.summarize(samples)
    return {"process_spawn_to_slice": {
        **summary,
        "profile": PROFILE,
        "p50_over_goal_1s": scenarios._ratio(summary["p50_ms"], START_GOAL_S * 1000),
        "p99_over_goal_1s": scenarios._ratio(summary["p99_ms"], START_GOAL_S * 1000),
        "goal_met": summary["p99_ms"] <= START_GOAL_S * 1000,
    }}


def consumable_share_vs_full_gpu(*, samples: int) -> dict[str, Any]:
    """One consumable share of gpu-0 (another share held) vs one full GPU: prepare and
    unprepare, interleaved sample by sample."""
    full_node: gpu_demo.GpuNode | None = None
    share_node: gpu_demo.GpuNode | None = None
    try:
        full_node = gpu_demo.start_gpu_node("", profile=PROFILE)
        share_node = gpu_demo.start_gpu_node("", profile=PROFILE, consumable_shares="unlimited")
        holder = _gpu_claims(share_node, 1, device="gpu-0", shared=True)
        scenarios._checked(share_node.kubelet.prepare(GPU_DRIVER, holder))
        full_refs = _gpu_claims(full_node, samples, device="gpu-0")
        share_refs = _gpu_claims(share_node, samples, device="gpu-0", shared=True, first=1)
        timings: dict[str, list[float]] = {
            "full_gpu_prepare": [], "share_prepare": [], "full_gpu_unprepare": [],
            "share_unprepare": [],
        }
        sides = (("full_gpu", full_node.kubelet, full_refs),
                 ("share", share_node.kubelet, share_refs))
        _interleaved(sides, range(samples), timings)
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        return {
            "samples": samples,
            "profile": PROFILE,
            "consumable_shares": "unlimited",
            "shares_held_beside": 1,
            **summary,
            "share_prepare_p50_over_full_gpu_prepare_p50": scenarios._ratio(
                summary["share_prepare"]["p50_ms"], summary["full_gpu_prepare"]["p50_ms"]),
            "share_prepare_p99_over_full_gpu_prepare_p99": scenarios._ratio(
                summary["share_prepare"]["p99_ms"], summary["full_gpu_prepare"]["p99_ms"]),
        }
    finally:
        for node in (share_node, full_node):
            if node is not None:
                node.stop()


# The allocation config of an MPS claim (as the scheduler copies it from the claim).
MPS_CONFIG: dict[str, Any] = {
    "source": "FromClaim", "requests": ["gpu"],
    "opaque": {"driver": GPU_DRIVER, "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {
            "defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}},
    }},
}


def mps_vs_full_gpu(*, samples: int) -> dict[str, Any]:
    """One MPS claim of gpu-0 (its daemon Ready before the answer) vs one full GPU: prepare
    and unprepare, interleaved sample by sample."""
    full_node: gpu_demo.GpuNode | None = None
    mps_node: gpu_demo.GpuNode | None = None
    try:
        full_node = gpu_demo.start_gpu_node("", profile=PROFILE)
        mps_node = gpu_demo.start_gpu_node("", profile=PROFILE,
                                           feature_gates=gpu_demo.MPS_GATES)
        full_refs = _gpu_claims(full_node, samples, device="gpu-0")
        mps_refs = _gpu_claims(mps_node, samples, device="gpu-0", config=(MPS_CONFIG,))
        timings: dict[str, list[float]] = {
            "full_gpu_prepare": [], "mps_prepare": [], "full_gpu_unprepare": [],
            "mps_unprepare": [],
        }
        sides = (("full_gpu", full_node.kubelet, full_refs),
                 ("mps", mps_node.kubelet, mps_refs))
        _interleaved(sides, range(samples), timings)
        left = mps_node.cluster.list(kinds.DEPLOYMENT.kind,
                                     namespace=mps_node.settings.namespace).items
        if left:
            raise errors.PermanentError(f"{len(left)} MPS daemon Deployment(s) left after the run")
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        return {
            "samples": samples,
            "profile": PROFILE,
            "mps_daemon": "apps.cli.mps_runner + stand-in nvidia-cuda-mps-control",
            "mps_ready_poll_ms": gpu_demo.MPS_POLL_S * 1000,
            **summary,
            "mps_prepare_p50_over_full_gpu_prepare_p50": scenarios._ratio(
                summary["mps_prepare"]["p50_ms"], summary["full_gpu_prepare"]["p50_ms"]),
            "mps_prepare_p99_over_full_gpu_prepare_p99": scenarios._ratio(
                summary["mps_prepare"]["p99_ms"], summary["full_gpu_prepare"]["p99_ms"]),
            "mps_unprepare_p50_over_full_gpu_unprepare_p50": scenarios._ratio(
                summary["mps_unprepare"]["p50_ms"], summary["full_gpu_unprepare"]["p50_ms"]),
        }
    finally:
        for node in (mps_node, full_node):
            if node is not None:
                node.stop()


# A 1g.10gb MIG partition of gpu-0 at placement 0 (hgx-h100), created at prepare.
MIG_PARTITION = "gpu-0-mig-1g10gb-19-0"


def _slice_size(node: gpu_demo.GpuNode) -> dict[str, int]:
    """The node's GPU ResourceSlices: how many, their devices, and bytes as compact JSON."""
    slices = [s for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items
              if s["spec"].get("driver") == GPU_DRIVER]
    return {
        "slices": len(slices),
        "devices": sum(len(s["spec"].get("devices") or ()) for s in slices),
        "counter_sets": sum(len(s["spec"].get("sharedCounters") or ()) for s in slices),
        "bytes_compact_json": sum(len(json.dumps(s, separators=(",", ":"))) for s in slices),
    }


def mig_vs_full_gpu(*, samples: int) -> dict[str, Any]:
    """One dynamic MIG claim (the MIG device created at prepare and destroyed at unprepare,
    simulated NVML) vs one full GPU, each on its own 8-GPU node (gate DynamicMIG on and off):
    prepare and unprepare, interleaved sample by sample; and both nodes' slice sizes."""
    full_node: gpu_demo.GpuNode | None = None
    mig_node: gpu_demo.GpuNode | None = None
    try:
        full_node = gpu_demo.start_gpu_node("", profile=PROFILE)
        mig_node = gpu_demo.start_gpu_node("", profile=PROFILE,
                                           feature_gates=gpu_demo.MIG_GATES)
        full_refs = _gpu_claims(full_node, samples, device="gpu-0")
        mig_refs = _gpu_claims(mig_node, samples, device=MIG_PARTITION)
        timings: dict[str, list[float]] = {
            "full_gpu_prepare": [], "mig_prepare": [], "full_gpu_unprepare": [],
            "mig_unprepare": [],
        }
        sides = (("full_gpu", full_node.kubelet, full_refs),
                 ("mig", mig_node.kubelet, mig_refs))
        _interleaved(sides, range(samples), timings)
        assert mig_node.gpus is not None
        left = mig_node.gpus.gpu_inventory().migs
        if left:
            raise errors.PermanentError(f"{len(left)} MIG device(s) left after the run")
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        return {
            "samples": samples,
            "profile": PROFILE,
            "mig_device": MIG_PARTITION,
            "nvml": "simulated (adapters.nvml.gpu_simulation): create/destroy in memory",
            **summary,
            "mig_prepare_p50_over_full_gpu_prepare_p50": scenarios._ratio(
                summary["mig_prepare"]["p50_ms"], summary["full_gpu_prepare"]["p50_ms"]),
            "mig_prepare_p99_over_full_gpu_prepare_p99": scenarios._ratio(
                summary["mig_prepare"]["p99_ms"], summary["full_gpu_prepare"]["p99_ms"]),
            "mig_unprepare_p50_over_full_gpu_unprepare_p50": scenarios._ratio(
                summary["mig_unprepare"]["p50_ms"], summary["full_gpu_unprepare"]["p50_ms"]),
            "slice_size_without_gate": _slice_size(full_node),
            "slice_size_with_dynamic_mig": _slice_size(mig_node),
        }
    finally:
        for node in (mig_node, full_node):
            if node is not None:
                node.stop()


# Four GPUs forming one Fabric Manager partition of the HGX board (modules 1, 2, 5, 6:
# partition 2).
FOUR_GPUS = ("gpu-0", "gpu-1", "gpu-4", "gpu-5")
FM_GATES = "FabricManagerPartitioning=true"


def fabric_partition_vs_full_gpus(*, samples: int) -> dict[str, Any]:
    """One 4-GPU claim whose Fabric Manager partition is recorded and activated at prepare
    (and deactivated at unprepare; simulated Fabric Manager) vs the same claim without the
    gate, each on its own 8-GPU node: prepare and unprepare, interleaved sample by sample."""
    full_node: gpu_demo.GpuNode | None = None
    fm_node: gpu_demo.GpuNode | None = None
    try:
        full_node = gpu_demo.start_gpu_node("", profile=PROFILE)
        fm_node = gpu_demo.start_gpu_node("", profile=PROFILE, feature_gates=FM_GATES)
        if fm_node.fabric is None:
            raise errors.PermanentError("the FabricManagerPartitioning node has no Fabric Manager")
        full_refs = _gpu_claims(full_node, samples, device=FOUR_GPUS[0], more=FOUR_GPUS[1:])
        fm_refs = _gpu_claims(fm_node, samples, device=FOUR_GPUS[0], more=FOUR_GPUS[1:])
        timings: dict[str, list[float]] = {
            "four_gpus_prepare": [], "partitioned_prepare": [], "four_gpus_unprepare": [],
            "partitioned_unprepare": [],
        }
        sides = (("four_gpus", full_node.kubelet, full_refs),
                 ("partitioned", fm_node.kubelet, fm_refs))
        _interleaved(sides, range(samples), timings)
        left = [p.partition_id for p in fm_node.fabric.partitions() if p.active]
        if left:
            raise errors.PermanentError(f"partition(s) {left} left active after the run")
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        return {
            "samples": samples,
            "profile": PROFILE,
            "devices": list(FOUR_GPUS),
            "fabric_manager": "simulated (adapters.fabricmanager): activations in a state file",
            **summary,
            "partitioned_prepare_p50_over_four_gpus_prepare_p50": scenarios._ratio(
                summary["partitioned_prepare"]["p50_ms"], summary["four_gpus_prepare"]["p50_ms"]),
            "partitioned_prepare_p99_over_four_gpus_prepare_p99": scenarios._ratio(
                summary["partitioned_prepare"]["p99_ms"], summary["four_gpus_prepare"]["p99_ms"]),
            "partitioned_unprepare_p50_over_four_gpus_unprepare_p50": scenarios._ratio(
                summary["partitioned_unprepare"]["p50_ms"],
                summary["four_gpus_unprepare"]["p50_ms"]),
        }
    finally:
        for node in (fm_node, full_node):
            if node is not None:
                node.stop()


# Two XIDs that mean a broken GPU (NoSchedule, not in the ignored list), alternated per GPU
# so that every event changes a taint's value.
FATAL_XIDS = (79, 48)
HEALTH_STREAMS = 64
# Far above any sample: a guard against a hang, not a timing goal.
GUARD_S = 30.0


def health(*, samples: int, streams: int = HEALTH_STREAMS) -> dict[str, Any]:
    """Issue 22, on one 8-GPU node with gate NVMLDeviceHealthCheck (the plugin in-process,
    its simulated health watch a real child process): prepare and unprepare of one full-GPU
    claim with no health stream open and with `streams` open, in alternating blocks so both
    share the machine's load; then an XID event raised -> its taint in the ResourceSlice."""
    node = gpu_demo.start_gpu_node("", profile=PROFILE, feature_gates=gpu_demo.HEALTH_GATES)
    try:
        opened = f"streams_{streams}"
        refs = {"none": _gpu_claims(node, samples, device="gpu-0"),
                opened: _gpu_claims(node, samples, device="gpu-0", first=samples)}
        timings: dict[str, list[float]] = {}
        block = max(1, samples // 10)
        for start in range(0, samples, block):
            indices = range(start, min(samples, start + block))
            _interleaved((("none", node.kubelet, refs["none"]),), indices, timings)
            with _open_health_streams(node, streams):
                _interleaved(((opened, node.kubelet, refs[opened]),), indices, timings)
        summary = {name: stats.summarize(values) for name, values in timings.items()}
        taint = stats.summarize(_event_to_taint(node, samples=samples))
        return {
            "samples": samples,
            "profile": PROFILE,
            "event_to_taint_published": {
                **taint,
                "path": "events file -> watch child -> reader thread -> state saved -> "
                        "slice republished (resync thread) -> in-memory cluster watch",
                "measured_until": "a watch of the in-memory cluster delivers the slice with "
                                  "the new taint on the event's GPU",
                "simulated_watch_poll_ms": gpu_demo.HEALTH_POLL_S * 1000,
                "warm_up_events_not_counted": 1,
            },
            "health_streams_open": streams,
            "health_streams_block_samples": block,
            **summary,
            f"prepare_{opened}_p50_over_none_p50": scenarios._ratio(
                summary[f"{opened}_prepare"]["p50_ms"], summary["none_prepare"]["p50_ms"]),
            f"prepare_{opened}_p99_over_none_p99": scenarios._ratio(
                summary[f"{opened}_prepare"]["p99_ms"], summary["none_prepare"]["p99_ms"]),
        }
    finally:
        node.stop()


@contextlib.contextmanager
def _open_health_streams(node: gpu_demo.GpuNode, count: int) -> Iterator[None]:
    """`count` v1 DRAResourceHealth streams on the plugin's DRA socket, each past its first
    message, for the block; closed (and gone from the server) after it."""
    streams = node.plugin.server.health_streams
    assert streams is not None
    target = client.unix_target(node.plugin.server.dra_socket_path)
    with grpc.insecure_channel(target) as channel:
        stub = dra_health_v1_pb2_grpc.DRAResourceHealthStub(channel)  # type: ignore[no-untyped-call]
        calls = [stub.NodeWatchResources(dra_health_v1_pb2.NodeWatchResourcesRequest())
                 for _ in range(count)]
        try:
            for call in calls:
                next(call)
            if streams.open_streams != count:
                raise errors.PermanentError(
                    f"{streams.open_streams} health streams open, want {count}")
            yield
        finally:
            for call in calls:
                call.cancel()
    embedded.wait_until(lambda: streams.open_streams == 0, timeout_s=GUARD_S,
                        what="the health streams to close", every_s=0.001)


def _event_to_taint(node: gpu_demo.GpuNode, *, samples: int) -> list[float]:
    """An XID event appended to the simulated events file -> a watch of the in-memory
    cluster delivers the GPU slice carrying its taint; one warm-up event first (not counted:
    it also reads the server version, once)."""
    assert node.gpus is not None and node.health_events is not None
    gpus = node.gpus.gpu_inventory().gpus
    cluster = node.cluster
    took: list[float] = []
    for i in range(samples + 1):
        gpu = gpus[i % len(gpus)]
        xid = FATAL_XIDS[(i // len(gpus)) % len(FATAL_XIDS)]
        want = {"key": gpu_health.TAINT_KEY_XID, "value": str(xid),
                "effect": gpu_health.TaintEffect.NO_SCHEDULE.value}
        since = cluster.list(kinds.RESOURCE_SLICE.kind).resource_version
        events = cluster.watch(kinds.RESOURCE_SLICE.kind, resource_version=since,
                               timeout_s=GUARD_S)
        started = time.perf_counter()
        nvml_health.raise_simulated_event(node.files.driver_root, gpu_health.HealthEvent(
            kind=gpu_health.HealthEventKind.XID, gpu_uuid=gpu.uuid, xid=xid))
        if not any(_has_taint(event.obj, gpu.name, want) for event in events):
            raise errors.RetryableError(f"taint {want} on {gpu.name} not published in {GUARD_S}s")
        if i:
            took.append(time.perf_counter() - started)
    return took


def _has_taint(slice_obj: Mapping[str, Any], device: str, want: Mapping[str, str]) -> bool:
    spec = slice_obj.get("spec", {})
    return spec.get("driver") == GPU_DRIVER and any(
        d.get("name") == device
        and any(all(t.get(k) == v for k, v in want.items()) for t in d.get("taints") or ())
        for d in spec.get("devices") or ())
