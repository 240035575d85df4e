"""Adapter: the real Kubernetes API server through the official `kubernetes` client.

`KubeCluster` implements `core.ports.Cluster`; `retrying`, `informer`, `workqueue`, `leader`
and `slices` build the list-watch loop, informer caches, the controller's rate-limited work
queue, leader election and ResourceSlice publishing on top of any such port.
"""

from adapters.kube.cluster import KubeCluster
from adapters.kube.leader import LeaderElector
from adapters.kube.slices import SlicePublisher

__all__ = ["KubeCluster", "LeaderElector", "SlicePublisher"]
