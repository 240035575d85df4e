"""Both plugins upgraded on the real kubelet while pods with claims come and go: no failed call.

The chart with seamlessUpgrade: each plugin container names its sockets after its pod's UID
and the DaemonSet surges. While workers create and delete pods continuously (GPU claims, and
ComputeDomain channel claims of a host-managed domain), the DaemonSet is rolled as `kubectl
rollout restart` does: the DaemonSet controller starts the new plugin pod beside the old one,
the kubelet registers the new plugins beside the old ones (two registration sockets per driver
at once), and once the new pod is ready the old one is deleted: the kubelet SIGTERMs it, its
plugins drain their calls, deregister and hand over. Every pod must reach Running and go away,
no pod may see a failed prepare, the kubelet's log no failed prepare or unprepare, both old
plugins must have handed over, and both checkpoints must end holding no claim.
"""

from __future__ import annotations

import datetime
import pathlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cluster_driver
import pytest
import workloads
from cluster_driver import NAMESPACE, Cluster
from test_controlplane_compute_domain import CD_DRIVER, compute_domain, read_cd
from test_controlplane_gpu import GPU_DRIVER, template
from test_controlplane_host_managed import plugin_pods

from adapters.fs import checkpoints as fs_checkpoints
from apps.gpuplugin import settings as gpu_settings
from apps.kubeletplugin import settings as cd_settings
from core import models, plugin_sockets
from core.computedomain import checkpoint_records as cd_records
from core.gpu import checkpoint_records as gpu_records

# A cluster starts (about 30 s), the rollout waits on real controllers and probes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]

VALUES: dict[str, Any] = {
    "resources": {"gpus": {"enabled": True}},
    # The default on a 1.33+ cluster; explicit, as this is what the test is about.
    "kubeletPlugin": {"seamlessUpgrade": True},
}
CD_NAME = "upg"
GPU_TEMPLATE = "one-gpu"
# What the kubelet logs when a prepare or unprepare call fails (pkg/kubelet/cm/dra).
FAILED_CALL = re.compile(r"(un)?prepare dynamic resources: |Node(Un)?PrepareResources")
DRA_EVENT_REASONS = ("FailedPrepareDynamicResources",)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for started in cluster_driver.started("hostManaged-channel", values=VALUES):
        workloads.ensure_namespace(started)
        yield started


class Churn:
    """Workers that each create a pod with claims, wait until it runs, delete it and wait
    until it is gone, over and over; what failed and how many pods each finished."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.stopping = threading.Event()
        self.failures: list[str] = []
        self.finished: dict[str, int] = {}
        self.pods: list[str] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, name: str, claims: list[tuple[str, dict[str, str]]]) -> None:
        self.finished[name] = 0
        thread = threading.Thread(target=self._run, args=(name, claims), daemon=True)
        self._threads.append(thread)
        thread.start()

    def done(self, name: str) -> int:
        with self._lock:
            return self.finished[name]

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(300)

    def _run(self, name: str, claims: list[tuple[str, dict[str, str]]]) -> None:
        round_ = 0
        while not self.stopping.is_set():
            pod_name = f"{name}-{round_}"
            round_ += 1
            with self._lock:
                self.pods.append(pod_name)
            try:
                workloads.create(self.cluster, workloads.pod(pod_name, claims=claims))
                workloads.running(self.cluster, pod_name, timeout_s=120)
                workloads.delete_pod(self.cluster, pod_name, timeout_s=120)
            except Exception as exc:
                with self._lock:
                    self.failures.append(f"{pod_name}: {exc}"[:4000])
                return
            with self._lock:
                self.finished[name] += 1


class SocketWatch:
    """The most registration sockets each driver had at once in the kubelet's registry."""

    def __init__(self, registry: pathlib.Path) -> None:
        self.registry = registry
        self.most: dict[str, int] = {CD_DRIVER: 0, GPU_DRIVER: 0}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stopping.wait(0.05):
            names = [p.name for p in self.registry.glob("*-reg.sock")]
            for driver in self.most:
                count = sum(1 for n in names if n.startswith(f"{driver}-"))
                self.most[driver] = max(self.most[driver], count)


def ready_plugin_uid(cluster: Cluster) -> str | None:
    """The uid of the only plugin pod when it is Running with every container ready."""
    pods = plugin_pods(cluster)
    if len(pods) != 1 or pods[0].get("status", {}).get("phase") != "Running":
        return None
    statuses = pods[0]["status"].get("containerStatuses", [])
    return str(pods[0]["metadata"]["uid"]) if len(statuses) == 2 and all(
        s.get("ready") for s in statuses) else None


def roll_plugins(cluster: Cluster) -> None:
    restarted = datetime.datetime.now(datetime.UTC).isoformat()
    workloads.resources(cluster, "apps/v1", "DaemonSet").patch(
        name=f"{cluster_driver.RELEASE}-compute-domain-dra-driver-kubelet-plugin",
        namespace=NAMESPACE, content_type="application/merge-patch+json",
        body={"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": restarted}}}}})


