"""Prometheus metrics of the kubelet plugin (names as upstream: `nvidia_dra_*`).

Each PluginMetrics owns its registry so tests and the demo can run many plugins in
one process without colliding in the global registry.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from core import checkpoint as checkpoint_codec
from core import models, names

if TYPE_CHECKING:
    import prometheus_client


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


def publish_prepared_devices(
    metrics: PluginMetrics | None, current: models.Checkpoint[RecordT]
) -> None:
    """Set the prepared-devices gauge from `current` (a driver without metrics skips it)."""
    if metrics is not None:
        metrics.set_prepared_devices(checkpoint_codec.index_of(current).prepared_devices)


class PluginMetrics:
    """Counters and histograms the plugin updates per kubelet call and per claim.

    `prometheus_client` (about 0.1 s to import) is loaded at the first use, or by `warm_up`
    in the background, so it never delays the plugin's start and registration.
    """

    def __init__(self, *, node_name: str) -> None:
        self._labels = {"driver": names.DRIVER_NAME, "node": node_name}
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
                    self._built = _Instruments()
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

    def count_error(self, *, operation: str, kind: str) -> None:
        self._instruments().node_prepare_errors_total.labels(
            **self._labels, operation=operation, kind=kind
        ).inc()

    def set_prepared_devices(self, count: int) -> None:
        self._instruments().prepared_devices.labels(**self._labels).set(count)

    def exposition(self) -> bytes:
        """The text format a scrape would get (used by tests and the demo)."""
        import prometheus_client

        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, port: int) -> None:
        """Expose /metrics on all interfaces at `port` (a daemon thread)."""
        import prometheus_client

        prometheus_client.start_http_server(port, registry=self.registry)


class _Instruments:
    """The metric objects, in a registry of their own (many plugins may share a process)."""

    def __init__(self) -> None:
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
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 45),
        )
        self.prepared_devices = metric(
            prometheus_client.Gauge, "nvidia_dra_prepared_devices",
            "Devices currently prepared on this node (PrepareCompleted claims).", [],
        )
        self.stale_claims_cleaned_total = metric(
            prometheus_client.Counter, "nvidia_dra_stale_claims_cleaned_total",
            "Checkpoint entries (and CDI specs) removed because their ResourceClaim was gone.",
            ["state", "reason"],
        )
        self.stale_claim_cleanup_skipped_total = metric(
            prometheus_client.Counter, "nvidia_dra_stale_claim_cleanup_skipped_total",
            "Stale-claim clean-up rounds skipped because the API server could not be read.", [],
        )
        self.node_prepare_errors_total = metric(
            prometheus_client.Counter, "nvidia_dra_node_prepare_errors_total",
            "Claims whose prepare or unprepare failed, by operation and kind of error.",
            ["operation", "kind"],
        )
