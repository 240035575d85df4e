"""The stand-in CRI runtime as a kubelet meets it: a real child process on a unix socket, driven
through stubs generated from the CRI proto, the way `crictl` would.

Covers:
- Version, Status (verbose info reread from its file), RuntimeConfig, an UNIMPLEMENTED RPC;
- images: status before and after a pull (`image_ref == Image.id`), list, fs info, remove;
- sandboxes: a unique 127.1.x.y per pod, the node IP for host-network pods, the namespace
  options echoed back, the list filters, idempotent stop/remove, NOT_FOUND statuses;
- a recipe container run as a real process: the kubelet's env, CDI env edits (JSON and YAML
  specs), recipe templates, KUBECONFIG from the ServiceAccount mount (which the `kubernetes`
  client loads), the CRI-format log, ExecSync (exit code, timeout), StopContainer, the record;
- a sleeping container, a recipe container that exits 7, a command that cannot be found;
- an unresolvable CDI device refused by CreateContainer, naming it and the dirs searched;
- SIGTERM: the runtime's children and their children die, the socket goes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import stand_in_runtime  # noqa: E402
from realkube_server import wait_for  # noqa: E402

pytestmark = pytest.mark.slow

NODE_IP = "127.0.0.9"
API_SERVER = "https://127.0.0.1:6443"
ENV_IMAGE = "example.com/env-dump:1"
SLEEP_IMAGE = "example.com/sleeper:1"
TOOLS_IMAGE = "example.com/tools:1"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PYTHON = pathlib.Path(sys.executable).name
CRI_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) F (.*)$")

# The env-dump container: writes its environment, then runs until SIGTERM (exit 0).
ENV_DUMP = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
out = os.environ["OUT_FILE"]
with open(out + ".tmp", "w") as f:
    json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv}, f)
os.replace(out + ".tmp", out)
print("env written", flush=True)
print("to stderr", file=sys.stderr, flush=True)
while True:
    time.sleep(0.05)
"""

T = TypeVar("T")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet counts as dead)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def cri() -> tuple[Any, Any]:
    proto = stand_in_runtime.find_proto()
    if proto is None or not proto.is_file():
        pytest.skip("no CRI proto: set CRI_API_PROTO or have k8s.io/cri-api in the Go module "
                    "cache")
    return stand_in_runtime.load_cri(proto)


@dataclasses.dataclass
class Runtime:
    """A started runtime, its files and a client."""

    root: pathlib.Path
    process: subprocess.Popen[bytes]
    pb2: Any
    runtime: Any
    images: Any
    channel: Any

    @property
    def socket(self) -> pathlib.Path:
        return self.root / "cri.sock"

    @property
    def state(self) -> pathlib.Path:
        return self.root / "state"

    @property
    def log(self) -> str:
        return (self.root / "runtime.log").read_text(errors="replace")

    def pull(self, image: str) -> str:
        pb2 = self.pb2
        return str(self.images.PullImage(
            pb2.PullImageRequest(image=pb2.ImageSpec(image=image))).image_ref)

    def sandbox(self, name: str, *, host_network: bool = False) -> tuple[str, Any]:
        pb2 = self.pb2
        uid = f"uid-{name}"
        config = pb2.PodSandboxConfig(
            metadata=pb2.PodSandboxMetadata(name=name, uid=uid, namespace="ns1", attempt=0),
            hostname=name, log_directory=str(self.root / "logs" / f"ns1_{name}_{uid}"),
            labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "ns1"},
            annotations={"kubernetes.io/config.source": "api"},
            linux=pb2.LinuxPodSandboxConfig(security_context=pb2.LinuxSandboxSecurityContext(
                namespace_options=pb2.NamespaceOption(
                    network=pb2.NODE if host_network else pb2.POD))))
        answer = self.runtime.RunPodSandbox(pb2.RunPodSandboxRequest(config=config))
        return str(answer.pod_sandbox_id), config

    def create(self, sandbox: tuple[str, Any], name: str, *, image: str,
               command: Sequence[str], args: Sequence[str] = (),
               envs: Mapping[str, str] | None = None,
               mounts: Mapping[str, pathlib.Path] | None = None,
               cdi: Sequence[str] = ()) -> str:
        """CreateContainer as the kubelet sends it: the image by its ref, as pulled."""
        pb2 = self.pb2
        sandbox_id, sandbox_config = sandbox
        image_ref = self.pull(image)
        config = pb2.ContainerConfig(
            metadata=pb2.ContainerMetadata(name=name, attempt=0),
            image=pb2.ImageSpec(image=image_ref, user_specified_image=image),
            command=list(command), args=list(args),
            envs=[stand_in_runtime.key_value(pb2, k, v) for k, v in (envs or {}).items()],
            mounts=[pb2.Mount(container_path=c, host_path=str(h), readonly=c == SA_DIR)
                    for c, h in (mounts or {}).items()],
            labels={"io.kubernetes.container.name": name},
            annotations={"io.kubernetes.container.hash": "1234"},
            log_path=f"{name}/0.log",
            CDI_devices=[pb2.CDIDevice(name=n) for n in cdi])
        answer = self.runtime.CreateContainer(pb2.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config))
        return str(answer.container_id)

    def status(self, container_id: str, *, verbose: bool = False) -> Any:
        return self.runtime.ContainerStatus(self.pb2.ContainerStatusRequest(
            container_id=container_id, verbose=verbose))

    def exited(self, container_id: str) -> Any:
        status = self.status(container_id).status
        return status if status.state == self.pb2.CONTAINER_EXITED else None

    def record(self, name: str) -> dict[str, Any]:
        found = [r for r in stand_in_runtime.records(self.state) if r["container_name"] == name]
        assert len(found) == 1, found
        return found[0]


