"""The health list the plugin streams to the kubelet, kept beside what it publishes.

Both plugins call `published()` after each successful slice publish; the gRPC health stream
(`adapters.grpc.health_stream`) reads `device_health()` and is told of changes through
`on_change`. Without a monitor every published device is reported healthy, as
`core.device_health` decides; with one (the GPU plugin's NVML event loop, `monitor`), what it
observed of each published device.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from core import device_health

log = logging.getLogger(__name__)


class PublishedDeviceHealth:
    """`ports.DeviceHealthSource` over the devices this node last published. Thread-safe."""

    def __init__(
        self, *, pool: str, clock: Callable[[], float] = time.time,
        monitor: Callable[[Sequence[str]], Mapping[str, device_health.Observation]] | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        # The published names -> what a health monitor observed of them (None: no monitor).
        self._monitor = monitor
        self._lock = threading.Lock()
        self._published: tuple[str, ...] = ()
        # Set by the server once it streams: called (from the publishing thread) on a change.
        self.on_change: Callable[[], None] | None = None

    def published(self, devices: Iterable[Mapping[str, Any]]) -> None:
        """Record what was just published (ResourceSlice device objects, each with a name)."""
        device_names = tuple(sorted(str(d["name"]) for d in devices))
        with self._lock:
            changed = device_names != self._published
            self._published = device_names
        if changed:
            log.info("event=health_devices_changed pool=%s devices=%d", self._pool,
                     len(device_names))
            self.observed_changed()

    def observed_changed(self) -> None:
        """The monitor saw something new: streams send the list again."""
        on_change = self.on_change
        if on_change is not None:
            on_change()

    def device_health(self) -> tuple[device_health.DeviceHealth, ...]:
        with self._lock:
            published = self._published
        observed = self._monitor(published) if self._monitor is not None else None
        return device_health.plan_device_health(
            pool=self._pool, published=published, observed=observed, now_s=int(self._clock())
        )
