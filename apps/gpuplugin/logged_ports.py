"""The GPU half's device ports, each change they make logged with this node's name.

`core.executing` carries out the GPU actions through these ports and stays free of logging;
the operator still reads one line per time-slice set and per function bound or unbound.
"""

from __future__ import annotations

import logging

from core import ports
from core.gpu import configs

log = logging.getLogger(__name__)


class LoggedTimeSlicer:
    """A `ports.TimeSlicer` that logs each interval it set."""

    def __init__(self, inner: ports.TimeSlicer, *, node_name: str) -> None:
        self._inner = inner
        self._node_name = node_name

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: configs.TimeSliceInterval
    ) -> None:
        """Set the interval on each GPU, then log it."""
        self._inner.set_time_slice(gpu_uuids, interval)
        log.info(
            "event=time_slice_set node=%s gpus=%s interval=%s",
            self._node_name, ",".join(gpu_uuids), interval.value,
        )


class LoggedVfioBinder:
    """A `ports.VfioBinder` that logs each function it moved."""

    def __init__(self, inner: ports.VfioBinder, *, node_name: str) -> None:
        self._inner = inner
        self._node_name = node_name

    def bind_vfio(self, pci_bus_id: str) -> None:
        """Bind the function to vfio-pci, then log it."""
        self._inner.bind_vfio(pci_bus_id)
        log.info("event=%s node=%s pci_bus_id=%s", "vfio_bound", self._node_name, pci_bus_id)

    def unbind_vfio(self, pci_bus_id: str) -> None:
        """Give the function back to the nvidia driver, then log it."""
        self._inner.unbind_vfio(pci_bus_id)
        log.info("event=%s node=%s pci_bus_id=%s", "vfio_unbound", self._node_name, pci_bus_id)
