"""Running `compute-domain-daemon` processes against an embedded API server, one per fake node.

Each node gets its own /imexd stand-in (holding the imexd.cfg template the kubelet plugin would
have left there) and its own /etc/hosts stand-in.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "apps"))

import app_processes

from adapters.memory import cluster as memory_cluster
from core import errors, kinds, models, names
from core.computedomain import imexconfig, membership

DRIVER_NAMESPACE = "nvidia-dra-driver"
CD_NAMESPACE = "team-a"
CD_NAME = "cd-train"
CLIQUE_A = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.1"
CLIQUE_B = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.2"
HOSTS_SEED = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"

eventually = app_processes.eventually
AppProcess = app_processes.AppProcess


@dataclasses.dataclass(frozen=True, kw_only=True)
class Node:
    name: str
    ip: str
    clique: str
    root: pathlib.Path

    @property
    def config_dir(self) -> pathlib.Path:
        return self.root / "imexd"

    @property
    def hosts_file(self) -> pathlib.Path:
        return self.root / "hosts"

    @property
    def nodes_cfg(self) -> pathlib.Path:
        return self.config_dir / "nodes.cfg"

    def prepare(self) -> None:
        """What the kubelet plugin and the container runtime leave before the daemon starts."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "imexd.cfg.tmpl").write_text(
            imexconfig.DEFAULT_IMEXD_TEMPLATE, encoding="utf-8"
        )
        if not self.hosts_file.exists():
            self.hosts_file.write_text(HOSTS_SEED, encoding="utf-8")


def nodes(
    tmp_path: pathlib.Path, count: int, *, clique: str = CLIQUE_A, first: int = 0
) -> list[Node]:
    """`count` prepared nodes with IPs 10.0.0.<10+i>."""
    made = [
        Node(name=f"node-{i:02d}", ip=f"10.0.0.{i + 10}", clique=clique,
             root=tmp_path / f"node-{i:02d}")
        for i in range(first, first + count)
    ]
    for node in made:
        node.prepare()
    return made


def ready_entries(
    cluster: memory_cluster.InMemoryCluster, cd_uid: str, count: int
) -> list[membership.Peer] | None:
    found = entries(cluster, cd_uid=cd_uid)
    ready = all(p.status is models.DomainStatus.READY for p in found)
    return found if len(found) == count and ready else None


def compute_domain(cluster: memory_cluster.InMemoryCluster) -> str:
    created = cluster.create(
        kinds.COMPUTE_DOMAIN.kind,
        {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": CD_NAME, "namespace": CD_NAMESPACE},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "ch"}}},
        },
    )
    return str(created["metadata"]["uid"])


def daemon_args(
    node: Node,
    *,
    cd_uid: str,
    kubeconfig: pathlib.Path,
    bin_dir: pathlib.Path,
    feature_gates: str = "",
    max_nodes: int = 18,
    command: str = "run",
) -> list[str]:
    return [
        command,
        "--node-name", node.name,
        "--pod-ip", node.ip,
        "--clique-id", node.clique,
        "--compute-domain-uuid", cd_uid,
        "--compute-domain-name", CD_NAME,
        "--compute-domain-namespace", CD_NAMESPACE,
        "--namespace", DRIVER_NAMESPACE,
        "--max-nodes-per-imex-domain", str(max_nodes),
        "--feature-gates", feature_gates,
        "--config-dir", str(node.config_dir),
        "--hosts-file", str(node.hosts_file),
        "--imex-command", str(bin_dir / "nvidia-imex"),
        "--imex-ctl-command", str(bin_dir / "nvidia-imex-ctl"),
        "--kubeconfig", str(kubeconfig),
        "--ready-poll-seconds", "0.2",
        "--ready-recheck-seconds", "0.2",
    ]


def entries(
    cluster: memory_cluster.InMemoryCluster, *, cd_uid: str, clique: str = CLIQUE_A
) -> list[membership.Peer]:
    """The daemons listed in the clique object (empty while it does not exist)."""
    try:
        obj = cluster.get(
            kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=DRIVER_NAMESPACE,
            name=membership.clique_object_name(cd_uid, clique),
        )
    except errors.NotFoundError:
        return []
    store = membership.Store.CLIQUE
    return list(membership.peers_of(membership.entries_of(obj, store=store), store=store))


def status_entries(cluster: memory_cluster.InMemoryCluster) -> list[membership.Peer]:
    obj: Any = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=CD_NAMESPACE, name=CD_NAME)
    store = membership.Store.STATUS
    return list(membership.peers_of(membership.entries_of(obj, store=store), store=store))


def expected_hosts_lines(peers: Sequence[tuple[int, str]]) -> list[str]:
    return [f"{ip}\t{imexconfig.dns_name(index)}" for index, ip in sorted(peers)]
