"""Reads the node's NVLink clique again every few minutes, and keeps `nvidia.com/gpu.clique`.

As upstream's ComputeDomain kubelet plugin: the clique is re-read every
`CLIQUE_REFRESH_INTERVAL_S` (10 minutes); a new clique replaces the one prepares plan with,
a re-read that finds none (or fails) keeps it. With the label enabled (chart value
`kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled`) the node is labelled with the
clique at start and after every re-read, and the label is removed at a graceful stop. Each
re-read also judges the node's NVLink fabric health (`fabric_watch`), on the same interval.

NB: upstream fails its start-up when the first label patch fails; here the API client may still
be loading when the plugin starts, so the first patch is made by the refresh thread, and a
failed patch is logged and made again at the next re-read.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from apps.kubeletplugin import driver as plugin_driver
from apps.kubeletplugin import fabric_watch
from core import errors, kinds, ports
from core.computedomain import cliques

log = logging.getLogger(__name__)

# Waits up to the given seconds; True when the plugin is stopping (threading.Event.wait).
Wait = Callable[[float], bool]


class CliqueRefresh:
    """The refresh loop (`run`, on a thread from `start`) and the label's removal (`stop`)."""

    def __init__(
        self,
        *,
        driver: plugin_driver.PluginDriver,
        cluster: ports.Cluster,
        probe_clique: Callable[[], str] | None,
        label_enabled: bool,
        interval_s: float = cliques.CLIQUE_REFRESH_INTERVAL_S,
        fabric: fabric_watch.FabricWatch | None = None,
    ) -> None:
        """`probe_clique` None: the clique is not re-read (only `fabric` is checked)."""
        self._driver = driver
        self._cluster = cluster
        self._probe_clique = probe_clique
        self._fabric = fabric
        self._label_enabled = label_enabled
        self._interval_s = interval_s
        self.rounds = 0

    def start(self, stopping: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stopping.wait,), name="clique-refresh", daemon=True
        )
        thread.start()
        return thread

    def run(self, wait: Wait) -> None:
        """Label at once, then re-read and label every interval until `wait` says stop."""
        self.label()
        while not wait(self._interval_s):
            self.refresh_once()

    def refresh_once(self) -> None:
        """One re-read of the clique, then the label (if enabled), then the fabric's health."""
        self.rounds += 1
        if self._probe_clique is not None:
            self._refresh_clique(self._probe_clique)
        self.label()
        if self._fabric is not None:
            self._fabric.check()

    def _refresh_clique(self, probe_clique: Callable[[], str]) -> None:
        node = self._driver.node
        try:
            observed = probe_clique()
        except Exception as exc:  # NVML must never take the plugin down; next round retries
            log.error("event=clique_refresh_failed node=%s error=%r", node.node_name,
                      getattr(exc, "message", str(exc)))
            observed = ""
        clique_id = cliques.refreshed_clique_id(node.clique_id, observed)
        if clique_id != node.clique_id:
            log.info("event=clique_changed node=%s old=%r new=%r", node.node_name,
                     node.clique_id, clique_id)
            self._driver.set_node(dataclasses.replace(node, clique_id=clique_id))

    def label(self) -> None:
        """Set the node's clique label (if enabled and the node has a clique)."""
        if not self._label_enabled:
            return
        patch = cliques.gpu_clique_label_patch(self._driver.node.clique_id)
        if patch is not None:
            self._patch_node(patch, action="set")

    def stop(self) -> None:
        """Remove the label (if enabled): a stopped plugin no longer vouches for the clique."""
        if self._label_enabled:
            self._patch_node(cliques.gpu_clique_label_removal(), action="remove")

    def _patch_node(self, patch: dict[str, Any], *, action: str) -> None:
        node_name = self._driver.node.node_name
        try:
            self._cluster.patch(kinds.NODE.kind, namespace="", name=node_name, patch=patch)
        except errors.ClusterError as exc:
            log.error("event=gpu_clique_label_failed node=%s action=%s error=%r", node_name,
                      action, exc.message)
