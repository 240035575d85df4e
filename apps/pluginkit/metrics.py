"""Prometheus metrics of the kubelet plugin (names and label sets as upstream: `nvidia_dra_*`).

Each PluginMetrics owns its registry so tests and the demo can run many plugins in
one process without colliding in the global registry.

Upstream's series are exposed under upstream's names with upstream's labels, so dashboards
built for the Go driver work; ours add labels of our own (`node` everywhere, `operation` and
`kind` on the error counters), never drop one of upstream's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from core import models, names

if TYPE_CHECKING:
    import prometheus_client
    from prometheus_client import metrics_core


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")

OPERATIONS = ("prepare", "unprepare")

# Upstream's buckets (0.05 s doubling to 12.8 s) merged with ours, so queries naming either
# set's `le` find a bucket.
_DURATION_BUCKETS = tuple(sorted(
    {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 45}
    | {0.05 * 2**i for i in range(9)}
))


def publish_prepared_devices(
    metrics: PluginMetrics | None, current: models.Checkpoint[RecordT]
) -> None:
    """Publish `current`'s prepared devices (a driver without metrics skips it).

    O(1): the devices are counted from the latest checkpoint when a scrape asks.
    """
    if metrics is not None:
        metrics.set_prepared_entries(current.entries)


class PluginMetrics:
    """Counters and histograms the plugin updates per kubelet call and per claim.

    `prometheus_client` (about 0.1 s to import) is loaded at the first use, or by `warm_up`
    in the background, so it never delays the plugin's start and registration.
    """

    def __init__(
        self,
        *,
        node_name: str,
        driver: str = names.DRIVER_NAME,
        device_type_of: Callable[[str], str] = names.prepared_device_type,
        device_types: tuple[str, ...] = names.PREPARED_DEVICE_TYPES,
    ) -> None:
        self._driver = driver
        self._node = node_name
        self._labels = {"driver": driver, "node": node_name}
        self._device_type_of = device_type_of
        self._device_types = device_types
        self._entries: Mapping[Any, models.CheckpointEntry[Any]] = {}
        self._lock = threading.Lock()
        self._built: _Instruments | None = None

    def warm_up(self) -> None:
        """Import the client library and create the metrics now (call from a thread)."""
        self._instruments()

    def _instruments(self) -> _Instruments:
        built = self._built
        if built is None:
            with self._lock:
                if self._built is None:
                    self._built = _Instruments(prepared_devices=self._collect_prepared)
                    # As upstream: the request series exist (at 0) from the first scrape.
                    for operation in OPERATIONS:
                        labels = {**self._labels, "operation": operation}
                        self._built.requests_total.labels(**labels)
                        self._built.request_duration_seconds.labels(**labels)
                        self._built.requests_inflight.labels(**labels)
                built = self._built
        return built

    @property
    def registry(self) -> prometheus_client.CollectorRegistry:
        return self._instruments().registry

    def count_stale_cleaned(self, *, state: str, reason: str) -> None:
        self._instruments().stale_claims_cleaned_total.labels(
            **self._labels, state=state, reason=reason
        ).inc()

    def count_cleanup_skipped(self) -> None:
        self._instruments().stale_claim_cleanup_skipped_total.labels(**self._labels).inc()

    def observe_call(self, *, operation: str, seconds: float) -> None:
        built = self._instruments()
        built.requests_total.labels(**self._labels, operation=operation).inc()
        built.request_duration_seconds.labels(**self._labels, operation=operation).observe(
            seconds
        )

    @contextlib.contextmanager
    def in_flight(self, operation: str) -> Iterator[None]:
        """Count one claim's prepare or unprepare in `nvidia_dra_requests_inflight` meanwhile."""
        gauge = self._instruments().requests_inflight.labels(**self._labels, operation=operation)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def count_error(self, *, operation: str, kind: str) -> None:
        """One claim's failed `operation`; `kind` is ours (permanent, retryable, ...).

        Prepare failures go to `nvidia_dra_node_prepare_errors_total`, unprepare failures to
        `nvidia_dra_node_unprepare_errors_total` (upstream's split), each with upstream's
        `error_type` (`prepare_devices` / `unprepare_devices`: the claim's devices failed).
        """
        built = self._instruments()
        counter = (
            built.node_unprepare_errors_total if operation == "unprepare"
            else built.node_prepare_errors_total
        )
        counter.labels(
            **self._labels, operation=operation, kind=kind, error_type=f"{operation}_devices"
        ).inc()

    def set_prepared_entries(self, entries: Mapping[Any, models.CheckpointEntry[Any]]) -> None:
        """The checkpoint entries `nvidia_dra_prepared_devices` counts at the next scrape."""
        self._entries = entries  # NB: immutable (core.checkpoint); read by the scrape thread

    def prepared_device_counts(self) -> dict[str, int]:
        """Devices of PrepareCompleted claims by `device_type` (each known type, 0 if none)."""
        counts = dict.fromkeys(self._device_types, 0)
        for entry in self._entries.values():
            if entry.state is models.ClaimState.PREPARE_COMPLETED:
                for device in entry.devices:
                    kind = self._device_type_of(device.device_name)
                    counts[kind] = counts.get(kind, 0) + 1
        return counts

    def _collect_prepared(self) -> Iterable[tuple[list[str], int]]:
        return (
            ([self._driver, self._node, kind], count)
            for kind, count in self.prepared_device_counts().items()
        )

    def exposition(self) -> bytes:
        """The text format a scrape would get (used by tests and the demo)."""
        import prometheus_client

        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, port: int, *, address: str = "0.0.0.0") -> None:
        """Expose /metrics at `address:port` (a daemon thread; all interfaces by default)."""
        import prometheus_client

        prometheus_client.start_http_server(port, addr=address, registry=self.registry)


