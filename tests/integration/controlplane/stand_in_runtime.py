"""A stand-in container runtime: the Kubernetes CRI (`runtime.v1`) over a unix socket.

Why: the control-plane tier runs a real kubelet, and a kubelet needs a CRI runtime. A real one
(containerd + runc) needs root, images, cgroups and network namespaces; this one keeps
sandboxes, containers and images in memory and runs as real host processes only the containers
that a *recipe* names (our own apps, with the node-local files a simulated node needs). Every
other container "sleeps": RUNNING from StartContainer until stopped, with no process.

What the kubelet relies on and we honour (see the CRI proto's comments and `k8s.io/cri-client`):
- statuses carry metadata, created_at > 0, image + image_ref, the labels and annotations given;
- `PullImageResponse.image_ref == Image.id == Container(Status).image_id` (required from 1.36);
- PodSandboxStatus echoes the sandbox's namespace options (else the kubelet sees a changed
  sandbox and recreates it forever) and an IP for pods not on the host network;
- ContainerStatus.log_path is the full path `log_directory/log_path` (as containerd reports it),
  a file in the CRI log format, so `kubectl logs` and the kubelet's log rotation work;
- stopping what is stopped and removing what is gone are not errors; statuses of (and
  StopContainer on) unknown ids are NOT_FOUND, as with containerd.

The Python stubs are generated at start-up from the CRI proto with `grpc_tools.protoc`
(`load_cri`), so the same module serves the proto of whichever Kubernetes version runs.

Run: `python stand_in_runtime.py --socket /tmp/x/cri.sock --state-dir /tmp/x/state [...]`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import pathlib
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

import grpc
import yaml

log = logging.getLogger("stand-in-runtime")

RUNTIME_NAME = "stand-in-runtime"
RUNTIME_VERSION = "0.1.0"
# NB: the kubelet refuses any runtime whose VersionResponse.version is not exactly "0.1.0".
KUBELET_API_VERSION = "0.1.0"
RUNTIME_API_VERSION = "v1"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DEFAULT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
PROTO_GLOB = "k8s.io/cri-api@*/pkg/apis/runtime/v1/api.proto"
# The stubs' module names: unique, so they cannot clash with other generated modules or protos
# registered in the same process's descriptor pool.
STUB_STEM = "stand_in_cri_runtime_v1"
IMAGE_SIZE_BYTES = 1 << 20  # "Must be > 0" (Image.size); any constant does
EXEC_OUTPUT_CAP = 16 << 20  # ExecSyncResponse: "cap the output of this response to 16MB"
SHUTDOWN_GRACE_S = 5.0
MAX_UNIX_SOCKET_PATH = 107

CREATED, RUNNING, EXITED = "CONTAINER_CREATED", "CONTAINER_RUNNING", "CONTAINER_EXITED"


class CriError(Exception):
    """An RPC failure with its gRPC status code (what a real runtime would answer)."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CdiError(Exception):
    """CDI devices that could not be resolved; the message is what CreateContainer returns."""


# -- the proto and its stubs -------------------------------------------------------------------


def _version_key(path: pathlib.Path) -> tuple[int, ...]:
    # .../k8s.io/cri-api@v0.37.2/pkg/... -> (0, 37, 2): newest wins, not the longest string.
    module_dir = next((p for p in path.parts if p.startswith("cri-api@")), "")
    return tuple(int(n) for n in re.findall(r"\d+", module_dir))


def _go_module_cache() -> pathlib.Path | None:
    explicit = os.environ.get("GOMODCACHE")
    if explicit:
        return pathlib.Path(explicit)
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go",
                                                                     os.X_OK) else None)
    if go:
        try:
            out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                                 timeout=20, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        if out:
            return pathlib.Path(out)
    gopath = os.environ.get("GOPATH") or str(pathlib.Path.home() / "go")
    return pathlib.Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def find_proto(explicit: str | os.PathLike[str] | None = None) -> pathlib.Path | None:
    """The CRI proto to serve: `explicit`, else $CRI_API_PROTO, else the newest
    `k8s.io/cri-api@*` in the Go module cache. None when there is none."""
    if explicit:
        return pathlib.Path(explicit)
    from_env = os.environ.get("CRI_API_PROTO")
    if from_env:
        return pathlib.Path(from_env)
    cache = _go_module_cache()
    if cache is None or not cache.is_dir():
        return None
    found = sorted(cache.glob(PROTO_GLOB), key=_version_key)
    return found[-1] if found else None


_loaded: tuple[str, Any, Any] | None = None
_load_lock = threading.Lock()


def _import_file(name: str, path: pathlib.Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    # NB: registered before running it: the _grpc module imports the _pb2 one by this name.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_cri(proto_path: str | os.PathLike[str],
             stubs_dir: str | os.PathLike[str] | None = None) -> tuple[Any, Any]:
    """Generate and import the CRI stubs for `proto_path`: `(api_pb2, api_pb2_grpc)`.

    Once per process: protobuf registers the messages in one global pool, so a second call
    returns the first stubs (and refuses a proto with a different content). Without
    `stubs_dir`, the generated files live in a temporary directory removed after import.

    A client: `pb2, rpc = load_cri(path)`, `channel = grpc.insecure_channel("unix:///...")`,
    `rpc.RuntimeServiceStub(channel).Version(pb2.VersionRequest(version="0.1.0"))`.
    """
    global _loaded
    source = pathlib.Path(proto_path).read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    with _load_lock:
        if _loaded is not None:
            if _loaded[0] != digest:
                raise RuntimeError(f"CRI stubs of another proto are already loaded; cannot "
                                   f"load {proto_path} in the same process")
            return _loaded[1], _loaded[2]
        with tempfile.TemporaryDirectory(prefix="cri-stubs-") as scratch:
            out = pathlib.Path(stubs_dir) if stubs_dir is not None else pathlib.Path(scratch)
            out.mkdir(parents=True, exist_ok=True)
            # Copied under a fixed name: the proto's file name decides the module names.
            (out / f"{STUB_STEM}.proto").write_bytes(source)
            from grpc_tools import protoc

            code = protoc.main([
                "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                f"--grpc_python_out={out}", str(out / f"{STUB_STEM}.proto"),
            ])
            if code != 0:
                raise RuntimeError(f"protoc failed ({code}) on {proto_path}")
            pb2 = _import_file(f"{STUB_STEM}_pb2", out / f"{STUB_STEM}_pb2.py")
            pb2_grpc = _import_file(f"{STUB_STEM}_pb2_grpc", out / f"{STUB_STEM}_pb2_grpc.py")
        _loaded = (digest, pb2, pb2_grpc)
        return pb2, pb2_grpc


def key_value(pb2: Any, key: str, value: str) -> Any:
    """A `KeyValue` (container env entry) for either proto: `value` is bytes from cri-api 0.37."""
    field = pb2.KeyValue.DESCRIPTOR.fields_by_name["value"]
    if field.type == field.TYPE_BYTES:
        return pb2.KeyValue(key=key, value=value.encode("utf-8", "surrogateescape"))
    return pb2.KeyValue(key=key, value=value)


