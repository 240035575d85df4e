"""Kubernetes Events about this plugin's Node: what an operator sees with `kubectl describe node`.

Recoveries, the degraded mode, the stale sweep and the halves' start-up reports all speak to
the operator here.
"""

from __future__ import annotations

from core import models, ports


def emit_node_event(
    cluster: ports.Cluster, node_name: str, reason: str, message: str, *, warning: bool = True
) -> None:
    """Record a Kubernetes Event about the Node `node_name` (raises ClusterError)."""
    cluster.emit_event(
        involved=models.ObjectRef(kind="Node", name=node_name, api_version="v1"),
        reason=reason,
        message=message,
        warning=warning,
    )


class NodeEvents:
    """Warning Events about one Node."""

    def __init__(self, cluster: ports.Cluster, *, node_name: str) -> None:
        self._cluster = cluster
        self._node_name = node_name

    def emit(self, reason: str, message: str) -> None:
        """Record a Warning Event with `reason` on the Node (raises ClusterError)."""
        emit_node_event(self._cluster, self._node_name, reason, message)
