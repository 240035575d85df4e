"""The driver installed on a real kube-apiserver: the chart applied, its apps run as processes.

Each app runs with the environment the chart's Deployment/DaemonSet gives its container (so the
chart and the app must agree), a kubeconfig carrying a token of the chart's ServiceAccount for
that app (so the chart's RBAC is all it has), and, for the kubelet plugin, node-local paths in
a temporary directory plus a simulated GB200 node.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import realkube_server
from kubernetes import client
from realkube_server import Credentials, RealKube, wait_for

from adapters.grpc import client as grpc_client
from adapters.nvml import simulated
from core import kinds, models, names, plugin_sockets, ports

REPO_ROOT = realkube_server.REPO_ROOT
RELEASE = "cdd"
NAMESPACE = "nvidia-dra-driver"
WORKLOAD_NAMESPACE = "team-a"
PROFILE = "gb200-nvl72"
# A static token named like the plugin's ServiceAccount: RBAC grants it the plugin's rights,
# but it carries no `user.extra` (no node), as static tokens and client certificates don't.
PLUGIN_USERNAME = (
    f"system:serviceaccount:{NAMESPACE}:{RELEASE}-compute-domain-dra-driver-kubelet-plugin"
)
STATIC_USERS = (PLUGIN_USERNAME,)
START_TIMEOUT_S = 90.0

Obj = dict[str, Any]

# hostCheck off: no host nvidia-imex runs here to answer the plugin's readiness query.
MODES: dict[str, Obj] = {
    "driverManaged": {},
    "hostManaged": {
        "featureGates": {"HostManagedIMEXDaemon": True},
        "resources": {"computeDomains": {"imex": {
            "mode": "hostManaged", "hostCheck": False, "isolation": "none"}}},
    },
}

# Installed only by the tests that ask for them (the `installed` fixture runs MODES).
EXTRA_MODES: dict[str, Obj] = {
    # Channel isolation with 2 assignable channels, so a third ComputeDomain exhausts them.
    "hostManaged-channel-max3": {
        "featureGates": {"HostManagedIMEXDaemon": True},
        "resources": {"computeDomains": {"imex": {
            "mode": "hostManaged", "hostCheck": False, "isolation": "channel",
            "channels": {"max": 3}}}},
    },
    # Channel isolation with every channel (bursts of ComputeDomains).
    "hostManaged-channel": {
        "featureGates": {"HostManagedIMEXDaemon": True},
        "resources": {"computeDomains": {"imex": {
            "mode": "hostManaged", "hostCheck": False, "isolation": "channel"}}},
    },
}


def nodes() -> tuple[str, ...]:
    return tuple(str(n) for n in simulated.profile_nodes(PROFILE))


class AppProcess(realkube_server.ChildProcess):
    """`python -m <module>` from the repo root with an explicit environment."""

    def __init__(
        self, module: str, args: Sequence[str], *, env: Mapping[str, str], log_path: pathlib.Path
    ) -> None:
        self.module = module
        super().__init__([sys.executable, "-m", module, *args], log_path=log_path, env=env,
                         cwd=REPO_ROOT)


def container_env(
    rendered: Sequence[Mapping[str, Any]], *, kind: str, container: str,
    field_refs: Mapping[str, str],
) -> dict[str, str]:
    """The env the chart gives `container` of the `kind` workload (fieldRefs: `field_refs`)."""
    chosen = next(
        c for o in rendered if o["kind"] == kind
        for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == container
    )
    env: dict[str, str] = {}
    for item in chosen.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            if path in field_refs:
                env[item["name"]] = field_refs[path]
    return env


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginNode:
    """One node's plugin directories (short paths: unix sockets are limited to 107 bytes)."""

    name: str
    root: pathlib.Path

    @property
    def pod_uid(self) -> str:
        """The UID the chart's downward API gives the plugin pod (per-pod socket names)."""
        return f"uid-plugin-{self.name}"

    @property
    def registration_socket(self) -> pathlib.Path:
        registry = self.root / "registry"
        return registry / plugin_sockets.registration_socket_name(
            names.DRIVER_NAME, pod_uid=self.pod_uid, registry_dir=str(registry))

    @property
    def dra_socket(self) -> pathlib.Path:
        plugin = self.root / "plugin"
        return plugin / plugin_sockets.dra_socket_name(
            pod_uid=self.pod_uid, plugin_dir=str(plugin))

    @property
    def cdi_root(self) -> pathlib.Path:
        return self.root / "cdi"

    def cdi_file(self, claim_uid: str) -> pathlib.Path:
        return self.cdi_root / names.cdi_spec_file_name(claim_uid)


