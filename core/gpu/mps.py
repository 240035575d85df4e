"""MPS control daemons of `gpu.nvidia.com` claims, as values: who they are, where their files
live, the Deployment that runs one, what a claim's containers are given to reach it.

As upstream (`cmd/gpu-kubelet-plugin/sharing.go`), a claim whose config says `strategy: MPS`
gets its own `nvidia-cuda-mps-control` daemon for the devices of that config: a Deployment
`mps-control-daemon-<claimUID>-<5 hex of sha256(sorted UUIDs)>` in the driver's namespace,
pinned to the node, hostPID, with the pipe, log and (tmpfs) shm directories under
`<plugin dir>/mps/<daemon id>/`. The claim's containers get `CUDA_MPS_PIPE_DIRECTORY` and
bind mounts of the pipe and shm directories. Everything here is pure: the adapter
(`adapters.mps`) creates, waits for and deletes what this module describes.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import posixpath
from collections.abc import Sequence
from typing import Final

from core import models

DAEMON_NAME_PREFIX: Final = "mps-control-daemon-"
CONTROL_FILES_DIR: Final = "mps"
CONTAINER_NAME: Final = "mps-control-daemon"
# Where a claim's containers see the daemon's pipe and shm directories (upstream's paths).
PIPE_CONTAINER_PATH: Final = "/tmp/nvidia-mps"
SHM_CONTAINER_PATH: Final = "/dev/shm"
PIPE_DIRECTORY_ENV: Final = "CUDA_MPS_PIPE_DIRECTORY"
# Where the daemon's container sees the driver root and, inside it, the pipe and log dirs.
DRIVER_ROOT_MOUNT: Final = "/driver-root"
DAEMON_PIPE_MOUNT: Final = "/driver-root/tmp/nvidia-mps"
DAEMON_LOG_MOUNT: Final = "/driver-root/var/log/nvidia-mps"
# The file the daemon's wrapper writes once the daemon took its settings (its startup probe).
STARTUP_FILE: Final = "startup.log"
# Bind options of the claim's mounts (upstream's).
MOUNT_OPTIONS: Final = ("rw", "nosuid", "nodev", "bind")
LABEL_APP: Final = "app"
# Labels ours carry so an operator (and the plugin) can list them.
LABEL_COMPONENT: Final = "resource.nvidia.com/mpsControlDaemon"
LABEL_CLAIM: Final = "resource.nvidia.com/claimUID"


class ComputeMode(enum.StrEnum):
    """The compute modes the GPU half sets (`nvidia-smi -c`)."""

    DEFAULT = "DEFAULT"
    EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MpsDaemon:
    """One claim's control daemon for the devices of one MPS config."""

    claim_uid: str
    daemon_id: str
    # Every device UUID it serves (full GPUs and MIG devices), sorted: CUDA_VISIBLE_DEVICES.
    device_uuids: tuple[str, ...]
    # The full GPUs among them (sorted): these go to EXCLUSIVE_PROCESS while it runs.
    gpu_uuids: tuple[str, ...]
    # The slice devices of the claim it serves (their CDI devices get the mounts).
    devices: tuple[str, ...]
    active_thread_percentage: int | None = None
    # (UUID, "<MiB>M") per device, sorted by UUID (`pinned_memory.normalize`).
    pinned_limits: tuple[tuple[str, str], ...] = ()
    multi_user: bool = False

    @property
    def name(self) -> str:
        """The Deployment's name."""
        return deployment_name(self.daemon_id)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MpsDirs:
    """A daemon's directories on the host."""

    root: str
    pipe: str
    shm: str
    log: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaemonHost:
    """What the Deployment of every daemon on this node shares (the plugin's settings)."""

    namespace: str
    node_name: str
    image: str
    # The daemon's command in the image (our wrapper, `gpu-kubelet-plugin mps-control-daemon`).
    command: tuple[str, ...]
    # The driver root on the host, and where the plugin's control files are on the host.
    host_driver_root: str
    control_root: str
    # Where the daemon's container mounts its shm: inside the driver root when that has a
    # dev/shm (the daemon runs chrooted there), else /dev/shm (upstream's rule).
    shm_mount_path: str = SHM_CONTAINER_PATH
    image_pull_policy: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str = ""


def daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """`<claimUID>-<first 5 hex digits of sha256 of the sorted UUIDs joined by ','>`."""
    digest = hashlib.sha256(",".join(sorted(uuids)).encode()).hexdigest()
    return f"{claim_uid}-{digest[:5]}"


def deployment_name(daemon_id_: str) -> str:
    """`mps-control-daemon-<daemon id>`."""
    return f"{DAEMON_NAME_PREFIX}{daemon_id_}"


def daemon_dirs(control_root: str, daemon_id_: str) -> MpsDirs:
    """`<control root>/<id>/{pipe,shm,log}` (the control root is `<plugin dir>/mps`)."""
    root = posixpath.join(control_root, daemon_id_)
    return MpsDirs(
        root=root,
        pipe=posixpath.join(root, "pipe"),
        shm=posixpath.join(root, "shm"),
        log=posixpath.join(root, "log"),
    )


