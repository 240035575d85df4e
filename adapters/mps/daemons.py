"""`core.ports.MpsDaemons` as upstream runs them: one Deployment per daemon, in the driver's
namespace, pinned to this node.

Why a Deployment (and not a child of the plugin): the daemon must outlive the plugin. A plugin
restart or upgrade would otherwise take every MPS workload's server with it; as a pod of its
own the daemon is also visible to operators (`kubectl -n <ns> get deploy -l
resource.nvidia.com/mpsControlDaemon`), its logs are `kubectl logs`, and the kubelet restarts
it if it dies. The plugin needs RBAC on Deployments and Pods in its namespace for it (the
chart grants that with MPSSupport on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters.mps import hostdirs
from core import errors, kinds, ports
from core.gpu import mps

log = logging.getLogger(__name__)


class DeploymentMpsDaemons:
    """Starts, awaits and stops daemons as Deployments through `cluster`."""

    def __init__(
        self,
        cluster: ports.Cluster,
        *,
        host: mps.DaemonHost,
        dirs: hostdirs.MpsHostDirs,
        ready_timeout_s: float = 20.0,
        gone_timeout_s: float = 20.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._cluster = cluster
        self._host = host
        self._dirs = dirs
        self._ready_timeout_s = ready_timeout_s
        self._gone_timeout_s = gone_timeout_s
        self._poll_s = poll_s
        self._clock = clock
        self._sleep = sleep

    def start(self, daemon: mps.MpsDaemon) -> None:
        """Directories first (the pod mounts them), then the Deployment unless it exists."""
        self._dirs.create(daemon.daemon_id)
        try:
            self._cluster.create(kinds.DEPLOYMENT.kind, mps.deployment(daemon, host=self._host))
        except errors.AlreadyExistsError:
            log.info("event=mps_daemon_exists name=%s", daemon.name)
            return
        log.info("event=mps_daemon_created name=%s namespace=%s gpus=%s", daemon.name,
                 self._host.namespace, ",".join(daemon.device_uuids))

    def await_ready(self, daemon_id: str) -> None:
        """Poll until the Deployment's one pod is Ready; RetryableError naming what it waits
        for after `ready_timeout_s` (the kubelet's retry, or ours, waits on)."""
        name = mps.deployment_name(daemon_id)
        deadline = self._clock() + self._ready_timeout_s
        while True:
            try:
                deployment = self._cluster.get(
                    kinds.DEPLOYMENT.kind, namespace=self._host.namespace, name=name
                )
            except errors.NotFoundError:
                raise errors.RetryableError(
                    f"MPS control daemon Deployment {self._host.namespace}/{name} is gone; "
                    "the prepare is retried and creates it again"
                ) from None
            pods = self._pods(name)
            if mps.is_ready(dict(deployment), pods):
                log.info("event=mps_daemon_ready name=%s", name)
                return
            if self._clock() >= deadline:
                raise errors.RetryableError(
                    f"MPS control daemon {self._host.namespace}/{name} is not Ready after "
                    f"{self._ready_timeout_s:g}s ({_why(pods)}); see `kubectl -n "
                    f"{self._host.namespace} describe deployment {name}` and its pod's logs"
                )
            self._sleep(self._poll_s)

    def stop(self, daemon_id: str) -> None:
        """Delete the Deployment, wait until it and its pod are gone, remove the directories."""
        name = mps.deployment_name(daemon_id)
        try:
            self._cluster.delete(kinds.DEPLOYMENT.kind, namespace=self._host.namespace, name=name)
            log.info("event=mps_daemon_deleted name=%s", name)
        except errors.NotFoundError:
            pass
        deadline = self._clock() + self._gone_timeout_s
        while self._exists(name) or self._pods(name):
            if self._clock() >= deadline:
                raise errors.RetryableError(
                    f"MPS control daemon {self._host.namespace}/{name} is still terminating "
                    f"after {self._gone_timeout_s:g}s; the unprepare is retried"
                )
            self._sleep(self._poll_s)
        self._dirs.remove(daemon_id)
        log.info("event=mps_daemon_stopped name=%s", name)

    def _exists(self, name: str) -> bool:
        try:
            self._cluster.get(kinds.DEPLOYMENT.kind, namespace=self._host.namespace, name=name)
        except errors.NotFoundError:
            return False
        return True

    def _pods(self, name: str) -> list[dict[str, Any]]:
        listed = self._cluster.list(
            kinds.POD.kind, namespace=self._host.namespace,
            label_selector={mps.LABEL_APP: name},
        ).items
        return [dict(p) for p in listed]


def _why(pods: list[dict[str, Any]]) -> str:
    """What the daemon's pod shows while not Ready, for the error."""
    if not pods:
        return "no pod yet"
    status = pods[0].get("status") or {}
    for container in status.get("containerStatuses") or ():
        state: Mapping[str, Any] = container.get("state") or {}
        for phase, details in state.items():
            reason = (details or {}).get("reason") or ""
            return f"container {phase}{': ' + reason if reason else ''}"
    return f"pod {status.get('phase') or 'Pending'}"