def _write_files(root: pathlib.Path) -> None:
    """Recipes, status info, two CDI specs (JSON, YAML), the scripts the recipes run."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    scripts = {
        "exit-seven": "#!/bin/sh\necho bye >&2\nexit 7\n",
        # A container with a child of its own: both must go when the runtime stops.
        "spawner": '#!/bin/sh\nsleep 300 &\necho $! > "$OUT/grandchild.pid"\n'
                   'echo $$ > "$OUT/child.pid"\nwait\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    recipes = [
        {"name": "env-dump", "match": {"image": ENV_IMAGE},
         "path": [str(pathlib.Path(sys.executable).parent)],
         "env": {"OUT_FILE": "{mount:/data}/env.json", "STATE": "{state}",
                 "POD": "{pod_namespace}/{pod_name}/{pod_uid}", "NODE": "{node_ip}",
                 "API": "{api_server}", "DEEP": "{mount:/data/sub/dir}",
                 "CDI_MOUNT": "{mount:/cdi-data}"},
         "workdir": "{state}"},
        {"match": {"command0": "exit-seven"}, "path": [str(bin_dir)]},
        {"match": {"command0": "spawner"}, "path": [str(bin_dir)], "env": {"OUT": "{state}"}},
        {"match": {"command0": "missing-binary"}, "path": [str(bin_dir)]},
    ]
    (root / "recipes.json").write_text(json.dumps(recipes))
    (root / "status-info.json").write_text(json.dumps({"config": "{\"a\": 1}"}))
    cdi = root / "cdi"
    cdi.mkdir()
    (root / "cdi-mount").mkdir()
    (cdi / "example.com-gpu.json").write_text(json.dumps({
        "cdiVersion": "0.6.0", "kind": "example.com/gpu",
        "containerEdits": {"env": ["SPEC_LEVEL=yes"]},
        "devices": [{"name": "gpu0", "containerEdits": {
            "env": ["CDI_VAR=from-cdi"],
            "deviceNodes": [{"path": "/dev/example-gpu0", "type": "c", "major": 511,
                             "minor": 0}],
            "mounts": [{"hostPath": str(root / "cdi-mount"), "containerPath": "/cdi-data",
                        "options": ["ro", "bind"]}]}}],
    }))
    (cdi / "example.com-nic.yaml").write_text(yaml.safe_dump({
        "cdiVersion": "0.6.0", "kind": "example.com/nic",
        "devices": [{"name": "nic0", "containerEdits": {"env": ["NIC=1"]}}],
    }))
    (cdi / "broken.yaml").write_text("kind: [unterminated\n")  # skipped, not fatal
    sa = root / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok-123")
    (sa / "ca.crt").write_text("not a real CA\n")
    (root / "data").mkdir()


@pytest.fixture
def rt(cri: tuple[Any, Any]) -> Iterator[Runtime]:
    pb2, pb2_grpc = cri
    # NB: /tmp, not tmp_path: a unix socket path must stay under 108 bytes.
    root = pathlib.Path(tempfile.mkdtemp(prefix="sir-", dir="/tmp"))
    _write_files(root)
    proto = stand_in_runtime.find_proto()
    assert proto is not None
    with open(root / "runtime.log", "ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(HERE / "stand_in_runtime.py"),
             "--socket", str(root / "cri.sock"), "--state-dir", str(root / "state"),
             "--proto", str(proto), "--recipes", str(root / "recipes.json"),
             "--status-info", str(root / "status-info.json"), "--cdi-dir", str(root / "none"),
             "--version-info", str(root / "version-info.json"),
             "--cdi-dir", str(root / "cdi"), "--node-ip", NODE_IP, "--api-server", API_SERVER,
             "--log-level", "DEBUG"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    channel = grpc.insecure_channel(f"unix://{root / 'cri.sock'}")
    runtime = Runtime(root, process, pb2, pb2_grpc.RuntimeServiceStub(channel),
                      pb2_grpc.ImageServiceStub(channel), channel)

    def listening() -> bool:
        assert process.poll() is None, f"runtime exited:\n{runtime.log}"
        return runtime.socket.exists()

    try:
        wait_for(listening, what="the runtime's socket")
        yield runtime
    finally:
        channel.close()
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def test_version_status_and_config(rt: Runtime) -> None:
    pb2 = rt.pb2
    version = rt.runtime.Version(pb2.VersionRequest(version="0.1.0"))
    assert (version.version, version.runtime_name, version.runtime_version,
            version.runtime_api_version) == ("0.1.0", "stand-in-runtime", "0.1.0", "v1")

    status = rt.runtime.Status(pb2.StatusRequest(verbose=True))
    assert {(c.type, c.status) for c in status.status.conditions} == {
        ("RuntimeReady", True), ("NetworkReady", True)}
    assert dict(status.info) == {"config": '{"a": 1}'}
    assert dict(rt.runtime.Status(pb2.StatusRequest(verbose=False)).info) == {}
    (rt.root / "status-info.json").write_text(json.dumps({"changed": "yes"}))
    assert dict(rt.runtime.Status(pb2.StatusRequest(verbose=True)).info) == {"changed": "yes"}
    (rt.root / "version-info.json").write_text(json.dumps(
        {"runtimeName": "cri-o", "runtimeVersion": "1.31.2"}))
    renamed = rt.runtime.Version(pb2.VersionRequest(version="0.1.0"))
    assert (renamed.version, renamed.runtime_name, renamed.runtime_version) == (
        "0.1.0", "cri-o", "1.31.2")
    (rt.root / "version-info.json").write_text("[]")
    with pytest.raises(grpc.RpcError) as unreadable:
        rt.runtime.Version(pb2.VersionRequest(version="0.1.0"))
    assert "version info" in (unreadable.value.details() or "")
    (rt.root / "version-info.json").unlink()

    config = rt.runtime.RuntimeConfig(pb2.RuntimeConfigRequest())
    assert config.linux.cgroup_driver == pb2.CGROUPFS
    rt.runtime.UpdateRuntimeConfig(pb2.UpdateRuntimeConfigRequest())
    with pytest.raises(grpc.RpcError) as refused:
        rt.runtime.PortForward(pb2.PortForwardRequest(pod_sandbox_id="x"))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_images(rt: Runtime) -> None:
    pb2 = rt.pb2
    spec = pb2.ImageSpec(image=ENV_IMAGE)
    assert not rt.images.ImageStatus(pb2.ImageStatusRequest(image=spec)).HasField("image")
    ref = rt.pull(ENV_IMAGE)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", ref)
    image = rt.images.ImageStatus(pb2.ImageStatusRequest(image=spec)).image
    assert (image.id, list(image.repo_tags)) == (ref, [ENV_IMAGE])
    assert image.size > 0
    by_ref = rt.images.ImageStatus(pb2.ImageStatusRequest(image=pb2.ImageSpec(image=ref)))
    assert by_ref.image.id == ref
    assert rt.pull(ENV_IMAGE) == ref
    rt.pull(SLEEP_IMAGE)
    listed = rt.images.ListImages(pb2.ListImagesRequest()).images
    assert sorted(i.repo_tags[0] for i in listed) == sorted([ENV_IMAGE, SLEEP_IMAGE])

    fs = rt.images.ImageFsInfo(pb2.ImageFsInfoRequest())
    assert len(fs.image_filesystems) == len(fs.container_filesystems) == 1
    for usage in (*fs.image_filesystems, *fs.container_filesystems):
        assert usage.fs_id.mountpoint == str(rt.state)
        assert usage.timestamp > 0
        assert usage.HasField("used_bytes") and usage.HasField("inodes_used")
    assert fs.image_filesystems[0].used_bytes.value == 2 * image.size

    rt.images.RemoveImage(pb2.RemoveImageRequest(image=spec))
    rt.images.RemoveImage(pb2.RemoveImageRequest(image=spec))  # gone already: no error
    assert not rt.images.ImageStatus(pb2.ImageStatusRequest(image=spec)).HasField("image")


def test_sandboxes(rt: Runtime) -> None:
    pb2 = rt.pb2
    first, _ = rt.sandbox("pod-a")
    second, _ = rt.sandbox("pod-b")
    host, _ = rt.sandbox("pod-host", host_network=True)

    def status(sandbox_id: str) -> Any:
        return rt.runtime.PodSandboxStatus(
            pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id)).status

    ips = [status(s).network.ip for s in (first, second)]
    assert all(ip.startswith("127.1.") for ip in ips) and len(set(ips)) == 2
    assert status(host).network.ip == NODE_IP
    assert status(host).linux.namespaces.options.network == pb2.NODE
    assert status(first).linux.namespaces.options.network == pb2.POD
    got = status(first)
    assert (got.metadata.name, got.metadata.namespace, got.metadata.uid) == (
        "pod-a", "ns1", "uid-pod-a")
    assert got.created_at > 0 and got.state == pb2.SANDBOX_READY
    assert dict(got.annotations) == {"kubernetes.io/config.source": "api"}

    rt.runtime.StopPodSandbox(pb2.StopPodSandboxRequest(pod_sandbox_id=second))
    assert status(second).state == pb2.SANDBOX_NOTREADY

    def listed(**filter_fields: Any) -> set[str]:
        request = pb2.ListPodSandboxRequest(filter=pb2.PodSandboxFilter(**filter_fields))
        return {s.id for s in rt.runtime.ListPodSandbox(request).items}

    assert listed() == {first, second, host}
    assert listed(state=pb2.PodSandboxStateValue(state=pb2.SANDBOX_READY)) == {first, host}
    assert listed(label_selector={"io.kubernetes.pod.name": "pod-b"}) == {second}
    assert listed(id=host) == {host}

    rt.runtime.RemovePodSandbox(pb2.RemovePodSandboxRequest(pod_sandbox_id=second))
    rt.runtime.RemovePodSandbox(pb2.RemovePodSandboxRequest(pod_sandbox_id=second))
    rt.runtime.StopPodSandbox(pb2.StopPodSandboxRequest(pod_sandbox_id=second))
    with pytest.raises(grpc.RpcError) as missing:
        status(second)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert listed() == {first, host}


def test_recipe_container_runs_as_a_process(rt: Runtime) -> None:
    pb2 = rt.pb2
    sandbox = rt.sandbox("pod1")
    container = rt.create(
        sandbox, "app", image=ENV_IMAGE, command=[f"/usr/bin/{PYTHON}", "-c", ENV_DUMP],
        args=["extra-arg"], envs={"FROM_POD": "pod-value", "CDI_VAR": "from-pod"},
        mounts={"/data": rt.root / "data", SA_DIR: rt.root / "sa"},
        cdi=["example.com/gpu=gpu0", "example.com/nic=nic0"])
    assert rt.status(container).status.state == pb2.CONTAINER_CREATED
    rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=container))

    out = rt.root / "data" / "env.json"

    def written() -> str | None:
        return out.read_text() if out.exists() else None

    dumped = json.loads(wait_for(written, what="the container's env.json"))
    env = dumped["env"]
    record = rt.record("app")
    state_dir = record["state_dir"]
    assert env["FROM_POD"] == "pod-value"
    assert (env["CDI_VAR"], env["SPEC_LEVEL"], env["NIC"]) == ("from-cdi", "yes", "1")
    assert env["OUT_FILE"] == str(out)
    assert env["STATE"] == state_dir == dumped["cwd"]
    assert env["POD"] == "ns1/pod1/uid-pod1"
    assert (env["NODE"], env["API"]) == (NODE_IP, API_SERVER)
    assert env["DEEP"] == str(rt.root / "data" / "sub" / "dir")
    assert env["CDI_MOUNT"] == str(rt.root / "cdi-mount")
    assert env["PATH"].split(os.pathsep)[0] == str(pathlib.Path(sys.executable).parent)
    assert dumped["argv"][1:] == ["extra-arg"]

    # The kubeconfig authenticates with the projected token, through the official client.
    configuration = kube_client.Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=env["KUBECONFIG"], client_configuration=configuration)
    assert configuration.host == API_SERVER
    assert configuration.api_key["BearerToken"] == "Bearer tok-123"

    status = rt.status(container, verbose=True)
    assert status.status.state == pb2.CONTAINER_RUNNING
    assert status.status.started_at >= status.status.created_at > 0
    assert status.status.image_ref == status.status.image_id == rt.pull(ENV_IMAGE)
    assert status.status.image.image == ENV_IMAGE
    assert dict(status.status.labels) == {"io.kubernetes.container.name": "app"}
    pid = json.loads(status.info["info"])["pid"]
    assert alive(pid)

    log_path = pathlib.Path(status.status.log_path)
    assert log_path == rt.root / "logs" / "ns1_pod1_uid-pod1" / "app" / "0.log"

    def logged() -> list[tuple[str, str]] | None:
        text = log_path.read_text() if log_path.exists() else ""
        lines = [(m.group(1), m.group(2))
                 for m in map(CRI_LOG_LINE.match, text.splitlines()) if m]
        return lines if len(lines) == 2 else None

    assert sorted(wait_for(logged, what="two CRI log lines")) == [
        ("stderr", "to stderr"), ("stdout", "env written")]

    # ExecSync: the container's env and working dir; exit code; timeout.
    answer = rt.runtime.ExecSync(pb2.ExecSyncRequest(container_id=container, cmd=[
        PYTHON, "-c", "import os,sys; print(os.environ['CDI_VAR'], os.getcwd()); "
                      "sys.stderr.write('e'); sys.exit(3)"], timeout=30))
    assert (answer.stdout, answer.stderr, answer.exit_code) == (
        f"from-cdi {state_dir}\n".encode(), b"e", 3)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as slow:
        rt.runtime.ExecSync(pb2.ExecSyncRequest(container_id=container, cmd=[
            PYTHON, "-c", "import time; time.sleep(60)"], timeout=1))
    assert slow.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 20

    assert record["pod_name"] == "pod1" and record["pod_uid"] == "uid-pod1"
    assert (record["pod_namespace"], record["attempt"]) == ("ns1", 0)
    assert record["image"] == ENV_IMAGE
    assert record["command"] == [f"/usr/bin/{PYTHON}", "-c", ENV_DUMP]
    assert record["args"] == ["extra-arg"]
    assert record["envs"]["FROM_POD"] == "pod-value"
    assert record["envs"]["CDI_VAR"] == "from-cdi"
    assert record["cdi_devices"] == ["example.com/gpu=gpu0", "example.com/nic=nic0"]
    assert [n["path"] for n in record["device_nodes"]] == ["/dev/example-gpu0"]
    assert {"container_path": SA_DIR, "host_path": str(rt.root / "sa"),
            "readonly": True} in record["mounts"]
    assert {"container_path": "/cdi-data", "host_path": str(rt.root / "cdi-mount"),
            "readonly": True} in record["mounts"]
    assert record["annotations"] == {"io.kubernetes.container.hash": "1234"}
    assert (rt.state / "records" / "ns1_pod1_app_0.json").exists()

    rt.runtime.StopContainer(pb2.StopContainerRequest(container_id=container, timeout=10))
    stopped = rt.status(container).status
    assert (stopped.state, stopped.exit_code, stopped.reason) == (
        pb2.CONTAINER_EXITED, 0, "Completed")
    assert stopped.finished_at >= stopped.started_at
    assert not alive(pid)
    rt.runtime.StopContainer(pb2.StopContainerRequest(container_id=container, timeout=10))

    request = pb2.ListContainersRequest(filter=pb2.ContainerFilter(
        state=pb2.ContainerStateValue(state=pb2.CONTAINER_EXITED), pod_sandbox_id=sandbox[0],
        label_selector={"io.kubernetes.container.name": "app"}))
    assert [c.id for c in rt.runtime.ListContainers(request).containers] == [container]

    rt.runtime.RemoveContainer(pb2.RemoveContainerRequest(container_id=container))
    rt.runtime.RemoveContainer(pb2.RemoveContainerRequest(container_id=container))
    with pytest.raises(grpc.RpcError) as gone:
        rt.status(container)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert "container created" in rt.log and "container exited" in rt.log


def test_sleeping_failing_and_unstartable_containers(rt: Runtime) -> None:
    pb2 = rt.pb2
    sandbox = rt.sandbox("pod2")
    sleeper = rt.create(sandbox, "sleeper", image=SLEEP_IMAGE, command=["sleep-forever"])
    rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=sleeper))
    running = rt.status(sleeper).status
    assert running.state == pb2.CONTAINER_RUNNING and running.started_at > 0
    assert pathlib.Path(running.log_path).exists()  # empty, for `kubectl logs`
    answer = rt.runtime.ExecSync(pb2.ExecSyncRequest(container_id=sleeper, cmd=["anything"]))
    assert answer.exit_code == 0
    rt.runtime.StopContainer(pb2.StopContainerRequest(container_id=sleeper, timeout=0))
    stopped = rt.status(sleeper).status
    assert (stopped.state, stopped.exit_code, stopped.reason) == (
        pb2.CONTAINER_EXITED, 0, "Completed")

    failing = rt.create(sandbox, "failing", image=TOOLS_IMAGE,
                        command=["/usr/local/bin/exit-seven"])
    rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=failing))
    exited = wait_for(lambda: rt.exited(failing), what="exit-seven to exit")
    assert (exited.exit_code, exited.reason) == (7, "Error")
    assert exited.finished_at >= exited.started_at > 0
    assert "stderr F bye" in pathlib.Path(exited.log_path).read_text()
    with pytest.raises(grpc.RpcError) as not_running:
        rt.runtime.ExecSync(pb2.ExecSyncRequest(container_id=failing, cmd=["true"]))
    assert not_running.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    unstartable = rt.create(sandbox, "unstartable", image=TOOLS_IMAGE,
                            command=["missing-binary"])
    with pytest.raises(grpc.RpcError) as refused:
        rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=unstartable))
    assert "executable file not found" in str(refused.value.details())
    failed = rt.status(unstartable).status
    assert (failed.state, failed.exit_code, failed.reason) == (
        pb2.CONTAINER_EXITED, 128, "StartError")

    # StopPodSandbox ends what still runs in it.
    again = rt.create(sandbox, "sleeper2", image=SLEEP_IMAGE, command=["sleep-forever"])
    rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=again))
    rt.runtime.StopPodSandbox(pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox[0]))
    assert rt.status(again).status.state == pb2.CONTAINER_EXITED


def test_unresolvable_cdi_device_fails_create(rt: Runtime) -> None:
    pb2 = rt.pb2
    sandbox = rt.sandbox("pod3")
    with pytest.raises(grpc.RpcError) as refused:
        rt.create(sandbox, "app", image=SLEEP_IMAGE, command=["x"],
                  cdi=["example.com/gpu=gpu0", "example.com/gpu=nope"])
    details = str(refused.value.details())
    assert "unresolvable CDI devices example.com/gpu=nope" in details
    assert str(rt.root / "cdi") in details
    assert "gpu=gpu0" not in details.split("(")[0]
    assert stand_in_runtime.records(rt.state) == []
    assert not rt.runtime.ListContainers(pb2.ListContainersRequest()).containers


def test_sigterm_takes_the_children_down(rt: Runtime) -> None:
    pb2 = rt.pb2
    sandbox = rt.sandbox("pod4")
    container = rt.create(sandbox, "spawner", image=TOOLS_IMAGE, command=["spawner"])
    rt.runtime.StartContainer(pb2.StartContainerRequest(container_id=container))
    state_dir = pathlib.Path(rt.record("spawner")["state_dir"])

    def pids() -> tuple[int, int] | None:
        files = [state_dir / "child.pid", state_dir / "grandchild.pid"]
        texts = [f.read_text().strip() if f.exists() else "" for f in files]
        return (int(texts[0]), int(texts[1])) if all(texts) else None

    child, grandchild = wait_for(pids, what="the spawner's pid files")
    assert alive(child) and alive(grandchild)

    rt.process.send_signal(signal.SIGTERM)
    assert rt.process.wait(timeout=30) == 0, rt.log
    wait_for(lambda: not alive(child) and not alive(grandchild),
               what="the container's processes to die", timeout_s=10)
    assert not rt.socket.exists()
    assert "signal SIGTERM received" in rt.log
