"""The IMEX daemon's view of its node's NVLink fabric: read every few seconds, on a thread.

A daemon whose node's fabric is degraded (`core.computedomain.fabric_health`) reports its
entry NotReady to the ComputeDomain whatever nvidia-imex answers: its peers cannot reach the
node over NVLink.

Where the judgment comes from, each round:
- the kubelet plugin's, `fabric-health.json` in the daemon's `/imexd` (IMEXD_DIR): the plugin
  judges the node's fabric and leaves its judgment in every domain directory (a daemon pod is
  given no NVML of its own). While that file is there it is all the daemon goes by. A file
  that is not a judgment (or cannot be read) is logged once and the last judgment kept;
- else NVML, through the inventory port (`--nvml`, as `check` reads the clique): a read that
  fails keeps the last judgment; where NVML cannot be loaded at all (the daemon pod is not
  given the driver's library) the daemon says so once and reads only the file from then on;
- neither: nothing is known, and the entry follows nvidia-imex alone, as it did before the
  check existed. A file that goes away (the plugin has no judgment) never leaves the entry
  NotReady.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Final

from adapters.nvml import real as nvml_real
from core import errors, models
from core.computedomain import fabric_health

log = logging.getLogger(__name__)

# How often the daemon reads the fabric (env FABRIC_CHECK_SECONDS).
DEFAULT_INTERVAL_S: Final = 60.0

# Waits up to the given seconds; True when the daemon is stopping (threading.Event.wait).
Wait = Callable[[float], bool]

# The plugin's judgment now: None when it left none; DecodeError / OSError when unreadable.
ReadPluginJudgment = Callable[[], "fabric_health.FabricHealth | None"]


def _no_plugin_judgment() -> fabric_health.FabricHealth | None:
    return None


class FabricMonitor:
    """Owns the last judgment (`health`); `on_change` wakes the daemon's loop. Thread-safe."""

    def __init__(
        self,
        *,
        read: Callable[[], Sequence[models.FabricRecord]],
        node_name: str,
        on_change: Callable[[], None],
        interval_s: float = DEFAULT_INTERVAL_S,
        read_plugin: ReadPluginJudgment = _no_plugin_judgment,
    ) -> None:
        """`read`: NVML's fabric records; `read_plugin`: the plugin's file (preferred)."""
        self._read = read
        self._read_plugin = read_plugin
        self._node_name = node_name
        self._on_change = on_change
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._health = fabric_health.NOT_JUDGED
        self._nvml_unavailable = False
        self._file_unreadable = False
        self._source = ""
        self.checks = 0

    def health(self) -> fabric_health.FabricHealth:
        with self._lock:
            return self._health

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop.wait,), name="fabric-check", daemon=True
        )
        thread.start()
        return thread

    def run(self, wait: Wait) -> None:
        """Check at once, then every interval, until `wait` says stop."""
        while True:
            self.check_once()
            if wait(self._interval_s):
                return

    def check_once(self) -> None:
        """Read and judge once (the plugin's file, else NVML); a failed read keeps the last
        judgment."""
        try:
            from_plugin = self._read_plugin()
        except (errors.DecodeError, OSError) as exc:
            if not self._file_unreadable:
                self._file_unreadable = True
                log.error("event=fabric_file_unreadable node=%s error=%r action=keeping_last "
                          "healthy=%s", self._node_name, str(exc)[:300], self.health().healthy)
            return
        self._file_unreadable = False
        if from_plugin is not None:
            self._judged(from_plugin, source="plugin")
        elif self._nvml_unavailable:
            self._judged(fabric_health.NOT_JUDGED, source="")
        else:
            self._check_nvml()

    def _check_nvml(self) -> None:
        try:
            judged = fabric_health.judge(self._read())
        except nvml_real.NvmlUnavailable as exc:
            self._nvml_unavailable = True
            log.warning("event=fabric_check_unavailable node=%s error=%r action=plugin_file_only "
                        "detail=%r", self._node_name, exc.message,
                        "no NVML here: the entry's status follows nvidia-imex alone unless the "
                        "kubelet plugin leaves its judgment in " + fabric_health.FILE_NAME)
            self._judged(fabric_health.NOT_JUDGED, source="")
            return
        except Exception as exc:  # NVML must never take the daemon down; next round retries
            log.error("event=fabric_check_failed node=%s error=%r action=keeping_last "
                      "healthy=%s", self._node_name, getattr(exc, "message", str(exc)),
                      self.health().healthy)
            return
        self._judged(judged, source="nvml")

    def _judged(self, judged: fabric_health.FabricHealth, *, source: str) -> None:
        """`source`: plugin | nvml | "" (nothing judged: NOT_JUDGED, the entry follows
        nvidia-imex)."""
        with self._lock:
            if source:
                self.checks += 1
            before, self._health = self._health, judged
            source_before, self._source = self._source, source
        if source != source_before:
            log.info("event=fabric_source node=%s source=%s was=%s", self._node_name,
                     source or "none", source_before or "none")
        if judged == before:
            return
        if judged.healthy:
            log.info("event=fabric_recovered node=%s was=%r source=%s", self._node_name,
                     before.describe(), source or "none")
        else:
            log.warning("event=fabric_degraded node=%s reason=%s gpus=%r action=report_not_ready "
                        "source=%s", self._node_name, judged.reason, judged.describe(), source)
        self._on_change()
