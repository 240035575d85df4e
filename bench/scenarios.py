"""The measured scenarios of DESIGN §9, each returning a JSON-able dict."""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping
from typing import Any

from apps.cli import embedded
from bench import floor, stats
from core import checkpoint as checkpoint_codec
from core import compaction, decoding, errors, kinds, models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import controlling, modes

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


def _node_with_domain(workdir: str) -> tuple[embedded.Embedded, str]:
    env = _one_node(workdir)
    env.cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd_json(0))
    env.settle()
    cd = env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="cd-0")
    return env, str(cd["metadata"]["uid"])


def _checked(results: Mapping[names.ClaimUID, models.ClaimResult]) -> None:
    failed = [r.error for r in results.values() if r.error]
    if failed:
        raise errors.RetryableError(f"{len(failed)} claim(s) failed, first: {failed[0]}")


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("inf")


def plugin_latency(
    workdir: str, *, samples: int, held_levels: tuple[int, ...] = (1, 2048, 10_000),
    batch: int = 500,
) -> dict[str, Any]:
    """Prepare/unprepare of one claim through the real gRPC socket, with N claims held.

    At each level the node first holds N-1 other prepared claims (prepared in batches of
    `batch` per kubelet call), then each sample is: one floor sample (two durable small-file
    writes in the plugin directory), one prepare, one unprepare of a fresh claim, so the
    floor and the operation share the disk and the machine's load of the same moment. The
    level "1" is a true single claim: nothing else is prepared on the node.
    """
    env, cd_uid = _node_with_domain(workdir)
    out: dict[str, Any] = {"samples_per_level": samples}
    try:
        node = next(iter(env.nodes.values()))
        kubelet = node.kubelet
        next_claim = 0
        held = 0
        for level in held_levels:
            extra = _make_claims(env, next_claim, level - 1 - held, cd_uid)
            next_claim += len(extra)
            for i in range(0, len(extra), batch):
                _checked(kubelet.prepare(names.DRIVER_NAME, extra[i:i + batch]))
            held = level - 1
            refs = _make_claims(env, next_claim, samples, cd_uid)
            next_claim += samples
            floor_s, prepare_s, unprepare_s = [], [], []
            for ref in refs:
                floor_s.append(floor.two_durable_writes(node.settings.plugin_dir))
                started = time.perf_counter()
                result = kubelet.prepare(names.DRIVER_NAME, (ref,))
                prepare_s.append(time.perf_counter() - started)
                _checked(result)
                started = time.perf_counter()
                result = kubelet.unprepare(names.DRIVER_NAME, (ref,))
                unprepare_s.append(time.perf_counter() - started)
                _checked(result)
            fl, pr, un = (stats.summarize(x) for x in (floor_s, prepare_s, unprepare_s))
            out[f"held_{level}"] = {
                "floor_two_durable_writes": fl,
                "prepare": pr,
                "unprepare": un,
                "prepare_p50_over_floor_p50": _ratio(pr["p50_ms"], fl["p50_ms"]),
                "prepare_p99_over_floor_p99": _ratio(pr["p99_ms"], fl["p99_ms"]),
                "unprepare_p50_over_floor_p50": _ratio(un["p50_ms"], fl["p50_ms"]),
                "unprepare_p99_over_floor_p99": _ratio(un["p99_ms"], fl["p99_ms"]),
            }
        base = out.get(f"held_{held_levels[0]}")
        if base is not None:
            for level in held_levels[1:]:
                at = out[f"held_{level}"]
                at[f"prepare_p50_over_held_{held_levels[0]}"] = _ratio(
                    at["prepare"]["p50_ms"], base["prepare"]["p50_ms"])
                at[f"unprepare_p50_over_held_{held_levels[0]}"] = _ratio(
                    at["unprepare"]["p50_ms"], base["unprepare"]["p50_ms"])
        out[f"startup_with_{held_levels[-1] - 1}_prepared"] = _startup(env, node, runs=5)
    finally:
        env.stop()
    return out


def _startup(env: embedded.Embedded, node: embedded.SimulatedNode, *, runs: int) -> dict[str, Any]:
    """Start-up of the plugin's state on the node's files: load + verify (recover()).

    Measured as left by the run (snapshot + journal, as after a kill) and after a graceful
    stop folded the journal into the snapshot.
    """
    from adapters.fs import cdi as fs_cdi
    from adapters.fs import checkpoints as fs_checkpoints
    from apps.kubeletplugin import driver as plugin_driver
    from apps.pluginkit import driver as claim_driver

    def fresh() -> plugin_driver.PluginDriver:
        return plugin_driver.new_driver(
            ports=claim_driver.PluginPorts(
                cluster=env.cluster,
                checkpoints=fs_checkpoints.FileCheckpointStore(node.settings.checkpoint_path),
                cdi=fs_cdi.CDIDirectory(node.settings.cdi_root),
            ),
            node=node.plugin.node, config=env.config,
        )

    journal = node.settings.checkpoint_path + fs_checkpoints.JOURNAL_SUFFIX
    node.plugin.stop(grace_s=0)  # compacts: measure the crash case on a journal made anew
    out: dict[str, Any] = {}
    for name in ("after_graceful_stop", "after_kill_with_journal"):
        if name == "after_kill_with_journal":
            # A journal as full as the plugin lets it grow: the most a start-up replays.
            driver = fresh()
            current = driver.recover()
            most = compaction.compaction_threshold(len(current.entries))
            kept = dict(list(current.entries.items())[:most])
            with open(journal, "ab") as f:
                f.write(checkpoint_codec.encode_records(
                    dataclasses.replace(current, entries={}),
                    dataclasses.replace(current, entries=kept)))
        samples = [stats.timed(lambda: fresh().recover()) for _ in range(runs)]
        summary = stats.summarize(samples)
        out[name] = {**summary, "journal_bytes": os.path.getsize(journal),
                     "p50_over_goal_0_5s": _ratio(summary["p50_ms"], 500.0)}
    return out