def _text(value: str | bytes) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


# -- CDI ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CdiEdits:
    """The container edits of a set of CDI devices, in injection order."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()


_skipped_specs: set[tuple[str, int]] = set()


def _skip_spec(path: pathlib.Path, error: object) -> None:
    # Once per file version: specs are reread on every CreateContainer.
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        key = (str(path), 0)
    if key not in _skipped_specs:
        _skipped_specs.add(key)
        log.warning("cdi spec skipped path=%s error=%s", path, " ".join(str(error).split()))


def _read_spec(path: pathlib.Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        # Like the CDI cache: a broken spec file is skipped, the others still count.
        _skip_spec(path, exc)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        _skip_spec(path, "no kind")
        return None
    return data


def _spec_devices(dirs: Sequence[pathlib.Path]) -> dict[str, list[tuple[int, dict[str, Any],
                                                                          dict[str, Any]]]]:
    """Qualified device name -> [(dir priority, spec, device)]."""
    found: dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
    for priority, directory in enumerate(dirs):
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if path.suffix not in (".json", ".yaml", ".yml") or not path.is_file():
                continue
            spec = _read_spec(path)
            if spec is None:
                continue
            for device in spec.get("devices") or []:
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    name = f"{spec['kind']}={device['name']}"
                    found.setdefault(name, []).append((priority, spec, device))
    return found


def resolve_cdi(names: Sequence[str], dirs: Sequence[pathlib.Path]) -> CdiEdits:
    """The edits of the CDI devices `names` from the spec files in `dirs`.

    As in the CDI library: a later directory takes precedence over an earlier one, two specs in
    the same directory defining one device make it unresolvable, a spec's own `containerEdits`
    apply once (before its first device's). Raises `CdiError` naming what is unresolvable.
    """
    if not names:
        return CdiEdits()
    index = _spec_devices(dirs)
    chosen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    missing = []
    for name in names:
        candidates = index.get(name, [])
        top = max((p for p, _, _ in candidates), default=None)
        best = [(s, d) for p, s, d in candidates if p == top]
        if len(best) != 1:
            missing.append(name)
            continue
        chosen.append(best[0])
    if missing:
        raise CdiError(f"CDI device injection failed: unresolvable CDI devices "
                       f"{', '.join(missing)} (spec dirs searched: "
                       f"{', '.join(str(d) for d in dirs) or 'none'})")
    env: list[str] = []
    nodes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    applied_specs: list[int] = []

    def apply(edits: Any) -> None:
        if not isinstance(edits, dict):
            return
        env.extend(str(e) for e in edits.get("env") or [])
        nodes.extend(dict(n) for n in edits.get("deviceNodes") or [] if isinstance(n, dict))
        mounts.extend(dict(m) for m in edits.get("mounts") or [] if isinstance(m, dict))

    for spec, device in chosen:
        if id(spec) not in applied_specs:
            applied_specs.append(id(spec))
            apply(spec.get("containerEdits"))
        apply(device.get("containerEdits"))
    return CdiEdits(tuple(env), tuple(nodes), tuple(mounts))


def cdi_device_names(config: Any) -> list[str]:
    """The CDI devices a ContainerConfig asks for: the `CDI_devices` field, then the
    `cdi.k8s.io/*` annotations (comma-separated, as containerd reads them), each once."""
    names = [d.name for d in config.CDI_devices]
    for key in sorted(config.annotations):
        if key.startswith(CDI_ANNOTATION_PREFIX):
            names.extend(n.strip() for n in config.annotations[key].split(",") if n.strip())
    return list(dict.fromkeys(names))


# -- recipes and templates ---------------------------------------------------------------------


RECIPE_KEYS = frozenset({"name", "match", "path", "env", "workdir"})
MATCH_KEYS = frozenset({"command0", "arg1", "image"})
_TEMPLATE = re.compile(r"\{(mount:[^}]*|[a-z_]+)\}")
TEMPLATE_NAMES = frozenset({"state", "pod_name", "pod_namespace", "pod_uid", "pod_ip",
                            "node_ip", "api_server", "container_name", "container_id"})


def load_recipes(path: pathlib.Path | None) -> list[dict[str, Any]]:
    """The recipes file: a JSON list of {"match", "path", "env", "workdir"}; [] when absent."""
    if path is None or not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"recipes file {path}: a JSON list expected")
    for recipe in data:
        if not isinstance(recipe, dict) or not isinstance(recipe.get("match"), dict):
            raise ValueError(f"recipes file {path}: each recipe needs a 'match' object: {recipe}")
        unknown = (set(recipe) - RECIPE_KEYS) | (set(recipe["match"]) - MATCH_KEYS)
        if unknown or not recipe["match"]:
            raise ValueError(f"recipes file {path}: unknown or empty keys {sorted(unknown)} "
                             f"in {recipe}")
    return data


def match_recipe(recipes: Iterable[dict[str, Any]], *, command: Sequence[str],
                 images: Iterable[str]) -> dict[str, Any] | None:
    """The first recipe whose every `match` key holds: `command0` (command[0] or its base
    name), `arg1` (the word after it: a subcommand) and `image` (any name the container's
    image goes by)."""
    image_names = set(images)
    for recipe in recipes:
        match = recipe["match"]
        if "command0" in match and not (
                command and match["command0"] in (command[0], posixpath.basename(command[0]))):
            continue
        if "arg1" in match and not (len(command) > 1 and command[1] == match["arg1"]):
            continue
        if "image" in match and match["image"] not in image_names:
            continue
        return recipe
    return None


@dataclasses.dataclass(frozen=True)
class MountPoint:
    """A container mount: the kubelet's, or a CDI one."""

    container_path: str
    host_path: str
    readonly: bool


def host_path_of(container_path: str, mounts: Sequence[MountPoint]) -> str:
    """The host path behind `container_path`, through the deepest mount containing it."""
    target = posixpath.normpath(container_path)
    best: MountPoint | None = None
    for mount in mounts:
        root = posixpath.normpath(mount.container_path)
        inside = target == root or target.startswith(root.rstrip("/") + "/")
        if inside and (best is None or len(root) > len(posixpath.normpath(best.container_path))):
            best = mount
    if best is None:
        raise ValueError(f"no mount at or above {container_path} (mounts: "
                         f"{', '.join(m.container_path for m in mounts) or 'none'})")
    rest = posixpath.relpath(target, posixpath.normpath(best.container_path))
    return best.host_path if rest == "." else os.path.join(best.host_path, rest)


def expand(template: str, *, values: Mapping[str, str], mounts: Sequence[MountPoint]) -> str:
    """`template` with `{mount:/path}`, `{state}`, `{pod_name}`, ... replaced.

    An unknown `{name}` is an error rather than kept: it is a typo in a recipe."""

    def one(found: re.Match[str]) -> str:
        key = found.group(1)
        if key.startswith("mount:"):
            return host_path_of(key[len("mount:"):], mounts)
        if key not in values:
            raise ValueError(f"unknown template {{{key}}} in {template!r} (known: mount:/path, "
                             f"{', '.join(sorted(values))})")
        return values[key]

    return _TEMPLATE.sub(one, template)


def resolve_executable(command0: str, recipe_path: Sequence[str], search_path: str) -> str | None:
    """The host executable for a container's command[0]: its base name on the recipe's PATH
    first (container paths are not host paths), else the path itself, else on `search_path`."""
    if recipe_path:
        found = shutil.which(posixpath.basename(command0), path=os.pathsep.join(recipe_path))
        if found:
            return found
    if os.path.isabs(command0) and os.path.isfile(command0) and os.access(command0, os.X_OK):
        return command0
    return shutil.which(command0, path=search_path)


def kubeconfig_for(*, server: str, service_account_dir: str, namespace: str) -> dict[str, Any]:
    """A kubeconfig that authenticates as the pod's ServiceAccount, reading the token the
    kubelet projects (and refreshes) in place. NB: the `kubernetes` client reads `tokenFile`
    once, when the config is loaded."""
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {
            "server": server,
            "certificate-authority": os.path.join(service_account_dir, "ca.crt")}}],
        "users": [{"name": "service-account", "user": {
            "tokenFile": os.path.join(service_account_dir, "token")}}],
        "contexts": [{"name": "pod", "context": {
            "cluster": "cluster", "user": "service-account", "namespace": namespace}}],
        "current-context": "pod",
    }


