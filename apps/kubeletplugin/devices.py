"""What this node offers the scheduler, following its NVLink clique as it comes and goes.

A host-managed node without an NVLink clique (an H100 host, a fabric not brought up) can prepare
no claim, so it publishes no channel device and says so once in a Node Event. While it has none,
each slice resync asks NVML again; when a clique appears the driver learns it (prepares work),
the channel is published, and a second Event says so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import node_events
from core import errors, models, ports
from core.computedomain import node_facts, slice_devices

log = logging.getLogger(__name__)

# Returns the node's clique ID now ("" for none); may raise if NVML cannot be read.
CliqueProbe = Callable[[], str]


class NodeDevices:
    """The devices to publish now (`current()`, called by the slice resync loop)."""

    def __init__(
        self,
        *,
        driver: plugin_driver.PluginDriver,
        config: models.DriverConfig,
        cluster: ports.Cluster,
        probe_clique: CliqueProbe | None = None,
    ) -> None:
        self._driver = driver
        self._config = config
        self._cluster = cluster
        self._probe_clique = probe_clique
        self._announced_none = False

    def current(self) -> tuple[models.JSONObject, ...]:
        node = self._driver.node
        if self._config.host_managed and not node.clique_id:
            node = self._look_for_clique(node)
        devices = slice_devices.plan_slice_devices(self._config, node=node)
        if self._config.host_managed and not node.clique_id and not self._announced_none:
            self._announced_none = True
            log.warning("event=no_nvlink_clique node=%s action=publishing_no_device",
                        node.node_name)
            self._emit(node, "NoNVLinkClique", (
                f"node {node.node_name} has no NVLink clique (NVML reports no fabric for its "
                "GPUs), so host-managed IMEX cannot connect it to other nodes: it publishes no "
                "IMEX channel device and ComputeDomain pods are not scheduled here; check the "
                "fabric manager and the host's nvidia-imex service if this node should be part "
                "of an NVLink domain (the plugin looks again at every slice resync)"
            ))
        return devices

    def _look_for_clique(self, node: node_facts.ImexNodeFacts) -> node_facts.ImexNodeFacts:
        if self._probe_clique is None:
            return node
        try:
            clique_id = self._probe_clique()
        except Exception as exc:  # NVML must never take the plugin down; try next resync
            log.warning("event=nvlink_clique_probe_failed node=%s error=%r", node.node_name,
                        str(exc))
            return node
        if not clique_id:
            return node
        found = dataclasses.replace(node, clique_id=clique_id)
        self._driver.set_node(found)
        self._announced_none = False
        log.info("event=nvlink_clique_found node=%s clique=%s", node.node_name, clique_id)
        self._emit(node, "NVLinkCliqueFound", (
            f"node {node.node_name} joined NVLink clique {clique_id}: it publishes the IMEX "
            "channel device again"
        ))
        return found

    def _emit(self, node: node_facts.ImexNodeFacts, reason: str, message: str) -> None:
        try:
            node_events.emit_node_event(
                self._cluster, node.node_name, reason, message,
                warning=reason == "NoNVLinkClique",
            )
        except errors.ClusterError as exc:  # an event is best effort
            log.warning("event=event_not_recorded node=%s reason=%s error=%r",
                        node.node_name, reason, str(exc))