class Driver:
    """The chart installed on `kube` in `mode`; starts the apps with the chart's identities."""

    def __init__(self, kube: RealKube, *, mode: str, workdir: pathlib.Path) -> None:
        self.kube = kube
        self.mode = mode
        self.workdir = workdir
        self.rendered = render({**MODES, **EXTRA_MODES}[mode])
        self._started: list[AppProcess] = []
        self._node_roots: list[pathlib.Path] = []

    def install(self) -> Driver:
        self.kube.apply(render_crds())
        self.kube.apply(self.rendered)
        for node in nodes()[:4]:
            self.kube.create_node(node)
        self.kube.ensure_namespace(WORKLOAD_NAMESPACE)
        return self

    def service_account(self, component: str) -> str:
        return f"{RELEASE}-compute-domain-dra-driver-{component}"

    def admin(self) -> Any:
        return self.kube.cluster(self.kube.admin_kubeconfig(), component="realkube-admin")

    # -- identities ---------------------------------------------------------------------

    def controller_credentials(self) -> Credentials:
        return self.kube.credentials_for(
            namespace=NAMESPACE, service_account=self.service_account("controller")
        )

    def plugin_credentials(self, node: str, *, server: str = "") -> Credentials:
        """A token of the plugin's ServiceAccount bound to a Pod on `node` (`server`: a proxy)."""
        sa = self.service_account("kubelet-plugin")
        pod = self.kube.create_pod_on_node(
            namespace=NAMESPACE, name=f"plugin-{node}", node=node, service_account=sa
        )
        credentials = self.kube.credentials_for(
            namespace=NAMESPACE, service_account=sa, bound_pod=pod
        )
        if not server:
            return credentials
        kubeconfig = self.kube.kubeconfig(credentials.token, name=f"plugin-{node}-via-proxy",
                                          server=server)
        return Credentials(token=credentials.token, kubeconfig=kubeconfig)

    # -- apps ---------------------------------------------------------------------------

    def launch(self, module: str, args: Sequence[str], env: Mapping[str, str]) -> AppProcess:
        """Start `python -m module args` with `env` (plus PATH/HOME); stopped by `stop()`."""
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        base["PYTHONUNBUFFERED"] = "1"
        base.update(env)
        name = module.rsplit(".", 1)[-1]
        process = AppProcess(
            module, args, env=base, log_path=self.workdir / f"{name}-{len(self._started)}.log"
        )
        self._started.append(process)
        return process

    def start_controller(
        self, *, identity: str = "controller-0", extra_env: Mapping[str, str] | None = None
    ) -> AppProcess:
        env = container_env(
            self.rendered, kind="Deployment", container="controller",
            field_refs={"metadata.namespace": NAMESPACE, "metadata.name": identity},
        )
        env.update({"KUBECONFIG": str(self.controller_credentials().kubeconfig),
                    "HEALTH_PORT": "0", "METRICS_PORT": "0"})
        env.update(extra_env or {})
        return self.launch("apps.controller", [], env)

    def plugin_node(self, node: str) -> PluginNode:
        root = pathlib.Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
        self._node_roots.append(root)
        return PluginNode(name=node, root=root)

    def start_plugin(self, node: PluginNode, *, api_url: str = "") -> AppProcess:
        """The plugin on `node`; `api_url` puts something (a proxy) before the API server."""
        env = container_env(
            self.rendered, kind="DaemonSet", container="compute-domain-kubelet-plugin",
            field_refs={"metadata.namespace": NAMESPACE, "spec.nodeName": node.name,
                        "metadata.uid": node.pod_uid},
        )
        node.root.mkdir(parents=True, exist_ok=True)
        devices = node.root / "devices"
        devices.write_text(simulated.simulated_proc_devices(), encoding="utf-8")
        boot_id = node.root / "boot_id"
        boot_id.write_text(simulated.simulated_boot_id(node.name) + "\n", encoding="utf-8")
        env.update({
            "KUBECONFIG": str(self.plugin_credentials(node.name, server=api_url).kubeconfig),
            "HEALTH_PORT": "0", "METRICS_PORT": "0",
            "NVML": f"simulated:{PROFILE}",
            "CDI_ROOT": str(node.cdi_root),
            "PLUGIN_DIR": str(node.root / "plugin"),
            "REGISTRY_DIR": str(node.root / "registry"),
            # No runtime here: the CDI check judges "unknown" (as on a node without the socket
            # mounted) whatever runtime this machine runs, and still writes its Node condition.
            "CONTAINER_RUNTIME_ENDPOINT": str(node.root / "no-runtime.sock"),
        })
        args = ["--proc-devices", str(devices), "--boot-id-path", str(boot_id),
                "--retry-budget-seconds", "5"]
        return self.launch("apps.kubeletplugin", args, env)

    def workload_pod(self, name: str, *, node: str) -> Obj:
        """A workload Pod bound to `node` (nothing runs it), as the scheduler leaves one."""
        core = client.CoreV1Api(self.kube.admin_client())
        try:  # no controller-manager here creates the namespace's `default` ServiceAccount
            core.create_namespaced_service_account(
                WORKLOAD_NAMESPACE, {"metadata": {"name": "worker"}}
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        return self.kube.create_pod_on_node(
            namespace=WORKLOAD_NAMESPACE, name=name, node=node, service_account="worker"
        )

    def stop(self) -> None:
        for process in self._started:
            process.stop()
        for root in self._node_roots:
            subprocess.run(["rm", "-rf", str(root)], check=False)


def fresh_kube(prefix: str = "realkube-") -> RealKube:
    """A started server for a test; without the binaries: skip, or fail under CI=true."""
    kube = realkube_server.start_fresh(prefix=prefix, static_users=STATIC_USERS)
    if kube is None:
        if os.environ.get("CI") == "true":
            pytest.fail(realkube_server.MISSING)
        pytest.skip(realkube_server.MISSING)
    return kube


def render(values: Mapping[str, Any]) -> list[Obj]:
    sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "helm"))
    import chart_rendering

    return chart_rendering.render(values)


