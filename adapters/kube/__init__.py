"""Adapter: the real Kubernetes API server through the official `kubernetes` client.

`KubeCluster` implements `core.ports.Cluster`; `retrying`, `informer`, `workqueue`, `leader`
and `slices` build the list-watch loop, informer caches, the controller's rate-limited work
queue, leader election and ResourceSlice publishing on top of any such port.

The names below load on first use (PEP 562): importing a submodule that does not need the
`kubernetes` package (about 0.25 s to import) must not pay for it, e.g. the kubelet plugin's
start-up, which registers with the kubelet before the API client is loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.kube.cluster import KubeCluster
    from adapters.kube.leader import LeaderElector
    from adapters.kube.slices import SlicePublisher

_LAZY = {
    "KubeCluster": "adapters.kube.cluster",
    "LeaderElector": "adapters.kube.leader",
    "SlicePublisher": "adapters.kube.slices",
}

__all__ = ["KubeCluster", "LeaderElector", "SlicePublisher"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
