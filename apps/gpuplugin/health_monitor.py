"""The GPU plugin's health monitor (gate NVMLDeviceHealthCheck): NVML events become device
taints in this node's ResourceSlice and states in the kubelet's health stream.

Events arrive on the event watcher's thread (`ports.GpuHealthEvents`); each is planned in
`core.gpu.health`, saved (a restart keeps it, a reboot forgets it), logged, and announced
through `on_change` (the plugin republishes its slices and re-sends the health list).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from adapters.fs import health_state
from core import device_health, ports
from core.gpu import health

log = logging.getLogger(__name__)


class GpuHealthMonitor:
    """Owns the node's `HealthState`; thread-safe."""

    def __init__(
        self,
        *,
        events: ports.GpuHealthEvents,
        store: health_state.HealthStateFile,
        boot_id: str,
        policy: health.XidPolicy,
        placements: Callable[[], Sequence[health.Placement]],
        on_change: Callable[[], None],
    ) -> None:
        self._events = events
        self._store = store
        self._policy = policy
        self._placements = placements
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = health.for_boot(store.load(), boot_id=boot_id)
        kept = {d: t for d, t in self._state.taints.items() if t}
        if kept:
            log.info("event=gpu_health_state_kept devices=%d taints=%s", len(kept),
                     _describe(kept))

    @property
    def state(self) -> health.HealthState:
        with self._lock:
            return self._state

    def start(self) -> None:
        self._events.start(self.on_event)
        log.info("event=gpu_health_monitor_started ignored_xids=%s",
                 ",".join(str(x) for x in sorted(self._policy.ignored)))

    def stop(self) -> None:
        self._events.stop()

    def on_event(self, event: health.HealthEvent) -> None:
        """Apply one event; save, log and announce it when a device's taints changed."""
        with self._lock:
            state, changed = health.apply_event(self._state, event,
                                                where=self._placements(), policy=self._policy)
            if changed:
                self._store.save(state)
                self._state = state
        taint = health.taint_for(event, self._policy)
        if not changed:
            log.debug("event=gpu_health_event_known kind=%s gpu=%s taint=%s", event.kind.value,
                      event.gpu_uuid or "*", taint)
            return
        level = logging.WARNING if taint.blocks_scheduling else logging.INFO
        log.log(level, "event=gpu_device_tainted kind=%s gpu=%s gi=%s ci=%s taint=%s devices=%s",
                event.kind.value, event.gpu_uuid or "*", _instance(event.gi_id),
                _instance(event.ci_id), taint, ",".join(changed))
        self._on_change()

    def observations(self, published: Sequence[str]) -> Mapping[str, device_health.Observation]:
        return health.observations(self.state, published)


def _instance(value: int) -> str:
    return "-" if value == health.WHOLE_GPU else str(value)


def _describe(taints: Mapping[str, tuple[health.DeviceTaint, ...]]) -> str:
    return ";".join(f"{d}={'|'.join(str(t) for t in ts)}" for d, ts in sorted(taints.items()))
