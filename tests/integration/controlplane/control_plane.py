"""A complete control plane and a real kubelet on loopback, for the lifecycle the other tiers skip.

etcd + kube-apiserver (Node and RBAC authorizers, NodeRestriction admission: the plugins and the
kubelet run under the admission they meet in a cluster) + kube-scheduler +
kube-controller-manager (every default controller: DaemonSets, Deployments, the resourceclaim
controller, garbage collection, service-account tokens) + one kubelet per node, each against its
own stand-in container runtime (`stand_in_runtime.py`). The binaries come from
`hack/kube-components.sh` (built once into a cache outside the repo, per Kubernetes version).

The kubelet runs with the flags this sandbox needs (no QoS cgroups, nothing enforced on node
allocatable, swap allowed, cgroup v1 allowed) from an empty scratch directory: with an in-memory
runtime its container-log clean-up deletes files in its working directory.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "realkube"))

import realkube_server
from realkube_server import ChildProcess, RealKube, free_port, wait_for

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME_SCRIPT = HERE / "stand_in_runtime.py"
START_TIMEOUT_S = 120.0


def kube_version() -> str:
    return os.environ.get("KUBE_VERSION", realkube_server.DEFAULT_VERSION)


def binaries_dir() -> pathlib.Path | None:
    """The cache of `hack/kube-components.sh` for $KUBE_VERSION when all components are there."""
    explicit = os.environ.get("KUBE_BIN_DIR")
    if explicit:
        candidate = pathlib.Path(explicit)
    else:
        cache_home = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
        candidate = cache_home / "cd-dra-driver" / f"kube-{kube_version()}"
    needed = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "etcd",
              "cri-api.proto")
    return candidate if all((candidate / n).exists() for n in needed) else None


MISSING = (
    "no kube-apiserver/kube-scheduler/kube-controller-manager/kubelet/etcd/cri-api.proto for "
    "$KUBE_VERSION (run `make kube-components`, which builds them once into ~/.cache/cd-dra-driver)"
)


def node_user(node: str) -> str:
    return f"system:node:{node}"


class ControlPlane:
    """The API server (via `RealKube`), the scheduler and the controller-manager."""

    def __init__(self, workdir: pathlib.Path, *, bin_dir: pathlib.Path, nodes: Sequence[str],
                 static_users: Sequence[str] = (),
                 feature_gates: Mapping[str, bool] | None = None,
                 runtime_config: Mapping[str, bool] | None = None) -> None:
        """`feature_gates` go to the API server, the scheduler and the controller-manager
        (the kubelet takes its own: `Kubelet(feature_gates=...)`); `runtime_config`: the API
        group versions the API server serves beyond its defaults (an alpha gate's API)."""
        self.workdir = workdir
        self.feature_gates = dict(feature_gates or {})
        self.bin_dir = bin_dir
        self.nodes = tuple(nodes)
        self.kube = RealKube(
            workdir, bin_dir=bin_dir, static_users=static_users,
            static_groups={node_user(n): "system:nodes" for n in self.nodes},
            authorization_modes=("Node", "RBAC"),
            admission_plugins=("NodeRestriction",),
            feature_gates=self.feature_gates,
            runtime_config=runtime_config or {},
        )
        self._components: list[ChildProcess] = []

    def start(self) -> ControlPlane:
        try:
            self.kube.start()
            admin = str(self.kube.admin_kubeconfig())
            self._components.append(self._start_component("kube-scheduler", [
                "--kubeconfig", admin,
                "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
                "--leader-elect=false",
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                *realkube_server.feature_gates_args(self.feature_gates),
                "--v=2",
            ]))
            self._components.append(self._start_component("kube-controller-manager", [
                "--kubeconfig", admin,
                "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
                "--leader-elect=false",
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                "--use-service-account-credentials=true",
                "--service-account-private-key-file", str(self.workdir / "sa.key"),
                "--root-ca-file", str(self.kube.ca_file),
                # Every default controller; node IPAM stays idle (no --allocate-node-cidrs):
                # pods get their IPs from the stand-in runtime.
                "--controllers=*",
                *realkube_server.feature_gates_args(self.feature_gates),
                "--v=2",
            ]))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_component(self, name: str, args: list[str]) -> ChildProcess:
        return ChildProcess([str(self.bin_dir / name), *args],
                            log_path=self.workdir / f"{name}.log")

    def component_logs(self) -> dict[str, str]:
        return {p.log_path.name: p.output() for p in self._components}

    def check_running(self) -> None:
        for process in self._components:
            if not process.running:
                raise AssertionError(f"{process.argv[0]} exited:\n{process.output()[-6000:]}")

    def stop(self) -> None:
        for process in reversed(self._components):
            process.stop()
        self._components.clear()
        self.kube.stop()


class Runtime(ChildProcess):
    """The stand-in container runtime of one node (see `stand_in_runtime.py`)."""

    def __init__(self, root: pathlib.Path, *, proto: pathlib.Path, api_server: str,
                 recipes: pathlib.Path, cdi_dirs: Sequence[pathlib.Path],
                 status_info: pathlib.Path, version_info: pathlib.Path | None = None) -> None:
        self.root = root
        self.socket = root / "cri.sock"
        self.state_dir = root / "runtime"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, str(RUNTIME_SCRIPT),
            "--socket", str(self.socket), "--state-dir", str(self.state_dir),
            "--proto", str(proto), "--api-server", api_server,
            "--recipes", str(recipes), "--status-info", str(status_info),
        ]
        for directory in cdi_dirs:
            args += ["--cdi-dir", str(directory)]
        if version_info is not None:
            args += ["--version-info", str(version_info)]
        super().__init__(args, log_path=root / "runtime.log",
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for(self._listening, what="the stand-in runtime's socket", timeout_s=START_TIMEOUT_S)

    def _listening(self) -> bool:
        if not self.running:
            raise AssertionError(f"stand-in runtime exited:\n{self.output()[-6000:]}")
        return self.socket.exists()


class Kubelet(ChildProcess):
    """A real kubelet for `node`, against `runtime`, in the scratch directory `root`."""

    def __init__(self, node: str, *, root: pathlib.Path, plane: ControlPlane,
                 runtime: Runtime, feature_gates: Mapping[str, bool] | None = None) -> None:
        self.node = node
        self.root = root
        self.kubelet_dir = root / "kl"
        self.scratch = root / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        self.healthz_port = free_port()
        token = plane.kube.static_tokens[node_user(node)]
        kubeconfig = plane.kube.kubeconfig(token, name=f"kubelet-{node}")
        config_path = root / "kubelet-config.yaml"
        config_path.write_text(yaml.safe_dump(self._config(runtime, feature_gates or {})),
                               encoding="utf-8")
        super().__init__(
            [
                str(plane.bin_dir / "kubelet"),
                "--config", str(config_path),
                "--kubeconfig", str(kubeconfig),
                "--root-dir", str(self.kubelet_dir),
                "--cert-dir", str(root / "pki"),
                "--hostname-override", node,
                "--node-ip", "127.0.0.1",
                "--v=2",
            ],
            log_path=root / "kubelet.log",
            cwd=self.scratch,
        )

    @property
    def registry_dir(self) -> pathlib.Path:
        return self.kubelet_dir / "plugins_registry"

    def plugin_dir(self, driver: str) -> pathlib.Path:
        return self.kubelet_dir / "plugins" / driver

    def _config(self, runtime: Runtime, feature_gates: Mapping[str, bool]) -> dict[str, Any]:
        endpoint = f"unix://{runtime.socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "address": "127.0.0.1",
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "localStorageCapacityIsolation": False,
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%",
                             "imagefs.available": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": "",
            "registerNode": True,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "serializeImagePulls": False,
            # NB: the default /var/log/pods is shared by every kubelet run on this machine.
            "podLogsDir": str(self.root / "pod-logs"),
            "featureGates": dict(feature_gates),
        }

    def healthy(self) -> bool:
        if not self.running:
            raise AssertionError(f"kubelet {self.node} exited:\n{self.output()[-8000:]}")
        try:
            answer = urllib3.PoolManager().request(
                "GET", f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=1.0,
                retries=False)
        except urllib3.exceptions.HTTPError:
            return False
        return bool(answer.status == 200)

    def stop(self) -> None:
        # The kubelet leaves containers running on exit (as with a real runtime); the runtime's
        # own stop ends them.
        self.signal(signal.SIGTERM)
        super().stop()
