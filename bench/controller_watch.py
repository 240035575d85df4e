"""The controller's cost of a large cluster that is not its own: RSS and bytes watched.

The controller runs as in production (`python -m apps.controller`, its own process) against
the embedded API server over HTTP, under channel isolation (the mode that also watches
ResourceClaims). Between the two sits a byte-counting TCP relay, so "watch bytes" are the
bytes the API server sent the controller (lists and watch streams alike). Two runs, each with
the same ComputeDomains: an empty cluster, and one with `foreign` ResourceClaimTemplates,
Nodes and ResourceClaims of nobody's (half before the controller starts, half while it runs).
The goal is flat: the controller's label selectors keep every foreign object on the server.
For scale, the bytes of the unselected lists (what a watch without selectors streams at its
start) are measured too.
"""

from __future__ import annotations

import json
import os
import pathlib
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from adapters.memory import _http_codec, apiserver
from adapters.memory import cluster as memory_cluster
from core import kinds, names

NAMESPACE = "bench"
_READY_TIMEOUT_S = 120.0


class _CountingRelay:
    """Forwards TCP connections to `target`, counting the bytes sent back to clients."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.bytes_to_client = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.5):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                    if source is upstream:
                        with self._lock:
                            self.bytes_to_client += len(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def _foreign(cluster: memory_cluster.InMemoryCluster, n: int, *, start: int) -> None:
    for i in range(start, start + n):
        cluster.create(kinds.RESOURCE_CLAIM_TEMPLATE.kind, {
            "metadata": {"name": f"other-rct-{i}", "namespace": NAMESPACE,
                         "labels": {"app": "someone-else"}},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}})
        cluster.create(kinds.NODE.kind, {
            "metadata": {"name": f"other-node-{i}",
                         "labels": {"kubernetes.io/hostname": f"other-node-{i}"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})
        cluster.create(kinds.RESOURCE_CLAIM.kind, {
            "metadata": {"name": f"other-claim-{i}", "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})


def _cd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
    }


def _rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _all_ready(cluster: memory_cluster.InMemoryCluster, count: int) -> bool:
    items = cluster.list(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE).items
    ready = [o for o in items if (o.get("status") or {}).get("status") == "Ready"]
    return len(ready) >= count


def _unselected_list_bytes(url: str) -> int:
    total = 0
    for path in ("/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceclaimtemplates",
                 "/apis/resource.k8s.io/v1/resourceclaims"):
        with urllib.request.urlopen(url + path, timeout=60) as answer:
            total += len(answer.read())
    return total


def _one_run(workdir: str, *, foreign: int, domains: int) -> dict[str, Any]:
    cluster = memory_cluster.InMemoryCluster(history_size=max(10_000, 4 * foreign))
    server = apiserver.EmbeddedAPIServer(cluster).start()
    relay = _CountingRelay(target=(server.url.split("//")[1].split(":")[0],
                                   int(server.url.rsplit(":", 1)[1])))
    kubeconfig = os.path.join(workdir, f"kubeconfig-{foreign}")
    with open(kubeconfig, "w", encoding="utf-8") as f:
        json.dump(_http_codec.kubeconfig(f"http://127.0.0.1:{relay.port}"), f)
    _foreign(cluster, foreign // 2, start=0)
    log = open(os.path.join(workdir, f"controller-{foreign}.log"), "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "apps.controller", "--kubeconfig", kubeconfig,
         "--imex-mode", "hostManaged", "--imex-isolation", "channel",
         "--feature-gates", "HostManagedIMEX=true"],
        stdout=log, stderr=subprocess.STDOUT,
        cwd=str(pathlib.Path(__file__).resolve().parents[1]),
    )
    try:
        for i in range(domains // 2):
            cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"cd-{i}"))
        _foreign(cluster, foreign - foreign // 2, start=foreign // 2)
        for i in range(domains // 2, domains):
            cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd(f"cd-{i}"))
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not _all_ready(cluster, domains):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the controller did not make {domains} CDs Ready; see "
                                   f"{log.name}")
            time.sleep(0.05)
        rss = _rss_bytes(process.pid)
        watched = relay.bytes_to_client
        unselected = _unselected_list_bytes(server.url)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        relay.close()
        server.stop()
        cluster.close()
    return {"foreign_objects_per_kind": foreign, "compute_domains": domains,
            "controller_rss_mib": round(rss / 2**20, 1),
            "bytes_sent_to_controller": watched,
            "bytes_of_unselected_lists": unselected}


def foreign_objects(*, foreign: int = 10_000, domains: int = 10) -> dict[str, Any]:
    """Controller RSS and watch bytes with 0 and `foreign` foreign objects per kind."""
    with tempfile.TemporaryDirectory(prefix="cd-bench-watch-") as workdir:
        empty = _one_run(workdir, foreign=0, domains=domains)
        crowded = _one_run(workdir, foreign=foreign, domains=domains)
    return {
        "empty_cluster": empty,
        "with_foreign_objects": crowded,
        "rss_ratio": round(crowded["controller_rss_mib"] / max(empty["controller_rss_mib"], 1e-9),
                           2),
        "watch_bytes_ratio": round(crowded["bytes_sent_to_controller"]
                                   / max(empty["bytes_sent_to_controller"], 1), 2),
        "goal": "flat: both ratios about 1 (foreign objects never reach the controller)",
    }


if __name__ == "__main__":
    print(json.dumps(foreign_objects(foreign=int(sys.argv[1]) if len(sys.argv) > 1
                                     else 10_000), indent=2))
