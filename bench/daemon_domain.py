"""IMEX daemons forming a domain: `compute-domain-daemon` runners on the embedded cluster.

Each simulated node runs the daemon's real loop (`apps.daemon.runner.DaemonRunner`: conflict-safe
entry writes, peer informer, nodes.cfg + hosts files, supervised child, readiness probe) in a
thread of this process against one in-memory cluster, with the simulated `nvidia-imex` /
`nvidia-imex-ctl` as real child processes. In-process so that the figures measure the protocol,
not 18 (or 256) Python interpreters starting on this machine's cores.

- `all_ready`: N daemons started at once -> every entry Ready (upstream #816: a 256-pod domain
  took ~8 minutes to start).
- `join_to_every_nodes_cfg`: with N-1 daemons Ready, one more starts; time until every other
  node's /etc/hosts (DNS names) maps the joiner, per join.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from typing import Any

from adapters.imex import ctl as imex_ctl
from adapters.imex import simulated as imex_simulated
from adapters.imex import supervisor as imex_supervisor
from adapters.memory import cluster as memory_cluster
from apps.daemon import registry as daemon_registry
from apps.daemon import runner as daemon_runner
from bench import stats
from core import errors, kinds, models, names
from core.computedomain import imexconfig, membership

DRIVER_NS = "nvidia-dra-driver"
MAX_NODES = 18
_CLUSTER_UUID = "5e1f0c2a-7b3d-4c6e-9a81-0f2e3d4c5b6a"


@dataclasses.dataclass(kw_only=True)
class _Daemon:
    node: str
    ip: str
    clique: str
    root: str
    runner: daemon_runner.DaemonRunner
    stop: threading.Event
    thread: threading.Thread

    @property
    def hosts_file(self) -> str:
        return os.path.join(self.root, "hosts")


def _start(cluster: memory_cluster.InMemoryCluster, *, workdir: str, bin_dir: str, cd_uid: str,
           index: int, clique: str, poll_s: float) -> _Daemon:
    node = f"node-{index:03d}"
    ip = f"10.{index // 250}.{index % 250}.7"
    root = os.path.join(workdir, node)
    config_dir = os.path.join(root, "imexd")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "imexd.cfg.tmpl"), "w", encoding="utf-8") as f:
        f.write(imexconfig.DEFAULT_IMEXD_TEMPLATE)
    with open(os.path.join(root, "hosts"), "w", encoding="utf-8") as f:
        f.write("127.0.0.1\tlocalhost\n")
    cfg = os.path.join(config_dir, "imexd.cfg")
    registry = daemon_registry.PeerRegistry(
        cluster, store=membership.Store.CLIQUE,
        me=membership.Identity(node_name=node, ip_address=ip, clique_id=clique),
        domain_uid=cd_uid, domain_name="bench", domain_namespace="bench", namespace=DRIVER_NS,
        max_nodes=MAX_NODES,
    )
    runner = daemon_runner.DaemonRunner(
        registry=registry,
        supervisor=imex_supervisor.IMEXSupervisor(
            [os.path.join(bin_dir, imex_simulated.IMEX_NAME), "-c", cfg]),
        ctl=imex_ctl.IMEXCtl(command=os.path.join(bin_dir, imex_simulated.CTL_NAME),
                             config_path=cfg),
        paths=daemon_runner.Paths(
            imexd_template=os.path.join(config_dir, "imexd.cfg.tmpl"), imexd_cfg=cfg,
            nodes_cfg=os.path.join(config_dir, "nodes.cfg"),
            hosts_file=os.path.join(root, "hosts"),
        ),
        dns_names=True, max_nodes=MAX_NODES, ready_poll_s=poll_s, ready_recheck_s=10.0,
    )
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), name=f"daemon-{node}", daemon=True)
    thread.start()
    return _Daemon(node=node, ip=ip, clique=clique, root=root, runner=runner, stop=stop,
                   thread=thread)


def _stop(daemons: list[_Daemon]) -> None:
    for d in daemons:
        d.stop.set()
    for d in daemons:
        d.thread.join(timeout=30)


def _domain(cluster: memory_cluster.InMemoryCluster) -> str:
    created = cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "bench"}}},
    })
    return str(created["metadata"]["uid"])


def _counts(cluster: memory_cluster.InMemoryCluster, cd_uid: str,
            cliques: list[str]) -> tuple[int, int]:
    """(entries listed, entries Ready) over the domain's cliques."""
    listed = ready = 0
    for clique in cliques:
        try:
            obj = cluster.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=DRIVER_NS,
                              name=membership.clique_object_name(cd_uid, clique))
        except errors.NotFoundError:
            continue  # not created yet
        store = membership.Store.CLIQUE
        peers = membership.peers_of(membership.entries_of(obj, store=store), store=store)
        listed += len(peers)
        ready += sum(p.status is models.DomainStatus.READY for p in peers)
    return listed, ready


