"""The IMEX daemon's view of its node's NVLink fabric: read every few seconds, on a thread.

A daemon whose node's fabric is degraded (`core.computedomain.fabric_health`) reports its
entry NotReady to the ComputeDomain whatever nvidia-imex answers: its peers cannot reach the
node over NVLink. The records come through the inventory port (`--nvml`, as `check` reads the
clique). A read that fails keeps the last judgment; where NVML cannot be loaded at all (the
daemon pod is not given the driver's library) the check says so once and stops, and the entry
follows nvidia-imex alone, as it did before the check existed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Final

from adapters.nvml import real as nvml_real
from core import models
from core.computedomain import fabric_health

log = logging.getLogger(__name__)

# How often the daemon reads the fabric (env FABRIC_CHECK_SECONDS).
DEFAULT_INTERVAL_S: Final = 60.0

# Waits up to the given seconds; True when the daemon is stopping (threading.Event.wait).
Wait = Callable[[float], bool]


class FabricMonitor:
    """Owns the last judgment (`health`); `on_change` wakes the daemon's loop. Thread-safe."""

    def __init__(
        self,
        *,
        read: Callable[[], Sequence[models.FabricRecord]],
        node_name: str,
        on_change: Callable[[], None],
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._read = read
        self._node_name = node_name
        self._on_change = on_change
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._health = fabric_health.NOT_JUDGED
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
        """Check at once, then every interval, until `wait` says stop or NVML is absent."""
        while self.check_once() and not wait(self._interval_s):
            pass

    def check_once(self) -> bool:
        """Read and judge once; False when there is no NVML to read (stop checking)."""
        try:
            judged = fabric_health.judge(self._read())
        except nvml_real.NvmlUnavailable as exc:
            log.warning("event=fabric_check_unavailable node=%s error=%r action=not_checking "
                        "detail=%r", self._node_name, exc.message,
                        "the entry's status follows nvidia-imex alone")
            return False
        except Exception as exc:  # NVML must never take the daemon down; next round retries
            log.error("event=fabric_check_failed node=%s error=%r action=keeping_last "
                      "healthy=%s", self._node_name, getattr(exc, "message", str(exc)),
                      self.health().healthy)
            return True
        with self._lock:
            self.checks += 1
            before, self._health = self._health, judged
        if judged == before:
            return True
        if judged.healthy:
            log.info("event=fabric_recovered node=%s was=%r", self._node_name, before.describe())
        else:
            log.warning("event=fabric_degraded node=%s reason=%s gpus=%r action=report_not_ready",
                        self._node_name, judged.reason, judged.describe())
        self._on_change()
        return True
