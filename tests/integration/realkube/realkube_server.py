"""A real kube-apiserver + etcd on loopback, for the tests that the in-memory cluster cannot answer.

The binaries come from `hack/kube-components.sh` (built once into a cache outside the repo); this
module only starts them: etcd on two free ports, kube-apiserver with a self-signed serving
certificate, a static admin token, RBAC and bound service-account tokens, then installs the
chart's CRDs and the chart itself (rendered by the real Helm engine). Apps get credentials that
are bound **only** to the chart's ServiceAccounts, so the RBAC the chart ships is what they run
under.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, dynamic
from kubernetes.dynamic import exceptions as dynamic_errors

from adapters.kube import KubeCluster

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "kube-components.sh"
DEFAULT_VERSION = "v1.34.4"
ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT_S = 90.0

T = TypeVar("T")

Obj = dict[str, Any]


def binaries_dir() -> pathlib.Path | None:
    """Where kube-apiserver and etcd are: $KUBE_BIN_DIR, else the build script's default cache."""
    explicit = os.environ.get("KUBE_BIN_DIR")
    if explicit:
        return pathlib.Path(explicit)
    cache_home = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    default = cache_home / "cd-dra-driver" / f"kube-{DEFAULT_VERSION}"
    if (default / "kube-apiserver").exists() and (default / "etcd").exists():
        return default
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(probe: Callable[[], T | None], *, what: str, timeout_s: float = 60.0) -> T:
    """Poll `probe` until it returns something other than None/False; fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def feature_gates_args(gates: Mapping[str, bool]) -> list[str]:
    """`--feature-gates=A=true,B=false` for a Kubernetes component; nothing when none is set."""
    if not gates:
        return []
    pairs = (f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))
    return ["--feature-gates=" + ",".join(pairs)]


def runtime_config_args(apis: Mapping[str, bool]) -> list[str]:
    """`--runtime-config=g/v=true,...` for kube-apiserver; nothing when none is set."""
    if not apis:
        return []
    return ["--runtime-config=" + ",".join(
        f"{api}={str(on).lower()}" for api, on in sorted(apis.items()))]


class ChildProcess:
    """A child process whose output goes to a file (a full pipe would stall it)."""

    def __init__(
        self,
        argv: list[str],
        *,
        log_path: pathlib.Path,
        env: Mapping[str, str] | None = None,
        cwd: pathlib.Path | None = None,
    ) -> None:
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()/wait()
        self.popen = subprocess.Popen(
            argv, cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def signal(self, signum: signal.Signals) -> None:
        if self.running:
            self.popen.send_signal(signum)

    def wait(self, timeout_s: float = 60.0) -> int:
        code = self.popen.wait(timeout=timeout_s)
        self._log.close()
        return code

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s; reaps the child."""
        if self.running:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=20)
        self._log.close()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Credentials:
    """A bearer token and the kubeconfig file that carries it."""

    token: str
    kubeconfig: pathlib.Path


