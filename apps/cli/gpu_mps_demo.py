"""The demo's MPS chapter: one claim's GPU shared through its own MPS control daemon.

Runs on a node whose plugin has gate MPSSupport on (`gpu_demo.start_gpu_node(...,
feature_gates="MPSSupport=true")`, which also starts an `mps_runner.MpsRunner` playing the
deployment controller and kubelet for the daemons' Deployments). A claim whose GpuConfig says
`sharing.strategy: MPS` is allocated and prepared: the answer comes once its daemon
Deployment is Ready, the GPU is in EXCLUSIVE_PROCESS, and its CDI spec gives the containers
`CUDA_MPS_PIPE_DIRECTORY` and the daemon's pipe and shm. Unprepare deletes the Deployment,
restores DEFAULT and removes the daemon's directories.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.mps import simulated as mps_simulated
from adapters.nvsmi import simulated as nvsmi_simulated
from apps.cli import embedded
from core import errors, kinds, models, names
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as gpu_records
from core.gpu import mps

if TYPE_CHECKING:
    from apps.cli.gpu_demo import GpuNode, Say

DRIVER = names.GPU_DRIVER_NAME
NAMESPACE = "gpu-demo"
CLAIM = "mps-gpu"
THREAD_PERCENTAGE = 50
PINNED_LIMIT = "10Gi"


@dataclasses.dataclass(kw_only=True)
class MpsReport:
    """What the MPS chapter observed while prepared and what was left after unprepare."""

    device: str = ""
    gpu_uuid: str = ""
    deployment: str = ""
    ready: bool = False
    pipe_env: bool = False
    mode_prepared: str = ""
    mode_after: str = ""
    leftover_deployments: int = 0
    leftover_daemon_dirs: int = 0
    leftover_cdi_files: int = 0
    leftover_checkpoint_entries: int = 0

    @property
    def clean(self) -> bool:
        """Prepared as MPS wants it, and nothing of it left after unprepare."""
        return (
            self.ready and self.pipe_env
            and self.mode_prepared == mps.ComputeMode.EXCLUSIVE_PROCESS
            and self.mode_after == mps.ComputeMode.DEFAULT
            and self.leftover_deployments == self.leftover_daemon_dirs == 0
            and self.leftover_cdi_files == self.leftover_checkpoint_entries == 0
        )


def mps_claim(name: str) -> dict[str, Any]:
    """A claim for one GPU shared through MPS (docs/gpus.md's example config)."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
            "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {
                    "defaultActiveThreadPercentage": THREAD_PERCENTAGE,
                    "defaultPinnedDeviceMemoryLimit": PINNED_LIMIT,
                }},
            }}}],
        }},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/k8s/cuda-sample:"
                            "vectoradd-cuda12.5.0", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def compute_mode(node: GpuNode, gpu_uuid: str) -> str:
    """The compute mode the stand-in nvidia-smi last set on `gpu_uuid` (DEFAULT if never)."""
    mode = mps.ComputeMode.DEFAULT.value
    for call in nvsmi_simulated.calls(os.path.dirname(node.files.nvidia_smi)):
        words = call.split()
        if words[:2] == ["-i", gpu_uuid] and words[2:3] == ["-c"] and len(words) > 3:
            mode = words[3]
    return mode


def daemon_deployments(node: GpuNode) -> tuple[Mapping[str, Any], ...]:
    """The MPS daemon Deployments in the driver's namespace."""
    return tuple(node.cluster.list(
        kinds.DEPLOYMENT.kind, namespace=node.settings.namespace,
        label_selector={mps.LABEL_COMPONENT: "true"},
    ).items)


def daemon_dirs(node: GpuNode) -> tuple[str, ...]:
    """The daemons' directories under `<plugin dir>/mps`."""
    root = node.settings.mps_control_root
    try:
        return tuple(sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))))
    except FileNotFoundError:
        return ()