def claim_edits(dirs: MpsDirs) -> models.JSONObject:
    """The CDI containerEdits that connect a container to its claim's daemon."""
    return {
        "env": [f"{PIPE_DIRECTORY_ENV}={PIPE_CONTAINER_PATH}"],
        "mounts": [
            {"hostPath": dirs.shm, "containerPath": SHM_CONTAINER_PATH,
             "options": list(MOUNT_OPTIONS)},
            {"hostPath": dirs.pipe, "containerPath": PIPE_CONTAINER_PATH,
             "options": list(MOUNT_OPTIONS)},
        ],
    }


def daemon_id_of_edits(edits: models.JSONObject) -> str | None:
    """The daemon id whose pipe directory `edits` mount (a CDI device's containerEdits), or
    None: how a spec alone proves a claim had a daemon (checkpoint lost)."""
    mounts = edits.get("mounts")
    for mount in mounts if isinstance(mounts, list) else ():
        if isinstance(mount, dict) and mount.get("containerPath") == PIPE_CONTAINER_PATH:
            host = mount.get("hostPath")
            if isinstance(host, str) and posixpath.basename(host) == "pipe":
                return posixpath.basename(posixpath.dirname(host)) or None
    return None


def control_commands(daemon: MpsDaemon) -> tuple[str, ...]:
    """The lines the wrapper sends to `nvidia-cuda-mps-control` once it runs, in order."""
    lines: list[str] = []
    if daemon.active_thread_percentage is not None:
        lines.append(f"set_default_active_thread_percentage {daemon.active_thread_percentage}")
    lines.extend(
        f"set_default_device_pinned_mem_limit {uuid} {limit}"
        for uuid, limit in daemon.pinned_limits
    )
    return tuple(lines)


def deployment(daemon: MpsDaemon, *, host: DaemonHost) -> models.JSONObject:
    """The Deployment that runs `daemon` on this node (upstream's shape: one replica, pinned
    by nodeName, hostPID, privileged, the driver root and the daemon's directories mounted).

    The settings travel as env (`MPS_CONTROL_COMMANDS`, one command per line) to the wrapper,
    which starts the daemon inside the driver root, sends them, then writes its startup file.
    Deterministic.
    """
    dirs = daemon_dirs(host.control_root, daemon.daemon_id)
    labels = {
        LABEL_APP: daemon.name,
        LABEL_COMPONENT: "true",
        LABEL_CLAIM: daemon.claim_uid,
    }
    env = [
        {"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(daemon.device_uuids)},
        {"name": "MPS_DRIVER_ROOT", "value": DRIVER_ROOT_MOUNT},
        {"name": "MPS_PIPE_DIRECTORY", "value": DAEMON_PIPE_MOUNT},
        {"name": "MPS_LOG_DIRECTORY", "value": DAEMON_LOG_MOUNT},
        {"name": "MPS_CONTROL_COMMANDS", "value": "\n".join(control_commands(daemon))},
        {"name": "MPS_MULTI_USER", "value": "true" if daemon.multi_user else "false"},
    ]
    container: models.JSONObject = {
        "name": CONTAINER_NAME,
        "image": host.image,
        "command": list(host.command),
        "securityContext": {"privileged": True},
        "env": env,
        "startupProbe": {
            "exec": {"command": [*host.command, "--check"]},
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
        "volumeMounts": [
            {"name": "driver-root", "mountPath": DRIVER_ROOT_MOUNT},
            {"name": "mps-shm-directory", "mountPath": host.shm_mount_path},
            {"name": "mps-pipe-directory", "mountPath": DAEMON_PIPE_MOUNT},
            {"name": "mps-log-directory", "mountPath": DAEMON_LOG_MOUNT},
        ],
    }
    if host.image_pull_policy:
        container["imagePullPolicy"] = host.image_pull_policy
    pod_spec: models.JSONObject = {
        "nodeName": host.node_name,
        "hostPID": True,
        "containers": [container],
        "volumes": [
            _host_path("driver-root", host.host_driver_root),
            _host_path("mps-shm-directory", dirs.shm),
            _host_path("mps-pipe-directory", dirs.pipe),
            _host_path("mps-log-directory", dirs.log),
        ],
    }
    if host.service_account:
        pod_spec["serviceAccountName"] = host.service_account
    if host.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in host.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": daemon.name, "namespace": host.namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL_APP: daemon.name}},
            # NB: Recreate: a second daemon must never start beside the first on the GPUs.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def _host_path(name: str, path: str) -> models.JSONObject:
    return {"name": name, "hostPath": {"path": path}}


def is_ready(deployment_obj: models.JSONObject, pods: Sequence[models.JSONObject]) -> bool:
    """Whether the Deployment has its one replica ready and that pod's container is Ready
    (upstream's AssertReady): the daemon took its settings."""
    status = deployment_obj.get("status")
    ready = status.get("readyReplicas") if isinstance(status, dict) else None
    if ready != 1 or len(pods) != 1:
        return False
    pod_status = pods[0].get("status")
    statuses = pod_status.get("containerStatuses") if isinstance(pod_status, dict) else None
    if not isinstance(statuses, list) or len(statuses) != 1:
        return False
    first = statuses[0]
    return isinstance(first, dict) and first.get("ready") is True