# -- records -----------------------------------------------------------------------------------


def _write_json(path: pathlib.Path, data: Any) -> None:
    # Atomic: a reader polling the directory never sees half a file.
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(scratch, path)


def records(state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every container the runtime was asked to create (one JSON record each), oldest first."""
    directory = pathlib.Path(state_dir) / "records"
    if not directory.is_dir():
        return []
    found = [json.loads(p.read_text(encoding="utf-8")) for p in directory.glob("*.json")]
    return sorted(found, key=lambda r: (r.get("created_at", 0), r.get("container_id", "")))


# -- container output --------------------------------------------------------------------------


def cri_timestamp(ns: int | None = None) -> str:
    """RFC 3339 with nanoseconds, UTC: the timestamp of a CRI log line."""
    ns = time.time_ns() if ns is None else ns
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


def _touch(path: pathlib.Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:
        log.warning("cannot create log path=%s error=%s", path, exc)


class LogSink:
    """A process's output: raw into the per-container log, and in the CRI log format
    (`<RFC3339Nano> stdout|stderr F <line>`) into the kubelet's log path when it has one."""

    def __init__(self, plain: pathlib.Path, cri: pathlib.Path | None) -> None:
        self._lock = threading.Lock()
        self._plain: IO[bytes] = open(plain, "ab")  # noqa: SIM115 - closed in close()
        self._cri_path = cri
        self._cri = self._open_cri()

    def _open_cri(self) -> IO[bytes] | None:
        if self._cri_path is None:
            return None
        try:
            self._cri_path.parent.mkdir(parents=True, exist_ok=True)
            return open(self._cri_path, "ab")
        except OSError as exc:
            log.warning("cannot open log path=%s error=%s", self._cri_path, exc)
            return None

    def write(self, stream: str, line: bytes) -> None:
        with self._lock:
            self._plain.write(line)
            self._plain.flush()
            if self._cri is not None:
                body = line[:-1] if line.endswith(b"\n") else line
                self._cri.write(f"{cri_timestamp()} {stream} F ".encode() + body + b"\n")
                self._cri.flush()

    def reopen(self) -> None:
        """After the kubelet rotated the log: write to a new file at the same path."""
        with self._lock:
            if self._cri is not None:
                self._cri.close()
            self._cri = self._open_cri()

    def close(self) -> None:
        with self._lock:
            self._plain.close()
            if self._cri is not None:
                self._cri.close()
                self._cri = None


def _pump(pipe: IO[bytes], stream: str, sink: LogSink) -> None:
    with pipe:
        for line in iter(pipe.readline, b""):
            sink.write(stream, line)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def exit_code_of(returncode: int) -> int:
    """Popen's return code as a container exit code: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


# -- state -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Sandbox:
    id: str
    config: Any
    runtime_handler: str
    created_at: int
    ip: str
    ready: bool = True


@dataclasses.dataclass
class Image:
    id: str
    repo_tags: list[str]
    size: int = IMAGE_SIZE_BYTES


@dataclasses.dataclass
class Container:
    id: str
    sandbox_id: str
    config: Any
    sandbox_config: Any
    image_name: str
    image_id: str
    created_at: int
    workdir: pathlib.Path  # the per-container directory: `{state}`, logs, kubeconfig
    log_path: str  # what ContainerStatus reports; the CRI-format file when absolute
    env: dict[str, str]  # the kubelet's envs, then the CDI env edits
    cdi: CdiEdits
    mounts: list[MountPoint]
    state: str = CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    recipe: dict[str, Any] | None = None
    process: subprocess.Popen[bytes] | None = None
    sink: LogSink | None = None
    exec_env: dict[str, str] = dataclasses.field(default_factory=dict)
    exec_cwd: str = ""
    recipe_path: list[str] = dataclasses.field(default_factory=list)
    resources: Any = None
    exited: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def pod(self) -> str:
        meta = self.sandbox_config.metadata
        return f"{meta.namespace}/{meta.name}"

    @property
    def name(self) -> str:
        return str(self.config.metadata.name)


def _event(what: str, **context: object) -> None:
    log.info("%s %s", what, " ".join(f"{k}={v}" for k, v in context.items()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The command line, parsed."""

    state_dir: pathlib.Path
    node_ip: str = "127.0.0.1"
    api_server: str = ""
    recipes: pathlib.Path | None = None
    cdi_dirs: tuple[pathlib.Path, ...] = ()
    status_info: pathlib.Path | None = None
    # {"runtimeName": ..., "runtimeVersion": ...} for Version (answer like CRI-O, say).
    version_info: pathlib.Path | None = None


class StandIn:
    """Sandboxes, containers and images, behind one lock; the RPCs of both services."""

    def __init__(self, pb2: Any, settings: Settings) -> None:
        self.pb2 = pb2
        self.settings = settings
        self._lock = threading.RLock()
        self._sandboxes: dict[str, Sandbox] = {}
        self._containers: dict[str, Container] = {}
        self._images: dict[str, Image] = {}
        self._execs: set[subprocess.Popen[bytes]] = set()
        self._ips = 0
        settings.state_dir.mkdir(parents=True, exist_ok=True)

    # -- lookups (callers hold the lock) --

    def _sandbox(self, sandbox_id: str) -> Sandbox:
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            raise CriError(grpc.StatusCode.NOT_FOUND, f"pod sandbox {sandbox_id!r} not found")
        return found

    def _container(self, container_id: str) -> Container:
        found = self._containers.get(container_id)
        if found is None:
            raise CriError(grpc.StatusCode.NOT_FOUND, f"container {container_id!r} not found")
        return found

    def _image(self, ref: str) -> Image | None:
        if ref in self._images:
            return self._images[ref]
        return next((i for i in self._images.values() if ref in i.repo_tags), None)

    def _next_ip(self) -> str:
        self._ips += 1
        high, low = divmod(self._ips - 1, 254)
        if high > 255:
            raise CriError(grpc.StatusCode.RESOURCE_EXHAUSTED, "no pod IPs left in 127.1.0.0/16")
        return f"127.1.{high}.{low + 1}"

    # -- runtime --

    def Version(self, request: Any) -> Any:
        named = self._json_object(self.settings.version_info, "version info")
        return self.pb2.VersionResponse(
            version=KUBELET_API_VERSION,
            runtime_name=str(named.get("runtimeName", RUNTIME_NAME)),
            runtime_version=str(named.get("runtimeVersion", RUNTIME_VERSION)),
            runtime_api_version=RUNTIME_API_VERSION)

    def Status(self, request: Any) -> Any:
        pb2 = self.pb2
        conditions = [pb2.RuntimeCondition(type="RuntimeReady", status=True),
                      pb2.RuntimeCondition(type="NetworkReady", status=True)]
        info = self._status_info() if request.verbose else {}
        return pb2.StatusResponse(
            status=pb2.RuntimeStatus(conditions=conditions), info=info,
            runtime_handlers=[pb2.RuntimeHandler(name="", features=pb2.RuntimeHandlerFeatures())],
            features=pb2.RuntimeFeatures())

    def _status_info(self) -> dict[str, str]:
        data = self._json_object(self.settings.status_info, "status info")
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}

    @staticmethod
    def _json_object(path: pathlib.Path | None, what: str) -> dict[str, Any]:
        # Reread on every call: a test changes the file while the runtime runs.
        if path is None or not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CriError(grpc.StatusCode.UNKNOWN, f"{what} {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise CriError(grpc.StatusCode.UNKNOWN, f"{what} {path}: a JSON object expected")
        return data

    def RuntimeConfig(self, request: Any) -> Any:
        pb2 = self.pb2
        return pb2.RuntimeConfigResponse(
            linux=pb2.LinuxRuntimeConfiguration(cgroup_driver=pb2.CGROUPFS))

    def UpdateRuntimeConfig(self, request: Any) -> Any:
        return self.pb2.UpdateRuntimeConfigResponse()

    # -- sandboxes --

    def RunPodSandbox(self, request: Any) -> Any:
        config = request.config
        if request.runtime_handler:
            raise CriError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"no runtime handler {request.runtime_handler!r} (only the default)")
        meta = config.metadata
        host_network = (config.linux.security_context.namespace_options.network
                        == self.pb2.NODE)
        with self._lock:
            ip = self.settings.node_ip if host_network else self._next_ip()
            sandbox = Sandbox(id=os.urandom(32).hex(), config=config, runtime_handler="",
                              created_at=time.time_ns(), ip=ip)
            self._sandboxes[sandbox.id] = sandbox
        _event("sandbox created", id=sandbox.id[:13], pod=f"{meta.namespace}/{meta.name}",
               uid=meta.uid, attempt=meta.attempt, ip=ip, host_network=host_network)
        return self.pb2.RunPodSandboxResponse(pod_sandbox_id=sandbox.id)

    def StopPodSandbox(self, request: Any) -> Any:
        with self._lock:
            sandbox = self._sandboxes.get(request.pod_sandbox_id)
            if sandbox is None:  # "must not return an error if ... already been reclaimed"
                return self.pb2.StopPodSandboxResponse()
            members = [c for c in self._containers.values() if c.sandbox_id == sandbox.id]
        for container in members:  # "any running containers ... must be forcibly terminated"
            self._stop(container, timeout_s=0)
        with self._lock:
            was_ready, sandbox.ready = sandbox.ready, False
        if was_ready:
            meta = sandbox.config.metadata
            _event("sandbox stopped", id=sandbox.id[:13], pod=f"{meta.namespace}/{meta.name}")
        return self.pb2.StopPodSandboxResponse()

    def RemovePodSandbox(self, request: Any) -> Any:
        with self._lock:
            sandbox = self._sandboxes.get(request.pod_sandbox_id)
            if sandbox is None:
                return self.pb2.RemovePodSandboxResponse()
            members = [c for c in self._containers.values() if c.sandbox_id == sandbox.id]
        for container in members:
            self._remove(container)
        with self._lock:
            self._sandboxes.pop(sandbox.id, None)
        meta = sandbox.config.metadata
        _event("sandbox removed", id=sandbox.id[:13], pod=f"{meta.namespace}/{meta.name}")
        return self.pb2.RemovePodSandboxResponse()

    def _sandbox_status(self, sandbox: Sandbox) -> Any:
        pb2 = self.pb2
        config = sandbox.config
        return pb2.PodSandboxStatus(
            id=sandbox.id, metadata=config.metadata,
            state=pb2.SANDBOX_READY if sandbox.ready else pb2.SANDBOX_NOTREADY,
            created_at=sandbox.created_at,
            network=pb2.PodSandboxNetworkStatus(ip=sandbox.ip),
            # NB: the kubelet compares this with the pod's hostNetwork; missing, a host-network
            # pod's sandbox looks changed and is recreated over and over.
            linux=pb2.LinuxPodSandboxStatus(namespaces=pb2.Namespace(
                options=config.linux.security_context.namespace_options)),
            labels=dict(config.labels), annotations=dict(config.annotations),
            runtime_handler=sandbox.runtime_handler)

    def PodSandboxStatus(self, request: Any) -> Any:
        with self._lock:
            sandbox = self._sandbox(request.pod_sandbox_id)
            status = self._sandbox_status(sandbox)
        info = ({"info": json.dumps({"ip": sandbox.ip, "log_directory":
                                     sandbox.config.log_directory})}
                if request.verbose else {})
        return self.pb2.PodSandboxStatusResponse(status=status, info=info,
                                                 timestamp=time.time_ns())

    def _list_sandboxes(self, request: Any) -> list[Any]:
        pb2 = self.pb2
        has_filter = request.HasField("filter")
        wanted = request.filter
        items = []
        with self._lock:
            for sandbox in self._sandboxes.values():
                state = pb2.SANDBOX_READY if sandbox.ready else pb2.SANDBOX_NOTREADY
                labels = sandbox.config.labels
                if has_filter and (
                        (wanted.id and wanted.id != sandbox.id)
                        or (wanted.HasField("state") and wanted.state.state != state)
                        or any(labels.get(k) != v for k, v in wanted.label_selector.items())):
                    continue
                items.append(pb2.PodSandbox(
                    id=sandbox.id, metadata=sandbox.config.metadata, state=state,
                    created_at=sandbox.created_at, labels=dict(labels),
                    annotations=dict(sandbox.config.annotations),
                    runtime_handler=sandbox.runtime_handler))
        return items

    def ListPodSandbox(self, request: Any) -> Any:
        return self.pb2.ListPodSandboxResponse(items=self._list_sandboxes(request))

    def StreamPodSandboxes(self, request: Any) -> Iterator[Any]:
        items = self._list_sandboxes(request)
        # "lists of at least one item": nothing at all when there is nothing.
        return iter([self.pb2.StreamPodSandboxesResponse(pod_sandboxes=items)] if items else [])

    def UpdatePodSandboxResources(self, request: Any) -> Any:
        return self.pb2.UpdatePodSandboxResourcesResponse()

    # -- containers --

    def CreateContainer(self, request: Any) -> Any:
        config = request.config
        sandbox_config = request.sandbox_config
        meta = sandbox_config.metadata
        name = config.metadata.name
        cdi_names = cdi_device_names(config)
        try:
            cdi = resolve_cdi(cdi_names, self.settings.cdi_dirs)
        except CdiError as exc:
            _event("container refused", pod=f"{meta.namespace}/{meta.name}", name=name,
                   error=exc)
            raise CriError(grpc.StatusCode.UNKNOWN, str(exc)) from exc
        env = {k.key: _text(k.value) for k in config.envs}
        for entry in cdi.env:
            key, _, value = entry.partition("=")
            env[key] = value
        mounts = [MountPoint(m.container_path, m.host_path, m.readonly) for m in config.mounts]
        mounts += [MountPoint(str(m.get("containerPath", "")), str(m.get("hostPath", "")),
                              "ro" in (m.get("options") or [])) for m in cdi.mounts]
        container_id = os.urandom(32).hex()
        log_path = (os.path.join(sandbox_config.log_directory, config.log_path)
                    if sandbox_config.log_directory and config.log_path else config.log_path)
        with self._lock:  # one section: the name check and the registration
            sandbox = self._sandbox(request.pod_sandbox_id)
            if not sandbox.ready:
                raise CriError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"pod sandbox {sandbox.id} is not ready")
            for other in self._containers.values():
                if (other.sandbox_id == sandbox.id and other.name == name
                        and other.config.metadata.attempt == config.metadata.attempt):
                    raise CriError(grpc.StatusCode.ALREADY_EXISTS,
                                   f"container name {name!r} attempt "
                                   f"{config.metadata.attempt} is reserved for {other.id}")
            image = self._image(config.image.image)
            if image is None:
                raise CriError(grpc.StatusCode.NOT_FOUND,
                               f"failed to resolve image {config.image.image!r}: not found")
            container = Container(
                id=container_id, sandbox_id=sandbox.id, config=config,
                sandbox_config=sandbox_config,
                image_name=config.image.user_specified_image or image.repo_tags[0],
                image_id=image.id, created_at=time.time_ns(),
                workdir=(self.settings.state_dir / "containers"
                         / f"{meta.namespace}_{meta.name}_{name}_{config.metadata.attempt}"
                           f"_{container_id[:12]}"),
                log_path=log_path, env=env, cdi=cdi, mounts=mounts,
                resources=config.linux.resources if config.linux.HasField("resources") else None)
            self._containers[container_id] = container
        container.workdir.mkdir(parents=True, exist_ok=True)
        self._write_record(container, cdi_names)
        _event("container created", id=container_id[:13], pod=container.pod, name=name,
               attempt=config.metadata.attempt, image=container.image_name,
               cdi_devices=",".join(cdi_names) or "-")
        return self.pb2.CreateContainerResponse(container_id=container_id)

    def _write_record(self, container: Container, cdi_names: Sequence[str]) -> None:
        config = container.config
        meta = container.sandbox_config.metadata
        record = {
            "container_id": container.id, "pod_sandbox_id": container.sandbox_id,
            "created_at": container.created_at,
            "pod_name": meta.name, "pod_namespace": meta.namespace, "pod_uid": meta.uid,
            "container_name": config.metadata.name, "attempt": config.metadata.attempt,
            "image": container.image_name, "image_ref": container.image_id,
            "command": list(config.command), "args": list(config.args),
            "envs": container.env, "cdi_devices": list(cdi_names),
            "cdi_env": list(container.cdi.env), "device_nodes": list(container.cdi.device_nodes),
            "mounts": [{"container_path": m.container_path, "host_path": m.host_path,
                        "readonly": m.readonly} for m in container.mounts],
            "labels": dict(config.labels), "annotations": dict(config.annotations),
            "log_path": container.log_path, "state_dir": str(container.workdir),
        }
        _write_json(self.settings.state_dir / "records"
                    / f"{meta.namespace}_{meta.name}_{config.metadata.name}"
                      f"_{config.metadata.attempt}.json", record)

    def StartContainer(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
            if container.state != CREATED:
                raise CriError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"container {container.id} is in {container.state} state")
            image = self._images.get(container.image_id)
            names = {container.image_name, container.config.image.image,
                     *(image.repo_tags if image is not None else [])}
            try:
                recipe = match_recipe(load_recipes(self.settings.recipes),
                                      command=[*container.config.command,
                                               *container.config.args], images=names)
                if recipe is None:
                    self._start_sleeping(container)
                else:
                    self._start_process(container, recipe)
            except (OSError, ValueError) as exc:
                container.state, container.exit_code = EXITED, 128
                container.reason, container.message = "StartError", str(exc)
                container.started_at = container.finished_at = time.time_ns()
                container.exited.set()
                _event("container failed to start", id=container.id[:13], pod=container.pod,
                       name=container.name, error=exc)
                raise CriError(grpc.StatusCode.UNKNOWN,
                               f"failed to start container {container.id}: {exc}") from exc
        return self.pb2.StartContainerResponse()

    def _start_sleeping(self, container: Container) -> None:
        container.state, container.started_at = RUNNING, time.time_ns()
        if os.path.isabs(container.log_path):
            # An empty log: `kubectl logs` answers, and the kubelet's rotation finds the file.
            _touch(pathlib.Path(container.log_path))
        _event("container started", id=container.id[:13], pod=container.pod,
               name=container.name, process="none (sleeping)")

    def _sandbox_ip(self, container: Container) -> str:
        with self._lock:
            sandbox = self._sandboxes.get(container.sandbox_id)
        return sandbox.ip if sandbox is not None else ""

    def _start_process(self, container: Container, recipe: dict[str, Any]) -> None:
        config = container.config
        meta = container.sandbox_config.metadata
        values = {
            "state": str(container.workdir), "pod_name": meta.name,
            "pod_namespace": meta.namespace, "pod_uid": meta.uid,
            "pod_ip": self._sandbox_ip(container), "node_ip": self.settings.node_ip,
            "api_server": self.settings.api_server,
            "container_name": container.name, "container_id": container.id,
        }

        def fill(template: str) -> str:
            return expand(str(template), values=values, mounts=container.mounts)

        recipe_path = [fill(p) for p in recipe.get("path") or []]
        env = dict(container.env)
        service_account = next((m for m in container.mounts
                                if posixpath.normpath(m.container_path) == SERVICE_ACCOUNT_DIR),
                               None)
        if service_account is not None and self.settings.api_server:
            kubeconfig = container.workdir / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(
                server=self.settings.api_server, service_account_dir=service_account.host_path,
                namespace=meta.namespace)), encoding="utf-8")
            env["KUBECONFIG"] = str(kubeconfig)
        env.update({str(k): fill(v) for k, v in (recipe.get("env") or {}).items()})
        # NB: the host's PATH, not the container's: commands resolve on this machine.
        env["PATH"] = os.pathsep.join([*recipe_path, os.environ.get("PATH", os.defpath)])
        for key in ("HOME", "LANG"):
            if key in os.environ:
                env.setdefault(key, os.environ[key])
        cwd = fill(recipe["workdir"]) if recipe.get("workdir") else str(container.workdir)
        argv = [*config.command, *config.args]
        if not argv:
            raise ValueError("no command: the stand-in runtime has no image entrypoints")
        executable = resolve_executable(argv[0], recipe_path, env["PATH"])
        if executable is None:
            raise ValueError(f'exec: "{argv[0]}": executable file not found in $PATH '
                             f"({env['PATH']})")
        sink = LogSink(container.workdir / "output.log",
                       pathlib.Path(container.log_path)
                       if os.path.isabs(container.log_path) else None)
        try:
            # Own session: StopContainer and exit can signal every process of the container.
            process = subprocess.Popen(
                [executable, *argv[1:]], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError:
            sink.close()
            raise
        assert process.stdout is not None and process.stderr is not None
        pumps = [threading.Thread(target=_pump, args=(pipe, stream, sink), daemon=True,
                                  name=f"log-{container.id[:8]}-{stream}")
                 for pipe, stream in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
        for pump in pumps:
            pump.start()
        container.state, container.started_at = RUNNING, time.time_ns()
        container.process, container.sink, container.recipe = process, sink, recipe
        container.exec_env, container.exec_cwd, container.recipe_path = env, cwd, recipe_path
        threading.Thread(target=self._supervise, args=(container, process, pumps), daemon=True,
                         name=f"wait-{container.id[:8]}").start()
        _event("container started", id=container.id[:13], pod=container.pod,
               name=container.name, pid=process.pid, command=executable,
               recipe=recipe.get("name") or json.dumps(recipe["match"], sort_keys=True))

    def _supervise(self, container: Container, process: subprocess.Popen[bytes],
                   pumps: Sequence[threading.Thread]) -> None:
        code = process.wait()
        # As when a container's init dies: the rest of the container goes with it.
        _signal_group(process.pid, signal.SIGKILL)
        for pump in pumps:
            pump.join(timeout=2.0)
        if container.sink is not None:
            container.sink.close()
        with self._lock:
            container.state, container.finished_at = EXITED, time.time_ns()
            container.exit_code = exit_code_of(code)
            container.reason = "Completed" if container.exit_code == 0 else "Error"
        container.exited.set()
        _event("container exited", id=container.id[:13], pod=container.pod,
               name=container.name, pid=process.pid, exit_code=container.exit_code)

    def _stop(self, container: Container, *, timeout_s: int) -> None:
        with self._lock:
            if container.state != RUNNING:
                return
            process = container.process
            if process is None:  # sleeping: it "handles" SIGTERM at once
                container.state, container.finished_at = EXITED, time.time_ns()
                container.exit_code, container.reason = 0, "Completed"
                container.exited.set()
                _event("container stopped", id=container.id[:13], pod=container.pod,
                       name=container.name, exit_code=0)
                return
            stop_signal = self._stop_signal(container.config)
        _event("container stopping", id=container.id[:13], pod=container.pod,
               name=container.name, pid=process.pid, signal=stop_signal.name,
               timeout_s=max(timeout_s, 1))
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(stop_signal)  # a no-op once reaped: no stray pid reuse
        if not container.exited.wait(max(timeout_s, 1)):
            _signal_group(process.pid, signal.SIGKILL)
            process.kill()
            if not container.exited.wait(10):
                log.warning("container did not exit after SIGKILL id=%s pid=%s",
                            container.id[:13], process.pid)

    def _stop_signal(self, config: Any) -> signal.Signals:
        value = int(getattr(config, "stop_signal", 0) or 0)
        if not value:
            return signal.SIGTERM
        # The enum's names differ by version: SIGTERM (0.34) or SIGNAL_SIGTERM (0.37).
        name = str(self.pb2.Signal.Name(value)).removeprefix("SIGNAL_")
        found = getattr(signal.Signals, name, signal.SIGTERM)
        return found if isinstance(found, signal.Signals) else signal.SIGTERM

    def StopContainer(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
        self._stop(container, timeout_s=int(request.timeout))
        return self.pb2.StopContainerResponse()

    def _remove(self, container: Container) -> None:
        with self._lock:
            process = container.process
        if process is not None and not container.exited.is_set():
            # "If the container is running, the container must be forcibly removed."
            _signal_group(process.pid, signal.SIGKILL)
            process.kill()
            container.exited.wait(10)
        with self._lock:
            removed = self._containers.pop(container.id, None)
        if removed is not None:
            _event("container removed", id=container.id[:13], pod=container.pod,
                   name=container.name)

    def RemoveContainer(self, request: Any) -> Any:
        with self._lock:
            container = self._containers.get(request.container_id)
        if container is not None:  # "If the container has already been removed, ... no error"
            self._remove(container)
        return self.pb2.RemoveContainerResponse()

    def _image_spec(self, container: Container) -> Any:
        spec = container.config.image
        return self.pb2.ImageSpec(image=container.image_name,
                                  user_specified_image=spec.user_specified_image,
                                  annotations=dict(spec.annotations))

    def _container_status(self, container: Container) -> Any:
        pb2 = self.pb2
        config = container.config
        status = pb2.ContainerStatus(
            id=container.id, metadata=config.metadata,
            state=pb2.ContainerState.Value(container.state),
            created_at=container.created_at, started_at=container.started_at,
            finished_at=container.finished_at, exit_code=container.exit_code,
            image=self._image_spec(container), image_ref=container.image_id,
            image_id=container.image_id, reason=container.reason, message=container.message,
            labels=dict(config.labels), annotations=dict(config.annotations),
            mounts=list(config.mounts), log_path=container.log_path)
        if container.resources is not None:
            status.resources.linux.CopyFrom(container.resources)
        return status

    def ContainerStatus(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
            status = self._container_status(container)
            info = {}
            if request.verbose:
                process = container.process
                info["info"] = json.dumps({
                    "pid": process.pid if process is not None else 0,
                    "sandboxID": container.sandbox_id, "workdir": str(container.workdir),
                    "recipe": container.recipe, "cdiDevices": cdi_device_names(container.config),
                })
        return self.pb2.ContainerStatusResponse(status=status, info=info)

    def _list_containers(self, request: Any) -> list[Any]:
        pb2 = self.pb2
        has_filter = request.HasField("filter")
        wanted = request.filter
        items = []
        with self._lock:
            for c in self._containers.values():
                state = pb2.ContainerState.Value(c.state)
                labels = c.config.labels
                if has_filter and (
                        (wanted.id and wanted.id != c.id)
                        or (wanted.HasField("state") and wanted.state.state != state)
                        or (wanted.pod_sandbox_id and wanted.pod_sandbox_id != c.sandbox_id)
                        or any(labels.get(k) != v for k, v in wanted.label_selector.items())):
                    continue
                items.append(pb2.Container(
                    id=c.id, pod_sandbox_id=c.sandbox_id, metadata=c.config.metadata,
                    image=self._image_spec(c), image_ref=c.image_id, image_id=c.image_id,
                    state=state, created_at=c.created_at, labels=dict(labels),
                    annotations=dict(c.config.annotations)))
        return items

    def ListContainers(self, request: Any) -> Any:
        return self.pb2.ListContainersResponse(containers=self._list_containers(request))

    def StreamContainers(self, request: Any) -> Iterator[Any]:
        items = self._list_containers(request)
        return iter([self.pb2.StreamContainersResponse(containers=items)] if items else [])

    def UpdateContainerResources(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
            if request.HasField("linux"):
                container.resources = request.linux
        return self.pb2.UpdateContainerResourcesResponse()

    def ReopenContainerLog(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
            if container.state != RUNNING:
                raise CriError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"container {container.id} is not running")
            sink = container.sink
        if sink is not None:
            sink.reopen()
        elif os.path.isabs(container.log_path):
            _touch(pathlib.Path(container.log_path))
        return self.pb2.ReopenContainerLogResponse()

    def ExecSync(self, request: Any) -> Any:
        with self._lock:
            container = self._container(request.container_id)
            if container.state != RUNNING:
                raise CriError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"container {container.id} is not running")
            if container.process is None:  # sleeping: every command "succeeds"
                return self.pb2.ExecSyncResponse(exit_code=0)
            env, cwd = dict(container.exec_env), container.exec_cwd
            recipe_path = list(container.recipe_path)
        argv = list(request.cmd)
        if not argv:
            raise CriError(grpc.StatusCode.INVALID_ARGUMENT, "no command to exec")
        executable = resolve_executable(argv[0], recipe_path, env["PATH"])
        if executable is None:
            raise CriError(grpc.StatusCode.UNKNOWN, f'exec failed: exec: "{argv[0]}": '
                                                    f"executable file not found in $PATH")
        process = subprocess.Popen([executable, *argv[1:]], cwd=cwd, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._execs.add(process)
        try:
            stdout, stderr = process.communicate(timeout=request.timeout or None)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.communicate()
            raise CriError(grpc.StatusCode.DEADLINE_EXCEEDED,
                           f"command {argv} timed out after {request.timeout}s") from None
        finally:
            with self._lock:
                self._execs.discard(process)
        return self.pb2.ExecSyncResponse(stdout=stdout[:EXEC_OUTPUT_CAP],
                                         stderr=stderr[:EXEC_OUTPUT_CAP],
                                         exit_code=exit_code_of(process.returncode))

    # -- stats: no cgroups, nothing to report --

    def ContainerStats(self, request: Any) -> Any:
        return self.pb2.ContainerStatsResponse()

    def ListContainerStats(self, request: Any) -> Any:
        return self.pb2.ListContainerStatsResponse()

    def PodSandboxStats(self, request: Any) -> Any:
        return self.pb2.PodSandboxStatsResponse()

    def ListPodSandboxStats(self, request: Any) -> Any:
        return self.pb2.ListPodSandboxStatsResponse()

    def ListMetricDescriptors(self, request: Any) -> Any:
        return self.pb2.ListMetricDescriptorsResponse()

    def ListPodSandboxMetrics(self, request: Any) -> Any:
        return self.pb2.ListPodSandboxMetricsResponse()

    def StreamContainerStats(self, request: Any) -> Iterator[Any]:
        return iter([])

    def StreamPodSandboxStats(self, request: Any) -> Iterator[Any]:
        return iter([])

    def StreamPodSandboxMetrics(self, request: Any) -> Iterator[Any]:
        return iter([])

    # -- images --

    def PullImage(self, request: Any) -> Any:
        name = request.image.image
        with self._lock:
            image = self._image(name)
            if image is None:
                image = Image(id="sha256:" + hashlib.sha256(name.encode()).hexdigest(),
                              repo_tags=[name])
                self._images[image.id] = image
                _event("image pulled", image=name, id=image.id[:19])
        return self.pb2.PullImageResponse(image_ref=image.id)

    def _image_message(self, image: Image) -> Any:
        pb2 = self.pb2
        return pb2.Image(id=image.id, repo_tags=list(image.repo_tags), size=image.size,
                         spec=pb2.ImageSpec(image=image.id))

    def ImageStatus(self, request: Any) -> Any:
        with self._lock:
            image = self._image(request.image.image)
            # Not pulled: an empty response (no error), which makes the kubelet pull.
            if image is None:
                return self.pb2.ImageStatusResponse()
            return self.pb2.ImageStatusResponse(image=self._image_message(image))

    def _list_images(self, request: Any) -> list[Any]:
        wanted = request.filter.image.image if request.HasField("filter") else ""
        with self._lock:
            images = ([i for i in [self._image(wanted)] if i is not None] if wanted
                      else list(self._images.values()))
            return [self._image_message(i) for i in images]

    def ListImages(self, request: Any) -> Any:
        return self.pb2.ListImagesResponse(images=self._list_images(request))

    def StreamImages(self, request: Any) -> Iterator[Any]:
        items = self._list_images(request)
        return iter([self.pb2.StreamImagesResponse(images=items)] if items else [])

    def RemoveImage(self, request: Any) -> Any:
        with self._lock:
            image = self._image(request.image.image)
            if image is not None:  # "should not return an error if the image does not exist"
                del self._images[image.id]
                _event("image removed", image=",".join(image.repo_tags), id=image.id[:19])
        return self.pb2.RemoveImageResponse()

    def ImageFsInfo(self, request: Any) -> Any:
        pb2 = self.pb2
        now = time.time_ns()
        with self._lock:
            image_bytes = sum(i.size for i in self._images.values())
            image_count = len(self._images)
        used_bytes, used_inodes = _disk_usage(self.settings.state_dir)

        def usage(used: int, inodes: int) -> Any:
            # NB: the kubelet reads used_bytes unguarded; it must be set.
            return pb2.FilesystemUsage(
                timestamp=now,
                fs_id=pb2.FilesystemIdentifier(mountpoint=str(self.settings.state_dir)),
                used_bytes=pb2.UInt64Value(value=used), inodes_used=pb2.UInt64Value(value=inodes))

        return pb2.ImageFsInfoResponse(image_filesystems=[usage(image_bytes, image_count)],
                                       container_filesystems=[usage(used_bytes, used_inodes)])

    # -- shutdown --

    def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """SIGTERM every container's processes, SIGKILL what is left after `grace_s`."""
        with self._lock:
            running = [(c, c.process) for c in self._containers.values()
                       if c.process is not None and not c.exited.is_set()]
            execs = list(self._execs)
        for process in execs:
            _signal_group(process.pid, signal.SIGKILL)
        for container, process in running:
            _event("container stopping", id=container.id[:13], pod=container.pod,
                   name=container.name, pid=process.pid, signal="SIGTERM", why="shutdown")
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for container, _ in running:
            container.exited.wait(max(0.0, deadline - time.monotonic()))
        for container, process in running:
            if not container.exited.is_set():
                _signal_group(process.pid, signal.SIGKILL)
                process.kill()
        for container, _ in running:
            container.exited.wait(5)


def _disk_usage(root: pathlib.Path) -> tuple[int, int]:
    used = inodes = 0
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            try:
                used += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue
            inodes += 1
    return used, inodes


# -- gRPC plumbing -----------------------------------------------------------------------------


class Dispatch:
    """What a generated `add_*Servicer_to_server` reads: one callable per RPC of the service.

    RPCs that `StandIn` implements map CriError to the status code; the rest (Exec, Attach,
    PortForward, GetContainerEvents, checkpoints, and anything a newer proto adds) answer
    UNIMPLEMENTED, which the kubelet treats as "not supported"."""

    UNSUPPORTED = frozenset({"Exec", "Attach", "PortForward", "GetContainerEvents",
                             "CheckpointContainer", "CheckpointPod", "RestorePod"})

    def __init__(self, impl: StandIn) -> None:
        self._impl = impl

    def __getattr__(self, rpc: str) -> Callable[[Any, Any], Any]:
        if rpc.startswith("_"):  # dunder probes (copy, pickle, ...), and StandIn's internals
            raise AttributeError(rpc)
        method = None if rpc in self.UNSUPPORTED else getattr(self._impl, rpc, None)

        if method is None:
            def unimplemented(request: Any, context: Any) -> Any:
                log.debug("rpc unimplemented rpc=%s", rpc)
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              f"{rpc} is not implemented by {RUNTIME_NAME}")

            return unimplemented

        def handler(request: Any, context: Any) -> Any:
            log.debug("rpc %s", rpc)
            try:
                return method(request)
            except CriError as exc:
                failure = exc
            except Exception as exc:  # a bug here: the caller gets its text, the log its trace
                log.exception("rpc failed rpc=%s", rpc)
                failure = CriError(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            # NB: outside the except blocks: abort() raises to end the RPC.
            context.abort(failure.code, failure.message)

        return handler


def serve(settings: Settings, *, socket_path: pathlib.Path, proto: pathlib.Path,
          stubs_dir: pathlib.Path | None = None, workers: int = 32,
          stop: threading.Event | None = None) -> None:
    """Listen on `socket_path` until `stop` is set; then stop every container and remove it."""
    pb2, pb2_grpc = load_cri(proto, stubs_dir)
    runtime = StandIn(pb2, settings)
    stop = stop or threading.Event()
    # The kubelet's own limit: 16 MiB messages both ways.
    limit = 16 << 20
    server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(max_workers=max(workers, 16),
                                              thread_name_prefix="cri"),
        options=[("grpc.max_receive_message_length", limit),
                 ("grpc.max_send_message_length", limit)])
    pb2_grpc.add_RuntimeServiceServicer_to_server(Dispatch(runtime), server)
    pb2_grpc.add_ImageServiceServicer_to_server(Dispatch(runtime), server)
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    if socket_path.exists() or socket_path.is_symlink():  # stale, from a runtime killed hard
        socket_path.unlink()
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    _event("listening", socket=socket_path, proto=proto, state_dir=settings.state_dir,
           node_ip=settings.node_ip, api_server=settings.api_server or "-",
           cdi_dirs=",".join(str(d) for d in settings.cdi_dirs))
    try:
        stop.wait()
    finally:
        _event("shutting down", socket=socket_path)
        server.stop(grace=1.0).wait(5)
        runtime.shutdown()
        socket_path.unlink(missing_ok=True)
        _event("stopped", socket=socket_path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see `--help`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--socket", required=True, help="unix socket to listen on (path or unix:///path)")
    add("--state-dir", help="records, per-container dirs and logs (default: a new temp dir)")
    add("--proto", help="the CRI api.proto (default: $CRI_API_PROTO, else the newest "
                        "k8s.io/cri-api in the Go module cache)")
    add("--stubs-dir", help="where to generate the stubs (default: a temp dir, removed)")
    add("--recipes", help="JSON list of recipes, reread when a container starts")
    add("--cdi-dir", action="append", default=[],
        help=f"CDI spec directory, repeatable; later ones take precedence "
             f"(default: {' '.join(DEFAULT_CDI_DIRS)})")
    add("--status-info", help="JSON object (string -> string) for a verbose Status's info, "
                              "reread on every call")
    add("--version-info", help="JSON object with runtimeName and/or runtimeVersion for Version's "
                               "answer (default: stand-in-runtime 0.1.0), reread on every call")
    add("--node-ip", default="127.0.0.1", help="the IP of host-network pods (default: %(default)s)")
    add("--api-server", default="", help="API server URL for the kubeconfig of containers "
                                         "with a ServiceAccount token, and {api_server}")
    add("--workers", type=int, default=32, help="gRPC worker threads (at least 16)")
    add("--log-level", default="INFO", help="DEBUG logs every RPC (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in runtime until SIGTERM or SIGINT."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    socket_path = pathlib.Path(args.socket.removeprefix("unix://")).absolute()
    if len(str(socket_path)) > MAX_UNIX_SOCKET_PATH:
        log.error("socket path too long (%d > %d bytes): %s", len(str(socket_path)),
                  MAX_UNIX_SOCKET_PATH, socket_path)
        return 2
    proto = find_proto(args.proto)
    if proto is None or not proto.is_file():
        log.error("no CRI proto: %s (pass --proto or set CRI_API_PROTO)", proto or "none found")
        return 2
    settings = Settings(
        state_dir=pathlib.Path(args.state_dir or tempfile.mkdtemp(prefix="stand-in-runtime-"))
        .absolute(),
        node_ip=args.node_ip, api_server=args.api_server.rstrip("/"),
        recipes=pathlib.Path(args.recipes) if args.recipes else None,
        cdi_dirs=tuple(pathlib.Path(d) for d in (args.cdi_dir or DEFAULT_CDI_DIRS)),
        status_info=pathlib.Path(args.status_info) if args.status_info else None,
        version_info=pathlib.Path(args.version_info) if args.version_info else None,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        log.info("signal %s received", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serve(settings, socket_path=socket_path, proto=proto,
          stubs_dir=pathlib.Path(args.stubs_dir) if args.stubs_dir else None,
          workers=args.workers, stop=stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
