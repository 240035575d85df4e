"""The measured scenarios of DESIGN §9, each returning a JSON-able dict."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any

from apps.cli import embedded
from apps.controller import running as controller_running
from bench import floor, stats
from core import controlling, decoding, errors, kinds, models, modes, names

NAMESPACE = "bench"


def _cd_json(i: int) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": f"cd-{i}", "namespace": NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"cd-{i}-channel"}}},
    }


def _claim_json(i: int) -> dict[str, Any]:
    return {
        "apiVersion": names.DRA_GROUP_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{i}", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    }


def _allocation(node: str, cd_uid: str) -> dict[str, Any]:
    return {"allocation": {"devices": {
        "results": [{"request": "channel", "driver": names.DRIVER_NAME, "pool": node,
                     "device": "channel-0"}],
        "config": [{"source": "FromClaim", "requests": ["channel"], "opaque": {
            "driver": names.DRIVER_NAME,
            "parameters": {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                           "domainID": cd_uid}}}],
    }}}


def _one_node(workdir: str) -> embedded.Embedded:
    return embedded.start_embedded(workdir=workdir, mode="hostManaged", node_limit=1)


def _make_claims(
    env: embedded.Embedded, start: int, count: int, cd_uid: str
) -> list[models.ClaimRef]:
    node = next(iter(env.nodes))
    refs = []
    for i in range(start, start + count):
        created = env.cluster.create(kinds.RESOURCE_CLAIM.kind, _claim_json(i))
        # The plugin prepares a claim only for a pod on its node that the claim is reserved for.
        pod = env.cluster.create(kinds.POD.kind, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        })
        reserved = [{"resource": "pods", "name": f"pod-{i}", "uid": pod["metadata"]["uid"]}]
        env.cluster.patch(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=f"claim-{i}",
                          patch={"status": {**_allocation(node, cd_uid), "reservedFor": reserved}},
                          subresource="status")
        refs.append(models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]),
                                    namespace=NAMESPACE, name=f"claim-{i}"))
    return refs


def plugin_latency(workdir: str, *, samples: int, backlog: int) -> dict[str, Any]:
    """Prepare/unprepare latency through the real gRPC socket at 1 and at `backlog` claims."""
    env = _one_node(workdir)
    try:
        env.cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd_json(0))
        env.settle()
        cd = env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="cd-0")
        cd_uid = cd["metadata"]["uid"]
        node = next(iter(env.nodes.values()))
        kubelet = node.kubelet

        def call(op: str, ref: models.ClaimRef) -> float:
            fn = kubelet.prepare if op == "prepare" else kubelet.unprepare
            started = time.perf_counter()
            result = fn(names.DRIVER_NAME, (ref,))
            elapsed = time.perf_counter() - started
            if result[ref.uid].error:
                raise errors.RetryableError(result[ref.uid].error)
            return elapsed

        def measure(refs: list[models.ClaimRef]) -> dict[str, Any]:
            prepare = [call("prepare", r) for r in refs]
            unprepare = [call("unprepare", r) for r in refs]
            return {"prepare": stats.summarize(prepare), "unprepare": stats.summarize(unprepare)}

        at_one = measure(_make_claims(env, 0, samples, cd_uid))
        held = _make_claims(env, samples, backlog, cd_uid)
        for ref in held:
            call("prepare", ref)
        at_backlog = measure(_make_claims(env, samples + backlog, samples, cd_uid))
        return {
            "claims_prepared_before": {"1": at_one, str(backlog): at_backlog},
            "two_fsync_floor": floor.two_fsync_floor(node.settings.plugin_dir, n=samples),
        }
    finally:
        env.stop()


def cold_start(workdir: str, *, runs: int) -> dict[str, Any]:
    """In-process plugin start (recover, publish slices, serve) until the kubelet registered it."""
    samples = []
    env = _one_node(workdir)
    try:
        node = next(iter(env.nodes))
        for _ in range(runs):
            env.nodes[node].plugin.stop(grace_s=0)
            started = time.perf_counter()
            embedded.start_node(env, node, profile="gb200-nvl72", retry_budget_s=0.2)
            env.nodes[node].plugin.server.registered.wait(10)
            samples.append(time.perf_counter() - started)
    finally:
        env.stop()
    return {"in_process_to_registered": stats.summarize(samples)}


def cd_to_rct(workdir: str, *, runs: int) -> dict[str, Any]:
    """CD create -> workload RCT present, with the controller running on watches."""
    env = _one_node(workdir)
    stop = threading.Event()
    try:
        controller = controller_running.Controller(env.controller)
        threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
        controller.synced.wait(10)
        samples = []
        for i in range(runs):
            started = time.perf_counter()
            env.cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd_json(i))
            # Poll finely: the poll interval must not be what we measure.
            embedded.wait_until(lambda i=i: _exists(env, f"cd-{i}-channel"), timeout_s=10,
                                what="the workload ResourceClaimTemplate", every_s=0.0005)
            samples.append(time.perf_counter() - started)
        return {"embedded_cluster": stats.summarize(samples)}
    finally:
        stop.set()
        env.stop()


def _exists(env: embedded.Embedded, rct: str) -> bool:
    try:
        env.cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE, name=rct)
    except errors.NotFoundError:
        return False
    return True


def planning_throughput(sizes: tuple[int, ...]) -> dict[str, Any]:
    """Pure controller planning (first admission pass) in CDs/s; memory at the largest size."""
    resolved = modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEX=true",
        namespace="nvidia-dra-driver",
    )
    out: dict[str, Any] = {}
    for size in sizes:
        gc.collect()
        tracemalloc.start()
        domains = [
            decoding.compute_domain_from_k8s(
                {**_cd_json(i), "metadata": {**_cd_json(i)["metadata"], "uid": f"uid-{i:08d}"}}
            )
            for i in range(size)
        ]
        started = time.perf_counter()
        planned = 0
        for cd in domains:
            observed = controlling.observe(cd, objects={}, config=resolved.config)
            planned += len(
                controlling.plan_compute_domain(cd, observed=observed, config=resolved.config)
            )
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out[str(size)] = {
            "cds_per_s": round(size / elapsed, 1),
            "seconds": round(elapsed, 4),
            "actions": planned,
            "peak_memory_mib": round(peak / 2**20, 2),
        }
    return out


def process_cold_start(workdir: str, *, runs: int) -> dict[str, Any]:
    """`compute-domain-kubelet-plugin` as a fresh process until the kubelet registered it.

    Includes interpreter start and imports (grpc, kubernetes): what a DaemonSet pod restart
    costs before the node can prepare claims again. The cluster is the embedded one, served
    over HTTP to the real Kubernetes client in the child.
    """
    from adapters.grpc import kubelet_emulator
    from adapters.memory import apiserver
    from adapters.memory import cluster as memory_cluster
    from adapters.nvml import simulated

    node = simulated.profile_nodes("gb200-nvl72")[0]
    root, _owned = embedded.short_workdir("")
    cluster = memory_cluster.InMemoryCluster()
    samples = []
    with apiserver.EmbeddedAPIServer(cluster) as server:
        kubeconfig = os.path.join(root, "kubeconfig")
        server.write_kubeconfig(kubeconfig)
        with open(os.path.join(root, "devices"), "w", encoding="utf-8") as f:
            f.write(simulated.simulated_proc_devices())
        with open(os.path.join(root, "boot_id"), "w", encoding="utf-8") as f:
            f.write(simulated.simulated_boot_id(node))
        for run in range(runs):
            registry = os.path.join(root, f"registry-{run}")
            started = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "apps.kubeletplugin", "--node-name", node,
                 "--nvml", "simulated:gb200-nvl72", "--imex-mode", "hostManaged",
                 "--imex-isolation", "none", "--feature-gates", "HostManagedIMEX=true",
                 "--proc-devices", os.path.join(root, "devices"),
                 "--boot-id-path", os.path.join(root, "boot_id"),
                 "--plugin-dir", os.path.join(root, "plugin"), "--registry-dir", registry,
                 "--cdi-root", os.path.join(root, "cdi"), "--kubeconfig", kubeconfig,
                 "--health-port", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            try:
                kubelet = kubelet_emulator.KubeletEmulator(registry_dir=registry)
                kubelet.wait_for_plugin(names.DRIVER_NAME, timeout_s=60)
                samples.append(time.perf_counter() - started)
            finally:
                child.send_signal(signal.SIGTERM)
                child.wait(timeout=30)
    shutil.rmtree(root, ignore_errors=True)
    return {"process_spawn_to_registered": stats.summarize(samples)}