def wait_until(cluster: Cluster, churn: Churn, probe: Callable[[], bool], *, what: str,
               timeout_s: float = 240) -> None:
    """`cluster.eventually`, failing at once when a worker failed."""

    def checked() -> bool:
        if churn.failures:
            raise AssertionError(f"a workload failed while waiting for {what}: "
                                 f"{churn.failures}\n{cluster.logs()}")
        return probe()

    cluster.eventually(checked, what=what, timeout_s=timeout_s)


def container_logs(cluster: Cluster) -> str:
    """Every container's log the runtime kept (those of deleted pods too)."""
    assert cluster.runtime is not None
    return "\n".join(log.read_text(errors="replace")
                     for log in sorted(cluster.runtime.state_dir.glob("**/*.log")))


def held_claims(path: pathlib.Path, codec: models.RecordCodec[Any]) -> dict[str, str]:
    current = fs_checkpoints.read_checkpoint(str(path), codec)
    assert current is not None, f"no checkpoint at {path}"
    return {uid: entry.state.value for uid, entry in current.entries.items()
            if entry.state is not models.ClaimState.UNPREPARED}


def test_both_plugins_upgrade_while_pods_come_and_go_without_a_failed_call(
    cluster: Cluster,
) -> None:
    workloads.create(cluster, template(GPU_TEMPLATE, "gpu.nvidia.com"))
    workloads.create(cluster, compute_domain(CD_NAME))
    cluster.eventually(
        lambda: (read_cd(cluster, CD_NAME) or {}).get("status", {}).get("status") == "Ready",
        what=f"{CD_NAME} Ready", timeout_s=180)
    old_uid = cluster.eventually(lambda: ready_plugin_uid(cluster), what="the plugin pod")
    registry = cluster.kubelet_dir / "plugins_registry"
    sockets = SocketWatch(registry)
    churn = Churn(cluster)
    gpu = [("gpu", {"resourceClaimTemplateName": GPU_TEMPLATE})]
    churn.start("gpu-a", gpu)
    churn.start("gpu-b", gpu)
    churn.start("cd", [("channel", {"resourceClaimTemplateName": f"{CD_NAME}-ch"}), *gpu])
    try:
        workers = list(churn.finished)
        wait_until(cluster, churn, lambda: all(churn.done(w) >= 1 for w in workers),
                   what="every worker to finish a pod on the old plugins")
        roll_plugins(cluster)
        wait_until(cluster, churn,
                   lambda: ready_plugin_uid(cluster) not in (None, old_uid),
                   what="the new plugin pod alone and ready")
        after = {w: churn.done(w) for w in workers}
        wait_until(cluster, churn, lambda: all(churn.done(w) >= after[w] + 2 for w in workers),
                   what="every worker to finish two pods on the new plugins")
    finally:
        churn.stop()
        sockets.stop()
    assert churn.failures == []
    # The surge overlapped: both plugins of the new pod registered beside the old ones.
    assert sockets.most == {CD_DRIVER: 2, GPU_DRIVER: 2}

    events = workloads.list_objects(cluster, "v1", "Event", workloads.WORKLOAD_NAMESPACE)
    failed = [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in events
              if e["reason"] in DRA_EVENT_REASONS]
    assert failed == []
    assert cluster.kubelet is not None
    kubelet_failures = [line for line in cluster.kubelet.output().splitlines()
                        if FAILED_CALL.search(line) and ("rror" in line or "ailed" in line)]
    assert kubelet_failures == []

    # Both old plugins drained and handed over to the new ones (their logs, kept by the
    # runtime after the old pod went).
    logs = container_logs(cluster)
    handed_over = re.findall(r"event=plugin_handed_over node=\S+ successors=(\S+)", logs)
    assert any("/plugins/compute-domain.nvidia.com/" in s for s in handed_over), logs[-3000:]
    assert any("/plugins/gpu.nvidia.com/" in s for s in handed_over), logs[-3000:]

    # Every claim unprepared: no CDI spec left, and both checkpoints end empty (the two
    # processes wrote them in turn).
    cluster.eventually(lambda: not any(cluster.cdi_root.glob("*claim*")),
                       what="every claim's CDI spec removed")
    plugins = cluster.kubelet_dir / "plugins"
    assert held_claims(plugins / CD_DRIVER / cd_settings.CHECKPOINT_FILE, cd_records.CODEC) == {}
    assert held_claims(plugins / GPU_DRIVER / gpu_settings.CHECKPOINT_FILE,
                       gpu_records.CODEC) == {}
    assert not list(plugins.glob("*/*.corrupt-*"))
    # Only the new pod's sockets are left.
    new_uid = ready_plugin_uid(cluster)
    assert new_uid is not None
    assert sorted(p.name for p in registry.glob("*-reg.sock")) == sorted(
        plugin_sockets.registration_socket_name(driver, pod_uid=new_uid,
                                                registry_dir=str(registry))
        for driver in (CD_DRIVER, GPU_DRIVER))