def run_mps_story(node: GpuNode, *, say: Say) -> MpsReport:
    """Allocate, prepare and unprepare one MPS claim, showing its daemon and compute mode."""
    report = MpsReport()
    cluster = node.cluster
    cluster.create(kinds.RESOURCE_CLAIM.kind, mps_claim(CLAIM))
    pod = node.allocator.schedule_pod(_pod(f"{CLAIM}-pod", CLAIM))
    claim = pod.claims[0]
    report.device = str(claim["status"]["allocation"]["devices"]["results"][0]["device"])
    report.gpu_uuid = _uuid_of(node, report.device)
    say(f"claim {NAMESPACE}/{CLAIM} (GpuConfig sharing.strategy=MPS, "
        f"defaultActiveThreadPercentage={THREAD_PERCENTAGE}, "
        f"defaultPinnedDeviceMemoryLimit={PINNED_LIMIT}) allocated {report.device}")
    refs = embedded.claim_refs((claim,))
    results = node.kubelet.prepare(DRIVER, refs)
    failed = [r.error for r in results.values() if r.error]
    if failed:
        raise errors.PermanentError(f"NodePrepareResources failed: {'; '.join(failed)}")
    ids = [i for r in results.values() for d in r.devices for i in d.cdi_device_ids]
    (deployment,) = daemon_deployments(node)
    report.deployment = str(deployment["metadata"]["name"])
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    pods = cluster.list(kinds.POD.kind, namespace=node.settings.namespace,
                        label_selector={mps.LABEL_APP: report.deployment}).items
    report.ready = mps.is_ready(dict(deployment), [dict(p) for p in pods])
    say(f"NodePrepareResources for {CLAIM}: {', '.join(ids)} (answered once its daemon was "
        "Ready)")
    say(f"  Deployment {node.settings.namespace}/{report.deployment}: readyReplicas={ready}, "
        f"pod {', '.join(p['metadata']['name'] for p in pods)} Ready={report.ready} "
        f"(runs `{' '.join(_command(deployment))}` on {node.settings.node_name})")
    log_dir = mps.daemon_dirs(node.settings.mps_control_root,
                              report.deployment.removeprefix(mps.DAEMON_NAME_PREFIX)).log
    state = mps_simulated.state(log_dir) or {}
    say(f"  nvidia-cuda-mps-control daemon: activeThreadPercentage="
        f"{state.get('activeThreadPercentage')} pinnedMemLimits={state.get('pinnedMemLimits')} "
        f"CUDA_VISIBLE_DEVICES={state.get('visibleDevices')}")
    report.mode_prepared = compute_mode(node, report.gpu_uuid)
    say(f"  compute mode of {report.device} ({report.gpu_uuid}): {report.mode_prepared}")
    cdi_dir = fs_cdi.CDIDirectory(node.settings.cdi_root, file_name=gpu_cdi.spec_file_name)
    spec = cdi_dir.read(refs[0].uid) or {}
    for device in spec.get("devices") or ():
        edits = device.get("containerEdits") or {}
        env = list(edits.get("env") or ())
        report.pipe_env = report.pipe_env or any(
            e == f"{mps.PIPE_DIRECTORY_ENV}={mps.PIPE_CONTAINER_PATH}" for e in env)
        mounts = [f"<plugin dir>/{os.path.relpath(m['hostPath'], node.settings.plugin_dir)}:"
                  f"{m['containerPath']}" for m in edits.get("mounts") or ()]
        say(f"  CDI device {device['name']}: env={env} mounts={mounts}")
    results = node.kubelet.unprepare(DRIVER, refs)
    failed = [r.error for r in results.values() if r.error]
    if failed:
        raise errors.RetryableError(f"NodeUnprepareResources failed: {'; '.join(failed)}")
    node.allocator.release_pod(pod.pod)
    cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name=pod.pod["metadata"]["name"])
    report.mode_after = compute_mode(node, report.gpu_uuid)
    report.leftover_deployments = len(daemon_deployments(node))
    report.leftover_daemon_dirs = len(daemon_dirs(node))
    report.leftover_cdi_files = len(cdi_dir.claim_uids())
    current = fs_checkpoints.read_checkpoint(node.settings.checkpoint_path, gpu_records.CODEC)
    report.leftover_checkpoint_entries = 0 if current is None else sum(
        1 for e in current.entries.values() if e.state is not models.ClaimState.PREPARE_ABORTED
    )
    say(f"NodeUnprepareResources for {CLAIM}: daemon quit and its Deployment deleted, compute "
        f"mode of {report.device} {report.mode_after} again; left: "
        f"{report.leftover_deployments} MPS Deployments, {report.leftover_daemon_dirs} daemon "
        f"directories, {report.leftover_cdi_files} CDI spec files, "
        f"{report.leftover_checkpoint_entries} checkpoint entries")
    return report


def _uuid_of(node: GpuNode, device: str) -> str:
    for s in node.cluster.list(kinds.RESOURCE_SLICE.kind).items:
        for d in s["spec"].get("devices") or ():
            if s["spec"].get("driver") == DRIVER and d["name"] == device:
                return str(((d.get("attributes") or {}).get("uuid") or {}).get("string", ""))
    raise errors.PermanentError(f"device {device} is in no published ResourceSlice")


def _command(deployment: Mapping[str, Any]) -> list[str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return [*(container.get("command") or ()), *(container.get("args") or ())]
