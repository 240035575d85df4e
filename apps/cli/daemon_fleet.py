"""Real `compute-domain-daemon` processes for the embedded deployment's daemon pods.

What a container runtime would do for a daemon pod, done for the demo: the pod's environment
is its DaemonSet's env (field references resolved) plus the daemon claim's CDI env, its `/imexd`
is the host directory the CDI spec bind-mounts, and `nvidia-imex`/`nvidia-imex-ctl` are the
simulated executables. The daemons talk to the in-memory cluster through its HTTP facade with
the real Kubernetes client, exactly as in a cluster. With the deployment's simulated profile,
each daemon reads its node's fabric from the simulated driver root the node's plugin reads, so
a degraded fabric turns its entry NotReady, as on a real node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from adapters.imex import simulated as imex_simulated
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from core import errors, kinds, models
from core.computedomain import daemon_claim, membership

log = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 30.0


@dataclasses.dataclass(kw_only=True)
class DaemonProcess:
    node: str
    cd_uid: str
    clique_id: str
    config_dir: str
    hosts_file: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]


class DaemonFleet:
    """Starts, watches and stops one daemon process per (ComputeDomain, node)."""

    def __init__(
        self, cluster: memory_cluster.InMemoryCluster, *, workdir: str, namespace: str,
        profile: str = "", driver_root_of: Callable[[str], str] | None = None,
    ) -> None:
        """`profile` and `driver_root_of` (node -> its simulated driver root): where the
        daemons read the fabric; without them, real NVML (absent here: not checked)."""
        self._cluster = cluster
        self._namespace = namespace
        self._profile = profile
        self._driver_root_of = driver_root_of
        self._workdir = os.path.join(workdir, "imex-daemons")
        os.makedirs(self._workdir, exist_ok=True)
        self._imex, self._ctl = imex_simulated.install(os.path.join(self._workdir, "bin"))
        self._server = apiserver.EmbeddedAPIServer(cluster).start()
        self._kubeconfig = os.path.join(self._workdir, "kubeconfig")
        self._server.write_kubeconfig(self._kubeconfig)
        self.daemons: dict[tuple[str, str], DaemonProcess] = {}

    def start(
        self,
        *,
        node: str,
        pod_ip: str,
        container_env: Mapping[str, str],
        cdi_spec: Mapping[str, Any],
    ) -> DaemonProcess:
        """Run the daemon of a pod whose daemon claim the node's plugin prepared."""
        env = dict(container_env)
        config_dir = ""
        for device in cdi_spec.get("devices") or ():
            edits = device.get("containerEdits") or {}
            env.update(item.split("=", 1) for item in edits.get("env") or ())
            for mount in edits.get("mounts") or ():
                if mount.get("containerPath") == daemon_claim.CONTAINER_CONFIG_DIR:
                    config_dir = mount["hostPath"]
        cd_uid = env.get("COMPUTE_DOMAIN_UUID", "")
        key = (cd_uid, node)
        if key in self.daemons and self.daemons[key].popen.poll() is None:
            return self.daemons[key]
        root = os.path.join(self._workdir, f"{node}-{cd_uid[:8]}")
        os.makedirs(root, exist_ok=True)
        hosts = os.path.join(root, "hosts")
        with open(hosts, "w", encoding="utf-8") as f:
            f.write(f"127.0.0.1\tlocalhost\n{pod_ip}\t{node}\n")
        env.update({"POD_IP": pod_ip, "NODE_NAME": node, "PYTHONUNBUFFERED": "1"})
        for name in ("KUBECONFIG", "PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV"):
            if name in os.environ and name not in env:
                env[name] = os.environ[name]
        log_file = open(os.path.join(root, "daemon.log"), "ab")  # noqa: SIM115 - closed in stop
        popen = subprocess.Popen(
            [sys.executable, "-m", "apps.daemon", "run",
             "--config-dir", config_dir, "--hosts-file", hosts,
             "--imex-command", self._imex, "--imex-ctl-command", self._ctl,
             "--kubeconfig", self._kubeconfig, "--ready-poll-seconds", "0.1",
             *self._nvml_args(node)],
            env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            cwd=_repo_root(),
        )
        daemon = DaemonProcess(
            node=node, cd_uid=cd_uid, clique_id=env.get("CLIQUE_ID", ""),
            config_dir=config_dir, hosts_file=hosts, popen=popen, log=log_file,
        )
        self.daemons[key] = daemon
        log.info("event=daemon_process_started node=%s cd=%s pid=%d", node, cd_uid, popen.pid)
        return daemon

    def _nvml_args(self, node: str) -> list[str]:
        if not self._profile or self._driver_root_of is None:
            return []
        return ["--nvml", f"simulated:{self._profile}",
                "--nvidia-driver-root", self._driver_root_of(node)]

    def entry(self, daemon: DaemonProcess) -> membership.Peer | None:
        """The daemon's entry in its ComputeDomainClique, or None."""
        try:
            obj = self._cluster.get(
                kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=self._namespace,
                name=membership.clique_object_name(daemon.cd_uid, daemon.clique_id),
            )
        except errors.NotFoundError:
            return None
        store = membership.Store.CLIQUE
        peers = membership.peers_of(membership.entries_of(obj, store=store), store=store)
        return next((p for p in peers if p.node_name == daemon.node), None)

    def wait_ready(self, daemons: list[DaemonProcess], *, timeout_s: float = 90.0) -> None:
        """Until every daemon's entry says Ready; RetryableError naming the laggards."""
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [d for d in daemons if not self._ready(d)]
            if not waiting:
                return
            dead = [d for d in waiting if d.popen.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise errors.RetryableError(
                    "IMEX daemon(s) not Ready on " + ", ".join(
                        f"{d.node} (exit {d.popen.poll()}; log {d.log.name})" for d in waiting)
                )
            time.sleep(0.05)

    def _ready(self, daemon: DaemonProcess) -> bool:
        entry = self.entry(daemon)
        return entry is not None and entry.status is models.DomainStatus.READY

    def stop(self, *, cd_uid: str, node: str) -> int | None:
        """SIGTERM one daemon (it removes its entry) and reap it; its exit status."""
        daemon = self.daemons.pop((cd_uid, node), None)
        if daemon is None:
            return None
        if daemon.popen.poll() is None:
            daemon.popen.send_signal(signal.SIGTERM)
        try:
            code = daemon.popen.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            daemon.popen.kill()
            code = daemon.popen.wait()
        daemon.log.close()
        return code

    def close(self) -> None:
        for cd_uid, node in list(self.daemons):
            self.stop(cd_uid=cd_uid, node=node)
        with contextlib.suppress(Exception):
            self._server.stop()


def _repo_root() -> str:
    # Where `apps` is imported from, so the child imports the same code.
    return str(pathlib.Path(__file__).resolve().parents[2])