def batch_prepare(workdir: str, *, claims: int = 500, runs: int = 3) -> dict[str, Any]:
    """One NodePrepareResources call with `claims` claims (the kubelet allows it 45 s)."""
    env, cd_uid = _node_with_domain(workdir)
    try:
        kubelet = next(iter(env.nodes.values())).kubelet
        refs = _make_claims(env, 0, claims, cd_uid)
        prepare_s, unprepare_s = [], []
        for _ in range(runs):
            prepare_s.append(stats.timed(
                lambda: _checked(kubelet.prepare(names.DRIVER_NAME, refs))))
            unprepare_s.append(stats.timed(
                lambda: _checked(kubelet.unprepare(names.DRIVER_NAME, refs))))
        pr = stats.summarize(prepare_s)
        return {
            "claims_per_call": claims,
            "prepare_call": pr,
            "unprepare_call": stats.summarize(unprepare_s),
            "prepare_ms_per_claim_p50": round(pr["p50_ms"] / claims, 3),
            "prepare_p50_over_goal_2s": _ratio(pr["p50_ms"], 2000.0),
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
    """CD create -> workload RCT present, with the deployment's controller running on watches."""
    env = _one_node(workdir)
    try:
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
        env.stop()


def _exists(env: embedded.Embedded, rct: str) -> bool:
    try:
        env.cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE, name=rct)
    except errors.NotFoundError:
        return False
    return True


def planning_throughput(sizes: tuple[int, ...]) -> dict[str, Any]:
    """Pure controller planning (first admission pass) in CDs/s; memory in a pass of its own.

    NB: timed without tracemalloc (it slows Python code about 3x); the peak memory comes from
    a second, untimed pass over the same CDs.
    """
    resolved = modes.resolve_driver_config(
        mode="hostManaged", isolation="none", feature_gates="HostManagedIMEX=true",
        namespace="nvidia-dra-driver",
    )

    def plan_all(domains: list[models.ComputeDomain]) -> int:
        planned = 0
        for cd in domains:
            # fresh CDs: no objects, no status conditions yet
            observed = controlling.observe(cd, objects={}, config=resolved.config,
                                           conditions=())
            planned += len(
                controlling.plan_compute_domain(cd, observed=observed, config=resolved.config)
            )
        return planned

    out: dict[str, Any] = {}
    for size in sizes:
        domains = [
            decoding.compute_domain_from_k8s(
                {**_cd_json(i), "metadata": {**_cd_json(i)["metadata"], "uid": f"uid-{i:08d}"}}
            )
            for i in range(size)
        ]
        gc.collect()
        started = time.perf_counter()
        planned = plan_all(domains)
        elapsed = time.perf_counter() - started
        gc.collect()
        tracemalloc.start()
        plan_all(domains)
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
                 "--host-imex-check", "false",
                 "--proc-devices", os.path.join(root, "devices"),
                 "--boot-id-path", os.path.join(root, "boot_id"),
                 "--plugin-dir", os.path.join(root, "plugin"), "--registry-dir", registry,
                 "--cdi-root", os.path.join(root, "cdi"), "--kubeconfig", kubeconfig,
                 "--health-port", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            try:
                # Woken by inotify on the registry dir, as the kubelet's plugin watcher is.
                kubelet = kubelet_emulator.KubeletEmulator(registry_dir=registry)
                kubelet.wait_for_plugin(names.DRIVER_NAME, timeout_s=60)
                samples.append(time.perf_counter() - started)
            finally:
                child.send_signal(signal.SIGTERM)
                child.wait(timeout=30)
    shutil.rmtree(root, ignore_errors=True)
    summary = stats.summarize(samples)
    return {"process_spawn_to_registered": {
        **summary,
        "p50_over_goal_0_35s": _ratio(summary["p50_ms"], 350.0),
        "p99_over_goal_0_5s": _ratio(summary["p99_ms"], 500.0),
    }}


