"""The node's NVLink fabric health, judged at start and at every clique refresh.

Each check reads the fabric records (NVML, through the inventory port) and judges them
(`core.computedomain.fabric_health`). On a change the plugin republishes its slice with (or
without) the `compute-domain.nvidia.com/fabric-degraded` taint and re-sends the kubelet's
health list (`on_change`), logs `event=fabric_degraded` / `event=fabric_recovered`, and records
a Node Event. A read that fails keeps the last judgment, as the clique refresh keeps the last
clique: a flaky NVML probe must neither taint a good node nor clear a bad one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from apps.pluginkit import node_events
from core import device_health, device_taints, errors, models, ports
from core.computedomain import fabric_health

log = logging.getLogger(__name__)

# Reads the node's fabric records now; may raise if NVML cannot be read.
FabricProbe = Callable[[], Sequence[models.FabricRecord]]

DEGRADED_REASON: Final = "NVLinkFabricDegraded"
RECOVERED_REASON: Final = "NVLinkFabricRecovered"


class FabricWatch:
    """Owns the node's last fabric judgment; thread-safe (checked on the refresh thread,
    read by the slice publisher and the health stream)."""

    def __init__(
        self,
        *,
        node_name: str,
        probe: FabricProbe,
        cluster: ports.Cluster,
        on_change: Callable[[], None],
    ) -> None:
        self._node_name = node_name
        self._probe = probe
        self._cluster = cluster
        self._on_change = on_change
        self._lock = threading.Lock()
        self._health = fabric_health.NOT_JUDGED

    @property
    def health(self) -> fabric_health.FabricHealth:
        with self._lock:
            return self._health

    def check(self) -> None:
        """Read and judge the fabric once; announce a change of judgment."""
        try:
            judged = fabric_health.judge(self._probe())
        except Exception as exc:  # NVML must never take the plugin down; next round retries
            log.error("event=fabric_check_failed node=%s error=%r action=keeping_last "
                      "healthy=%s", self._node_name, getattr(exc, "message", str(exc)),
                      self.health.healthy)
            judged = None
        with self._lock:
            before = self._health
            if judged is None or judged == before:
                return
            self._health = judged
        self._announce(before, judged)
        self._on_change()

    def tainted(self, devices: Sequence[models.JSONObject]) -> list[models.JSONObject]:
        """`devices` as they are published now: each with the fabric taint while degraded."""
        taints = fabric_health.device_taints_of(
            self.health, (str(d.get("name")) for d in devices))
        return device_taints.with_taints(devices, taints)

    def observations(self, published: Sequence[str]) -> Mapping[str, device_health.Observation]:
        return fabric_health.observations(self.health, published)

    def _announce(
        self, before: fabric_health.FabricHealth, after: fabric_health.FabricHealth
    ) -> None:
        if after.healthy:
            log.info("event=fabric_recovered node=%s was=%r", self._node_name, before.describe())
            self._emit(RECOVERED_REASON, (
                f"the NVLink fabric of node {self._node_name} is healthy again: its IMEX "
                "channel devices are published without the fabric-degraded taint"
            ), warning=False)
            return
        log.warning("event=fabric_degraded node=%s reason=%s gpus=%r taint=%s",
                    self._node_name, after.reason, after.describe(),
                    fabric_health.taint(after))
        self._emit(DEGRADED_REASON, (
            f"the NVLink fabric of node {self._node_name} is degraded ({after.describe()}): "
            f"its IMEX channel devices are tainted {fabric_health.TAINT_KEY}={after.reason}:"
            "NoSchedule, so no new ComputeDomain workload is placed here (running ones keep "
            "their channels); check `nvidia-smi -q | grep -A5 Fabric`, nvidia-fabricmanager "
            "and the NVLink switches"
        ), warning=True)

    def _emit(self, reason: str, message: str, *, warning: bool) -> None:
        try:
            node_events.emit_node_event(
                self._cluster, self._node_name, reason, message, warning=warning)
        except errors.ClusterError as exc:  # an event is best effort
            log.warning("event=event_not_recorded node=%s reason=%s error=%r",
                        self._node_name, reason, str(exc))
