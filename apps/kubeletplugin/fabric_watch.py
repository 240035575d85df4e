"""The node's NVLink fabric health, judged at start and at every clique refresh.

Each check reads the fabric records (NVML, through the inventory port) and judges them
(`core.computedomain.fabric_health`). On a change the plugin republishes its slice with (or
without) the `compute-domain.nvidia.com/fabric-degraded` taint and re-sends the kubelet's
health list (`on_change`), logs `event=fabric_degraded` / `event=fabric_recovered`, and records
a Node Event. A read that fails keeps the last judgment, as the clique refresh keeps the last
clique: a flaky NVML probe must neither taint a good node nor clear a bad one.

The judgment also goes to the node's driver-managed IMEX daemons, whose pods have no NVML of
their own: `DomainFabricFiles` leaves it as `fabric-health.json` in every per-domain directory
(`<plugin dir>/domains/<cdUID>`, the daemon's `/imexd`) when it changes, and in a domain's
directory when a daemon claim is prepared, so a new daemon reads the current one at once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from adapters.fs import fabric_health_file
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
        on_judgment: Callable[[], None] | None = None,
    ) -> None:
        """`on_change`: the judgment changed; `on_judgment`: that, or the first read
        succeeded (`judgment` is no longer None)."""
        self._node_name = node_name
        self._probe = probe
        self._cluster = cluster
        self._on_change = on_change
        self._on_judgment = on_judgment
        self._lock = threading.Lock()
        self._health = fabric_health.NOT_JUDGED
        self._judged = False

    @property
    def health(self) -> fabric_health.FabricHealth:
        with self._lock:
            return self._health

    def judgment(self) -> fabric_health.FabricHealth | None:
        """The last judgment; None until a read has succeeded (nothing is known yet)."""
        with self._lock:
            return self._health if self._judged else None

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
            before, first = self._health, not self._judged
            if judged is None or (judged == before and not first):
                return
            self._health, self._judged = judged, True
        if judged != before:
            self._announce(before, judged)
            self._on_change()
        if self._on_judgment is not None:
            self._on_judgment()

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


class DomainFabricFiles:
    """Keeps `fabric-health.json` in each per-domain directory under `root` saying what
    `judgment` says (no file while it is None). Thread-safe: the refresh thread and the
    kubelet's prepare calls write under one lock, each the judgment of that moment, so the
    last write is never an older judgment than the last change."""

    def __init__(
        self, *, root: str, judgment: Callable[[], fabric_health.FabricHealth | None]
    ) -> None:
        self._root = os.path.abspath(root)
        self._judgment = judgment
        self._lock = threading.Lock()

    def sync_all(self, *, starting: bool = False) -> None:
        """Every domain directory that exists now (the judgment changed, or the plugin is
        `starting`: a file left by an earlier run may be stale, a write it was killed in may
        have left a temp file)."""
        with self._lock:
            health = self._judgment()
            for directory in fabric_health_file.domain_dirs(self._root):
                if starting:
                    try:
                        fabric_health_file.remove_temp_files(directory)
                    except OSError as exc:
                        log.warning("event=fabric_temp_files_not_removed dir=%s error=%r",
                                    directory, str(exc))
                self._write(directory, health)

    def prepared(self, directory: str) -> None:
        """A daemon claim mounting `directory` is being prepared."""
        with self._lock:
            self._write(directory, self._judgment())

    def _write(self, directory: str, health: fabric_health.FabricHealth | None) -> None:
        try:
            fabric_health_file.write(directory, health)
        except OSError as exc:  # best effort: the daemon then falls back to its own view
            log.error("event=fabric_file_not_written dir=%s error=%r", directory, str(exc))
            return
        log.debug("event=fabric_file_written dir=%s healthy=%s", directory,
                  "unknown" if health is None else health.healthy)