class RealKube:
    """etcd + kube-apiserver on loopback; `start()`, then `stop()` (or use as a context)."""

    def __init__(
        self,
        workdir: pathlib.Path,
        *,
        bin_dir: pathlib.Path,
        static_users: Iterable[str] = (),
        static_groups: Mapping[str, str] = {},  # NB: never mutated
        authorization_modes: Sequence[str] = ("RBAC",),
        admission_plugins: Sequence[str] = (),
        feature_gates: Mapping[str, bool] = {},  # NB: never mutated
        runtime_config: Mapping[str, bool] = {},  # NB: never mutated
    ) -> None:
        """`runtime_config`: API group versions to serve or not beyond the defaults
        (`--runtime-config`), e.g. {"resource.k8s.io/v1alpha3": True} for an alpha API."""
        self.workdir = workdir
        self.feature_gates = dict(feature_gates)
        self.runtime_config = dict(runtime_config)
        # username -> the group a static token carries (e.g. system:nodes for a kubelet).
        self.static_groups = dict(static_groups)
        self.authorization_modes = tuple(authorization_modes)
        self.admission_plugins = tuple(admission_plugins)
        self.bin_dir = bin_dir
        self.admin_token = secrets.token_hex(16)
        # username -> a static token: credentials with no `user.extra` at all.
        self.static_tokens = {
            user: secrets.token_hex(16) for user in (*static_users, *static_groups)
        }
        self.port = free_port()
        self._etcd_port = free_port()
        self._etcd_peer_port = free_port()
        self._etcd: ChildProcess | None = None
        self._apiserver: ChildProcess | None = None
        self._admin: client.ApiClient | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> pathlib.Path:
        return self.workdir / "certs" / "apiserver.crt"

    def start(self) -> RealKube:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._write_keys_and_tokens()
            self._start_etcd()
            self.start_apiserver()
        except BaseException:
            self.stop()  # never leave an etcd or API server behind a failed start
            raise
        return self

    def __enter__(self) -> RealKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()  # type: ignore[no-untyped-call]
            self._admin = None
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()

    def _write_keys_and_tokens(self) -> None:
        key = self.workdir / "sa.key"
        if not key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout",
                 "-out", str(self.workdir / "sa.pub")],
                check=True, capture_output=True,
            )
        lines = [f'{self.admin_token},admin,admin-uid,"system:masters"']
        for user, token in self.static_tokens.items():
            group = self.static_groups.get(user)
            lines.append(f'{token},{user},{user}-uid,"{group}"' if group
                         else f"{token},{user},{user}-uid")
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _start_etcd(self) -> None:
        data = self.workdir / "etcd"
        client_url = f"http://127.0.0.1:{self._etcd_port}"
        peer_url = f"http://127.0.0.1:{self._etcd_peer_port}"
        self._etcd = ChildProcess(
            [
                str(self.bin_dir / "etcd"),
                "--data-dir", str(data),
                "--name", "test",
                "--listen-client-urls", client_url,
                "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"test={peer_url}",
                "--unsafe-no-fsync",
            ],
            log_path=self.workdir / "etcd.log",
        )
        http = urllib3.PoolManager()

        def healthy() -> bool:
            assert self._etcd is not None
            if not self._etcd.running:
                raise AssertionError(f"etcd exited:\n{self._etcd.output()[-6000:]}")
            try:
                answer = http.request("GET", f"{client_url}/health", timeout=1.0, retries=False)
            except urllib3.exceptions.HTTPError:
                return False
            return bool(answer.status == 200)

        wait_for(healthy, what="etcd to answer /health", timeout_s=START_TIMEOUT_S)

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port and etcd; waits until /readyz says ok."""
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        self._apiserver = ChildProcess(
            [
                str(self.bin_dir / "kube-apiserver"),
                "--etcd-servers", f"http://127.0.0.1:{self._etcd_port}",
                "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1",
                # NB: from 1.37 the `kubernetes` Service may not point at a loopback address.
                "--endpoint-reconciler-type", "none",
                "--secure-port", str(self.port),
                "--cert-dir", str(certs),
                "--token-auth-file", str(self.workdir / "tokens.csv"),
                "--authorization-mode", ",".join(self.authorization_modes),
                *(["--enable-admission-plugins", ",".join(self.admission_plugins)]
                  if self.admission_plugins else []),
                "--allow-privileged=true",
                "--service-account-issuer", ISSUER,
                "--service-account-key-file", str(self.workdir / "sa.pub"),
                "--service-account-signing-key-file", str(self.workdir / "sa.key"),
                "--service-cluster-ip-range", "10.96.0.0/24",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                *feature_gates_args(self.feature_gates),
                *runtime_config_args(self.runtime_config),
                "--v=1",
            ],
            log_path=self.workdir / "kube-apiserver.log",
        )
        http = urllib3.PoolManager(cert_reqs="CERT_NONE")
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        headers = {"Authorization": f"Bearer {self.admin_token}"}

        def ready() -> bool:
            assert self._apiserver is not None
            if not self._apiserver.running:
                raise AssertionError(f"kube-apiserver exited:\n{self._apiserver.output()[-6000:]}")
            try:
                answer = http.request(
                    "GET", f"{self.url}/readyz", headers=headers, timeout=2.0, retries=False
                )
            except urllib3.exceptions.HTTPError:
                return False
            return answer.status == 200

        wait_for(ready, what="kube-apiserver /readyz", timeout_s=START_TIMEOUT_S)

    def stop_apiserver(self) -> None:
        if self._apiserver is not None:
            self._apiserver.stop()
            self._apiserver = None

    def apiserver_log(self) -> str:
        return self._apiserver.output() if self._apiserver is not None else ""

    # -- clients ---------------------------------------------------------------------------

    def kubeconfig(self, token: str, *, name: str, server: str = "") -> pathlib.Path:
        """A kubeconfig file for `token`, trusting the server's self-signed certificate.

        `server` replaces the API server's URL (a proxy in front of it)."""
        path = self.workdir / f"kubeconfig-{name}.yaml"
        # NB: written aside and renamed: threads that build clients at once read it meanwhile.
        staged = path.with_name(f".{path.name}.{threading.get_ident()}")
        staged.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "real", "cluster": {
                        "server": server or self.url, "certificate-authority": str(self.ca_file)}}],
                    "users": [{"name": name, "user": {"token": token}}],
                    "contexts": [{"name": "real", "context": {"cluster": "real", "user": name}}],
                    "current-context": "real",
                }
            ),
            encoding="utf-8",
        )
        os.replace(staged, path)
        return path

    def admin_kubeconfig(self) -> pathlib.Path:
        return self.kubeconfig(self.admin_token, name="admin")

    def admin_client(self) -> client.ApiClient:
        if self._admin is None:
            configuration = client.Configuration()
            configuration.host = self.url
            configuration.ssl_ca_cert = str(self.ca_file)
            configuration.api_key = {"authorization": f"Bearer {self.admin_token}"}
            self._admin = client.ApiClient(configuration)
        return self._admin

    def cluster(self, kubeconfig: pathlib.Path, *, component: str = "realkube-test") -> KubeCluster:
        """Our own adapter (`KubeCluster`) over `kubeconfig`."""
        return KubeCluster.from_config(str(kubeconfig), component=component)

    # -- installing -----------------------------------------------------------------------

    def apply(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Create each object (CRDs first and waited for), as `kubectl create` would."""
        pending = list(objects)
        crds = [o for o in pending if o.get("kind") == "CustomResourceDefinition"]
        rest = [o for o in pending if o.get("kind") != "CustomResourceDefinition"]
        namespaces = [o for o in rest if o.get("kind") == "Namespace"]
        others = [o for o in rest if o.get("kind") != "Namespace"]
        dyn = dynamic.DynamicClient(self.admin_client())
        for obj in [*crds, *namespaces]:
            self._create(dyn, obj)
        for crd in crds:
            self._wait_established(str(crd["metadata"]["name"]))
        if crds:
            dyn = dynamic.DynamicClient(self.admin_client())  # fresh discovery
        for obj in others:
            self._create(dyn, obj)

    def ensure_namespace(self, name: str) -> None:
        try:
            client.CoreV1Api(self.admin_client()).create_namespace(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _create(self, dyn: dynamic.DynamicClient, obj: Mapping[str, Any]) -> None:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj.get("metadata", {}).get("namespace")
        if resource.namespaced and namespace:
            self.ensure_namespace(str(namespace))
        # NB: already there is fine: installing twice is a no-op.
        with contextlib.suppress(dynamic_errors.ConflictError):
            resource.create(body=dict(obj), namespace=namespace if resource.namespaced else None)

    def _wait_established(self, name: str) -> None:
        api = client.ApiextensionsV1Api(self.admin_client())

        def established() -> bool:
            crd = api.read_custom_resource_definition(name)
            return any(
                c.type == "Established" and c.status == "True"
                for c in (crd.status.conditions or [])
            )

        wait_for(established, what=f"CRD {name} Established", timeout_s=30)

    # -- identities -----------------------------------------------------------------------

    def service_account_token(
        self, *, namespace: str, service_account: str, bound_pod: Mapping[str, Any] | None = None
    ) -> str:
        """A TokenRequest for a chart ServiceAccount, bound to `bound_pod` when given."""
        spec: Obj = {"audiences": [ISSUER], "expirationSeconds": 3600}
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "apiVersion": "v1", "kind": "Pod",
                "name": bound_pod["metadata"]["name"], "uid": bound_pod["metadata"]["uid"],
            }
        answer = client.CoreV1Api(self.admin_client()).create_namespaced_service_account_token(
            service_account, namespace,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(answer.status.token)

    def credentials_for(
        self, *, namespace: str, service_account: str, bound_pod: Mapping[str, Any] | None = None
    ) -> Credentials:
        token = self.service_account_token(
            namespace=namespace, service_account=service_account, bound_pod=bound_pod
        )
        suffix = service_account
        if bound_pod is not None:
            suffix = f"{service_account}-{bound_pod['metadata']['name']}"
        return Credentials(token=token, kubeconfig=self.kubeconfig(token, name=suffix))

    def create_node(self, name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
        node = client.CoreV1Api(self.admin_client()).create_node(
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": name, "labels": dict(labels or {})}}
        )
        return dict(self.admin_client().sanitize_for_serialization(node))

    def create_pod_on_node(
        self, *, namespace: str, name: str, node: str, service_account: str
    ) -> Obj:
        """A Pod object bound to `node` (nothing runs it): what a plugin's token is bound to."""
        self.ensure_namespace(namespace)
        core = client.CoreV1Api(self.admin_client())
        try:
            existing = core.read_namespaced_pod(name, namespace)
            return dict(self.admin_client().sanitize_for_serialization(existing))
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        pod = core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "plugin", "image": "registry.invalid/plugin:test"}],
                },
            },
        )
        return dict(self.admin_client().sanitize_for_serialization(pod))


MISSING = (
    "no kube-apiserver/etcd (run `make kube-components`, which builds them once into "
    "~/.cache/cd-dra-driver) or no openssl"
)


def start_fresh(*, prefix: str = "realkube-", static_users: Iterable[str] = ()) -> RealKube | None:
    """A started server in a new temporary directory, or None when the binaries (`MISSING`)
    are not there. The caller stops it and removes `workdir`."""
    bin_dir = binaries_dir()
    if bin_dir is None or shutil.which("openssl") is None:
        return None
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    return RealKube(workdir, bin_dir=bin_dir, static_users=static_users).start()
