"""MPS daemon Deployments on the embedded cluster, run as a deployment controller and kubelet
would run them: for the demo, the bench and the GPU plugin's integration tests.

For each Deployment the GPU plugin creates (label `resource.nvidia.com/mpsControlDaemon`), the
runner starts the daemon's real wrapper (`apps.gpuplugin.mps_daemon.run`) in a thread with the
pod's environment, its directories being the Deployment's hostPath volumes (so the stand-in
`nvidia-cuda-mps-control` of the simulated driver root runs for real), then adds the Pod and
marks the Deployment ready once the wrapper's startup file exists, as its startup probe would.
A deleted Deployment gets SIGTERM's equivalent (the wrapper quits the daemon) and its Pod goes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import mps_daemon
from core import errors, kinds, ports
from core.gpu import mps

log = logging.getLogger(__name__)

_SELECTOR: Mapping[str, str | None] = {mps.LABEL_COMPONENT: "true"}


@dataclasses.dataclass(kw_only=True)
class _Running:
    stop: threading.Event
    thread: threading.Thread


class MpsRunner:
    """Runs every MPS daemon Deployment of `namespace` until `close()`."""

    def __init__(self, cluster: memory_cluster.InMemoryCluster, *, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace
        self._running: dict[str, _Running] = {}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mps-runner", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching and quit every daemon still running."""
        self._closing.set()
        self._thread.join(timeout=10)
        for name in list(self._running):
            self._stop(name)

    def _loop(self) -> None:
        version = ""
        while not self._closing.is_set():
            try:
                for event in self._cluster.watch(
                    kinds.DEPLOYMENT.kind, namespace=self._namespace, resource_version=version,
                    timeout_s=0.5, label_selector=_SELECTOR,
                ):
                    meta = event.obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if event.type is ports.WatchEventType.ADDED:
                        self._start(dict(event.obj))
                    elif event.type is ports.WatchEventType.DELETED:
                        self._stop(str(meta.get("name")))
            except errors.GoneError:
                version = ""

    def _start(self, deployment: dict[str, Any]) -> None:
        name = str(deployment["metadata"]["name"])
        if name in self._running:
            return
        spec = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
        (container,) = spec["containers"]
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        env.update({
            "PATH": os.environ.get("PATH", os.defpath),
            "MPS_DRIVER_ROOT": mounts[mps.DRIVER_ROOT_MOUNT],
            "MPS_PIPE_DIRECTORY": mounts[mps.DAEMON_PIPE_MOUNT],
            "MPS_LOG_DIRECTORY": mounts[mps.DAEMON_LOG_MOUNT],
        })
        stop = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(name, deployment, env, stop), name=f"mps-{name[-12:]}",
            daemon=True,
        )
        self._running[name] = _Running(stop=stop, thread=thread)
        thread.start()

    def _run(
        self, name: str, deployment: dict[str, Any], env: dict[str, str], stop: threading.Event
    ) -> None:
        ready = threading.Thread(target=self._mark_ready, args=(name, deployment, env, stop),
                                 daemon=True)
        ready.start()
        code = mps_daemon.run(env, stop=stop)
        if code != 0:
            log.warning("event=mps_daemon_exited name=%s code=%d", name, code)

    def _mark_ready(
        self, name: str, deployment: dict[str, Any], env: dict[str, str], stop: threading.Event
    ) -> None:
        """The startup probe: once the wrapper's file exists, the Pod is Ready."""
        while mps_daemon.check(env) != 0:
            if stop.wait(0.002):
                return
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        self._cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-0", "namespace": self._namespace, "labels": labels},
            "spec": deployment["spec"]["template"]["spec"],
        })
        self._cluster.patch(
            kinds.POD.kind, namespace=self._namespace, name=f"{name}-0", subresource="status",
            patch={"status": {"phase": "Running", "containerStatuses": [
                {"name": mps.CONTAINER_NAME, "ready": True}]}},
        )
        self._cluster.patch(
            kinds.DEPLOYMENT.kind, namespace=self._namespace, name=name, subresource="status",
            patch={"status": {"replicas": 1, "readyReplicas": 1}},
        )

    def _stop(self, name: str) -> None:
        running = self._running.pop(name, None)
        if running is None:
            return
        running.stop.set()
        running.thread.join(timeout=30)
        with contextlib.suppress(errors.NotFoundError):
            self._cluster.delete(kinds.POD.kind, namespace=self._namespace, name=f"{name}-0")