def render_crds() -> list[Obj]:
    sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "helm"))
    import chart_rendering

    return chart_rendering.crds()


def wait_registered(process: AppProcess, node: PluginNode) -> grpc_client.PluginInfo:
    """GetInfo on the registration socket, as the kubelet's plugin watcher does."""

    def probe() -> grpc_client.PluginInfo | None:
        if not process.running:
            raise AssertionError(f"plugin exited before registering:\n{process.output()}")
        return grpc_client.try_register(str(node.registration_socket))

    return wait_for(probe, what="the plugin to register", timeout_s=START_TIMEOUT_S)


def running_or_fail(process: AppProcess) -> Callable[[], None]:
    def check() -> None:
        if not process.running:
            raise AssertionError(f"{process.module} exited:\n{process.output()}")

    return check


def allocated_channel_claim(
    admin: ports.Cluster, *, name: str, node: str, cd_uid: str, pod: Mapping[str, Any]
) -> models.ClaimRef:
    """A channel claim allocated on `node` and reserved for `pod`, as the scheduler leaves it."""
    created = admin.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"devices": {"requests": [{"name": names.CHANNEL_REQUEST_NAME, "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    parameters = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                  "domainID": cd_uid}
    admin.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=WORKLOAD_NAMESPACE, name=name, subresource="status",
        patch={"status": {
            "allocation": {"devices": {
                "results": [{"request": names.CHANNEL_REQUEST_NAME, "driver": names.DRIVER_NAME,
                             "pool": node, "device": names.channel_device_name(0)}],
                "config": [{"source": "FromClaim", "requests": [names.CHANNEL_REQUEST_NAME],
                            "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}],
            }},
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                             "uid": pod["metadata"]["uid"]}],
        }},
    )
    return models.ClaimRef(
        uid=names.ClaimUID(created["metadata"]["uid"]), namespace=WORKLOAD_NAMESPACE, name=name
    )