def _ready_count(cluster: memory_cluster.InMemoryCluster, cd_uid: str,
                 cliques: list[str]) -> int:
    return _counts(cluster, cd_uid, cliques)[1]


def _cliques(count: int) -> list[str]:
    return [f"{_CLUSTER_UUID}.{i}" for i in range((count + MAX_NODES - 1) // MAX_NODES)]


def all_ready(workdir: str, *, daemons: int, poll_s: float, timeout_s: float = 300.0
              ) -> dict[str, Any]:
    """Start `daemons` at once (18 per clique); seconds until every entry is Ready."""
    cluster = memory_cluster.InMemoryCluster()
    bin_dir = os.path.join(workdir, "bin")
    imex_simulated.install(bin_dir)
    cd_uid = _domain(cluster)
    cliques = _cliques(daemons)
    started = time.perf_counter()
    running = [
        _start(cluster, workdir=workdir, bin_dir=bin_dir, cd_uid=cd_uid, index=i,
               clique=cliques[i // MAX_NODES], poll_s=poll_s)
        for i in range(daemons)
    ]
    deadline = started + timeout_s
    listed_s = None
    # NB: the observer's reads share the cluster's lock with the daemons: poll gently.
    every_s = 0.005 if daemons <= MAX_NODES else 0.05
    while time.perf_counter() < deadline:
        listed, ready = _counts(cluster, cd_uid, cliques)
        if listed_s is None and listed == daemons:
            listed_s = time.perf_counter() - started
        if ready == daemons:
            break
        time.sleep(every_s)
    elapsed = time.perf_counter() - started
    ready = _ready_count(cluster, cd_uid, cliques)
    _stop(running)
    cluster.close()
    return {"daemons": daemons, "cliques": len(cliques), "ready": ready,
            "seconds_to_all_listed": round(listed_s or elapsed, 3),
            "seconds_to_all_ready": round(elapsed, 3), "ready_poll_s": poll_s}


def join_to_every_nodes_cfg(workdir: str, *, peers: int, joins: int, poll_s: float
                            ) -> dict[str, Any]:
    """With `peers` daemons Ready in one clique, start one more, `joins` times."""
    cluster = memory_cluster.InMemoryCluster()
    bin_dir = os.path.join(workdir, "bin")
    imex_simulated.install(bin_dir)
    cd_uid = _domain(cluster)
    clique = _cliques(1)[0]
    running = [_start(cluster, workdir=workdir, bin_dir=bin_dir, cd_uid=cd_uid, index=i,
                      clique=clique, poll_s=poll_s) for i in range(peers)]
    _wait(lambda: _ready_count(cluster, cd_uid, [clique]) == peers, timeout_s=120)
    samples: list[float] = []
    for _ in range(joins):
        started = time.perf_counter()
        joiner = _start(cluster, workdir=workdir, bin_dir=bin_dir, cd_uid=cd_uid, index=peers,
                        clique=clique, poll_s=poll_s)
        line = f"{joiner.ip}\t"
        _wait(functools.partial(_everywhere, line, running), timeout_s=60)
        samples.append(time.perf_counter() - started)
        _stop([joiner])
        _wait(functools.partial(_nowhere, line, running), timeout_s=60)
    _stop(running)
    cluster.close()
    return {"peers": peers, **stats.summarize(samples)}


def _everywhere(line: str, daemons: list[_Daemon]) -> bool:
    return all(line in _read(d.hosts_file) for d in daemons)


def _nowhere(line: str, daemons: list[_Daemon]) -> bool:
    return all(line not in _read(d.hosts_file) for d in daemons)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _wait(predicate: Any, *, timeout_s: float) -> None:
    deadline = time.perf_counter() + timeout_s
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("bench condition not reached")
        time.sleep(0.002)


def run_all(workdir: str, *, quick: bool = False) -> dict[str, Any]:
    """The figures `make bench` records (issue goals: 18 daemons Ready within 2 s, a join
    reaching every nodes.cfg within 1 s p99, 256 daemons Ready within 30 s; 64 with --quick)."""
    return {
        "rack_18_all_ready": all_ready(os.path.join(workdir, "rack"), daemons=18, poll_s=0.1),
        "join_to_every_nodes_cfg": join_to_every_nodes_cfg(
            os.path.join(workdir, "join"), peers=17, joins=5 if quick else 30, poll_s=0.1),
        "big_domain_all_ready": all_ready(
            os.path.join(workdir, "big"), daemons=64 if quick else 256, poll_s=0.25),
    }