class _PreparedDevicesCollector:
    """`nvidia_dra_prepared_devices`, counted from the latest checkpoint at each scrape."""

    def __init__(self, samples: Callable[[], Iterable[tuple[list[str], int]]]) -> None:
        self._samples = samples

    def collect(self) -> Iterator[metrics_core.Metric]:
        from prometheus_client import metrics_core

        family = metrics_core.GaugeMetricFamily(
            "nvidia_dra_prepared_devices",
            "Devices currently prepared on this node (PrepareCompleted claims), by device type.",
            labels=["driver", "node", "device_type"],
        )
        for labels, count in self._samples():
            family.add_metric(labels, count)
        yield family


class _Instruments:
    """The metric objects, in a registry of their own (many plugins may share a process)."""

    def __init__(
        self, *, prepared_devices: Callable[[], Iterable[tuple[list[str], int]]]
    ) -> None:
        import prometheus_client

        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        labels = ["driver", "node"]

        def metric(kind: Any, name: str, doc: str, extra: list[str], **kwargs: Any) -> Any:
            return kind(name, doc, labels + extra, registry=self.registry, **kwargs)

        self.requests_total = metric(
            prometheus_client.Counter, "nvidia_dra_requests_total",
            "Kubelet DRA calls handled, by operation.", ["operation"],
        )
        self.request_duration_seconds = metric(
            prometheus_client.Histogram, "nvidia_dra_request_duration_seconds",
            "Duration of kubelet DRA calls, by operation.", ["operation"],
            buckets=_DURATION_BUCKETS,
        )
        self.requests_inflight = metric(
            prometheus_client.Gauge, "nvidia_dra_requests_inflight",
            "Claims whose prepare or unprepare is running now, by operation.", ["operation"],
        )
        self.registry.register(_PreparedDevicesCollector(prepared_devices))
        self.stale_claims_cleaned_total = metric(
            prometheus_client.Counter, "nvidia_dra_stale_claims_cleaned_total",
            "Checkpoint entries (and CDI specs) removed because their ResourceClaim was gone.",
            ["state", "reason"],
        )
        self.stale_claim_cleanup_skipped_total = metric(
            prometheus_client.Counter, "nvidia_dra_stale_claim_cleanup_skipped_total",
            "Stale-claim clean-up rounds skipped because the API server could not be read.", [],
        )
        errors = ["operation", "kind", "error_type"]
        self.node_prepare_errors_total = metric(
            prometheus_client.Counter, "nvidia_dra_node_prepare_errors_total",
            "Claims whose prepare failed, by kind and type of error.", errors,
        )
        self.node_unprepare_errors_total = metric(
            prometheus_client.Counter, "nvidia_dra_node_unprepare_errors_total",
            "Claims whose unprepare failed, by kind and type of error.", errors,
        )
