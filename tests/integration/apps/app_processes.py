"""Running the driver's apps as real subprocesses against an embedded API server.

Shared by the app tests: the plugin's and controller's command lines, a process wrapper that
keeps its output in a file (a full pipe would stall the child), polling, and the
ResourceClaim / ComputeDomain objects the tests put into the embedded cluster.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from adapters.nvml import simulated
from apps.kubeletplugin import settings as cd_settings
from core import kinds, models, names

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PROFILE = "gb200-nvl72"
NAMESPACE = "apps-test"
# Generous: a cold interpreter importing grpc and kubernetes takes seconds on a 2-core runner.
START_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 60.0

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None], *, what: str, timeout_s: float = 60.0, every_s: float = 0.1
) -> T:
    """Poll `probe` until it returns something other than None/False; fail with `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


class AppProcess:
    """One app run as `python -m <module> <args>`, its output going to `log_path`."""

    def __init__(self, module: str, args: Sequence[str], *, log_path: pathlib.Path) -> None:
        self.module = module
        self.args = tuple(args)
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
        env["PYTHONUNBUFFERED"] = "1"
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()/kill()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", module, *self.args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout_s: float = EXIT_TIMEOUT_S) -> int:
        try:
            code = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.module} did not exit within {timeout_s:.0f}s; output:\n{self.output()}"
            ) from None
        self._log.close()
        return code

    def signal(self, signum: signal.Signals) -> None:
        if self.running:
            self.popen.send_signal(signum)

    def kill(self) -> None:
        """kill -9, and reap it."""
        if self.running:
            self.popen.kill()
        self.popen.wait(timeout=EXIT_TIMEOUT_S)
        self._log.close()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginPaths:
    """One node's directories and /proc stand-ins (short: unix socket paths max 107 bytes)."""

    root: pathlib.Path

    @property
    def plugin_dir(self) -> pathlib.Path:
        return self.root / "plugin"

    @property
    def registry_dir(self) -> pathlib.Path:
        return self.root / "registry"

    @property
    def cdi_root(self) -> pathlib.Path:
        return self.root / "cdi"

    @property
    def proc_devices(self) -> pathlib.Path:
        return self.root / "devices"

    @property
    def boot_id(self) -> pathlib.Path:
        return self.root / "boot_id"

    @property
    def registration_socket(self) -> pathlib.Path:
        return self.registry_dir / names.REGISTRATION_SOCKET_NAME

    @property
    def dra_socket(self) -> pathlib.Path:
        return self.plugin_dir / names.DRA_SOCKET_NAME

    @property
    def checkpoint(self) -> pathlib.Path:
        return self.plugin_dir / cd_settings.CHECKPOINT_FILE

    def cdi_file(self, claim_uid: str) -> pathlib.Path:
        return self.cdi_root / names.cdi_spec_file_name(claim_uid)

    def write_node_files(self, node: str, *, proc_devices: str | None = None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        text = simulated.simulated_proc_devices() if proc_devices is None else proc_devices
        self.proc_devices.write_text(text, encoding="utf-8")
        self.boot_id.write_text(simulated.simulated_boot_id(node) + "\n", encoding="utf-8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedCluster:
    """An InMemoryCluster behind an EmbeddedAPIServer, and a kubeconfig pointing at it."""

    cluster: memory_cluster.InMemoryCluster
    server: apiserver.EmbeddedAPIServer
    kubeconfig: pathlib.Path


Launch = Callable[[str, Sequence[str]], AppProcess]


def first_node() -> str:
    return str(simulated.profile_nodes(PROFILE)[0])


def host_managed_flags() -> list[str]:
    return [
        "--imex-mode", "hostManaged",
        "--imex-isolation", "none",
        "--feature-gates", "HostManagedIMEXDaemon=true",
    ]


def plugin_args(
    paths: PluginPaths, *, node: str, kubeconfig: pathlib.Path, mode_flags: Sequence[str],
    host_imex_check: bool = False, container_runtime_endpoint: str = "none",
) -> list[str]:
    """The plugin's flags. The host IMEX readiness query (on by default in the plugin) is off
    unless asked for: this machine has no host nvidia-imex to answer it. So is the container
    runtime CDI check: a runtime of this machine would not read the test's CDI root."""
    return [
        "--container-runtime-endpoint", container_runtime_endpoint,
        "--host-imex-check", str(host_imex_check).lower(),
        "--node-name", node,
        "--nvml", f"simulated:{PROFILE}",
        "--proc-devices", str(paths.proc_devices),
        "--boot-id-path", str(paths.boot_id),
        "--plugin-dir", str(paths.plugin_dir),
        "--registry-dir", str(paths.registry_dir),
        "--cdi-root", str(paths.cdi_root),
        "--kubeconfig", str(kubeconfig),
        "--health-port", "0",
        "--metrics-port", "0",
        # NB: a claim the API server does not know is retried this long before the answer.
        "--retry-budget-seconds", "1",
        *mode_flags,
    ]


def compute_domain(cluster: memory_cluster.InMemoryCluster, name: str) -> dict[str, Any]:
    """Create a ComputeDomain in NAMESPACE; returns the stored object."""
    created = cluster.create(
        kinds.COMPUTE_DOMAIN.kind,
        {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
        },
    )
    return dict(created)


def resource_claim(
    cluster: memory_cluster.InMemoryCluster,
    name: str,
    *,
    node: str,
    cd_uid: str,
    allocated: bool = True,
    allocation_mode: str = "",
) -> models.ClaimRef:
    """Create a channel claim as the scheduler leaves it (status.allocation on `node`)."""
    created = cluster.create(
        kinds.RESOURCE_CLAIM.kind,
        {
            "apiVersion": names.DRA_GROUP_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": names.CHANNEL_REQUEST_NAME, "exactly": {
                "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
        },
    )
    if allocated:
        # The plugin prepares a claim only for a pod on its node that the claim is reserved for.
        pod = cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": NAMESPACE},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        })
        reserved = [{"resource": "pods", "name": f"{name}-pod", "uid": pod["metadata"]["uid"]}]
        parameters: dict[str, Any] = {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_CHANNEL_CONFIG,
            "domainID": cd_uid,
        }
        if allocation_mode:
            parameters["allocationMode"] = allocation_mode
        allocation = {"devices": {
            "results": [{"request": names.CHANNEL_REQUEST_NAME, "driver": names.DRIVER_NAME,
                         "pool": node, "device": names.channel_device_name(0)}],
            "config": [{"source": "FromClaim", "requests": [names.CHANNEL_REQUEST_NAME],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}],
        }}
        cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name,
            patch={"status": {"allocation": allocation, "reservedFor": reserved}},
            subresource="status",
        )
    return models.ClaimRef(
        uid=names.ClaimUID(created["metadata"]["uid"]), namespace=NAMESPACE, name=name
    )


# Fixtures shared by the app test directories (each conftest imports them by name).


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[ServedCluster]:
    """An in-memory cluster behind the embedded HTTP API server, with a kubeconfig for it."""
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    yield ServedCluster(cluster=cluster, server=server, kubeconfig=kubeconfig)
    server.stop()
    cluster.close()


@pytest.fixture
def launch(tmp_path: pathlib.Path) -> Iterator[Launch]:
    """Start `python -m <module> <args>`; every process still running at the end is killed."""
    started: list[AppProcess] = []

    def start(module: str, args: Sequence[str]) -> AppProcess:
        log_path = tmp_path / f"{module.rsplit('.', 1)[-1]}-{len(started)}.log"
        process = AppProcess(module, args, log_path=log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