def checkpoint_store_options(
    workdir: str, *, sizes: tuple[int, ...] = (1, 2048, 10_000), samples: int = 100,
) -> dict[str, Any]:
    """One changed entry made durable, per store design, with N entries held (the choice in
    docs/proposals/0002-checkpoint-store.md). Each sample is interleaved with a floor sample.
    """
    import json
    import sqlite3

    from adapters.fs import _atomic
    from adapters.fs import checkpoints as fs_checkpoints

    def entry(i: int, stamp: float) -> models.CheckpointEntry:
        uid = names.ClaimUID(f"{i:08x}-0000-4000-8000-000000000000")
        return models.CheckpointEntry(
            record=cd_records.ComputeDomainClaimRecord(
                mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
                domain_id="cd", channel_ids=(0,),
            ),
            claim_uid=uid, namespace=NAMESPACE, name=f"claim-{i}",
            state=models.ClaimState.PREPARE_COMPLETED, devices=(models.PreparedDevice(
                request_names=("channel",), pool_name="node", device_name="channel-0",
                cdi_device_ids=(f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0",)),),
            updated_at=stamp,
        )

    def entry_json(e: models.CheckpointEntry) -> bytes:
        one = models.Checkpoint(codec=cd_records.CODEC, boot_id="b", entries={e.claim_uid: e})
        return json.dumps(json.loads(checkpoint_codec.encode(one))["entries"][0]).encode()

    out: dict[str, Any] = {}
    for size in sizes:
        held = {e.claim_uid: e for e in (entry(i, 1.0) for i in range(size))}
        base = checkpoint_codec.indexed(
            models.Checkpoint(codec=cd_records.CODEC, boot_id="b", entries=held)
        )
        level: dict[str, Any] = {}
        root = os.path.join(workdir, f"n{size}")
        for design in ("whole_file_json", "file_per_claim", "journal", "sqlite_wal_full"):
            directory = os.path.join(root, design)
            os.makedirs(directory)
            state = {"cp": base}
            if design == "whole_file_json":
                path = os.path.join(directory, "checkpoint.json")
                _atomic.write_atomically(path, checkpoint_codec.encode(base), mode=0o600)

                def _whole_file(e: models.CheckpointEntry, path: str = path,
                           state: dict[str, models.Checkpoint] = state) -> None:
                    state["cp"] = checkpoint_codec.with_entry(state["cp"], e)
                    _atomic.write_atomically(path, checkpoint_codec.encode(state["cp"]),
                                             mode=0o600)
            elif design == "file_per_claim":
                for e in base.entries.values():
                    with open(os.path.join(directory, f"{e.claim_uid}.json"), "wb") as f:
                        f.write(entry_json(e))

                def _file_per_claim(e: models.CheckpointEntry, directory: str = directory) -> None:
                    _atomic.write_atomically(os.path.join(directory, f"{e.claim_uid}.json"),
                                             entry_json(e), mode=0o600)
            elif design == "journal":
                store = fs_checkpoints.FileCheckpointStore(
                    os.path.join(directory, "checkpoint.json"))
                store.write(checkpoint_codec.encode(base))

                def _journal(e: models.CheckpointEntry,
                           store: fs_checkpoints.FileCheckpointStore = store,
                           state: dict[str, models.Checkpoint] = state) -> None:
                    after = checkpoint_codec.with_entry(state["cp"], e)
                    store.append(checkpoint_codec.encode_records(
                        state["cp"], after, changed=(e.claim_uid,)))
                    state["cp"] = after
            else:
                db = sqlite3.connect(os.path.join(directory, "checkpoint.db"),
                                     isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                db.execute("CREATE TABLE entries (uid TEXT PRIMARY KEY, body BLOB NOT NULL)")
                db.execute("BEGIN")
                db.executemany("INSERT INTO entries VALUES (?, ?)",
                               [(e.claim_uid, entry_json(e)) for e in base.entries.values()])
                db.execute("COMMIT")

                def _sqlite(e: models.CheckpointEntry, db: sqlite3.Connection = db) -> None:
                    db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?)",
                               (e.claim_uid, entry_json(e)))

            change: Callable[[models.CheckpointEntry], None] = {
                "whole_file_json": lambda e: _whole_file(e),
                "file_per_claim": lambda e: _file_per_claim(e),
                "journal": lambda e: _journal(e),
            }.get(design) or (lambda e: _sqlite(e))
            runs = samples if design != "whole_file_json" or size <= 2048 else samples // 4
            floor_s, op_s = [], []
            for k in range(runs):
                floor_s.append(floor.two_durable_writes(directory))
                changed = entry(k % size, 2.0 + k)
                started = time.perf_counter()
                change(changed)
                op_s.append(time.perf_counter() - started)
            fl, op = stats.summarize(floor_s), stats.summarize(op_s)
            level[design] = {**op, "floor_p50_ms": fl["p50_ms"],
                             "p50_over_floor_p50": _ratio(op["p50_ms"], fl["p50_ms"])}
        out[f"held_{size}"] = level
        shutil.rmtree(root, ignore_errors=True)
    return out
