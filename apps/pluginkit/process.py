"""A plugin process's life: the deferred API client, serve until stopped.

Both plugins' `__main__` run the same sequence around their own start-up: the kubelet needs
the sockets first, so the API client loads beside recovery and serving.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from apps.pluginkit import deferred_cluster, serving
from core import errors, ports


def deferred_kube_cluster(kubeconfig: str | None) -> deferred_cluster.DeferredCluster:
    """The real API client, built in a thread so that nothing the kubelet needs waits for it."""

    def build() -> ports.Cluster:
        from adapters.kube import cluster as kube_cluster  # ~0.25 s: off the start-up path

        return kube_cluster.KubeCluster.from_config(kubeconfig)

    return deferred_cluster.DeferredCluster(build).start()


def run(
    start: Callable[[ports.Cluster], serving.Plugin[Any]],
    *,
    kubeconfig: str | None,
    metrics_port: int | None,
    stop: threading.Event,
    log: logging.Logger,
    listen_address: str = "0.0.0.0",
) -> int:
    """Start the plugin, serve until `stop`, then stop it; the process's exit status.

    Exit 2, with the message on stderr, when start-up fails or the API client cannot be
    built (a bad kubeconfig, say): the same status either way.
    """
    cluster = deferred_kube_cluster(kubeconfig)
    try:
        plugin = start(cluster)
    except errors.DriverError as exc:
        return _startup_failed(log, exc)
    problem = cluster.wait()
    if problem is not None:
        plugin.stop(grace_s=0)
        return _startup_failed(log, problem)
    if metrics_port:
        plugin.metrics.serve(metrics_port, address=listen_address)
    stop.wait()
    plugin.stop(grace_s=serving.DRAIN_GRACE_S)
    return 0


def _startup_failed(log: logging.Logger, exc: errors.DriverError) -> int:
    log.error("event=startup_failed error=%r", exc.message)
    print(f"error: {exc.message}", file=sys.stderr)
    return 2
