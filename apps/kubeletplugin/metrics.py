"""Prometheus metrics of the kubelet plugin (names as upstream: `nvidia_dra_*`).

Each PluginMetrics owns its registry so tests and the demo can run many plugins in
one process without colliding in the global registry.
"""

from __future__ import annotations

import prometheus_client

from core import names


class PluginMetrics:
    """Counters and histograms the plugin updates per kubelet call and per claim."""

    def __init__(self, *, node_name: str) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        labels = {"driver": names.DRIVER_NAME, "node": node_name}
        self._labels = labels
        self.requests_total = prometheus_client.Counter(
            "nvidia_dra_requests_total",
            "Kubelet DRA calls handled, by operation.",
            ["driver", "node", "operation"],
            registry=self.registry,
        )
        self.request_duration_seconds = prometheus_client.Histogram(
            "nvidia_dra_request_duration_seconds",
            "Duration of kubelet DRA calls, by operation.",
            ["driver", "node", "operation"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 45),
        )
        self.prepared_devices = prometheus_client.Gauge(
            "nvidia_dra_prepared_devices",
            "Devices currently prepared on this node (PrepareCompleted claims).",
            ["driver", "node"],
            registry=self.registry,
        )
        self.stale_claims_cleaned_total = prometheus_client.Counter(
            "nvidia_dra_stale_claims_cleaned_total",
            "Checkpoint entries (and CDI specs) removed because their ResourceClaim was gone.",
            ["driver", "node", "state", "reason"],
            registry=self.registry,
        )
        self.stale_claim_cleanup_skipped_total = prometheus_client.Counter(
            "nvidia_dra_stale_claim_cleanup_skipped_total",
            "Stale-claim clean-up rounds skipped because the API server could not be read.",
            ["driver", "node"],
            registry=self.registry,
        )
        self.node_prepare_errors_total = prometheus_client.Counter(
            "nvidia_dra_node_prepare_errors_total",
            "Claims whose prepare or unprepare failed, by operation and kind of error.",
            ["driver", "node", "operation", "kind"],
            registry=self.registry,
        )

    def count_stale_cleaned(self, *, state: str, reason: str) -> None:
        self.stale_claims_cleaned_total.labels(**self._labels, state=state, reason=reason).inc()

    def count_cleanup_skipped(self) -> None:
        self.stale_claim_cleanup_skipped_total.labels(**self._labels).inc()

    def observe_call(self, *, operation: str, seconds: float) -> None:
        self.requests_total.labels(**self._labels, operation=operation).inc()
        self.request_duration_seconds.labels(**self._labels, operation=operation).observe(seconds)

    def count_error(self, *, operation: str, kind: str) -> None:
        self.node_prepare_errors_total.labels(**self._labels, operation=operation, kind=kind).inc()

    def set_prepared_devices(self, count: int) -> None:
        self.prepared_devices.labels(**self._labels).set(count)

    def exposition(self) -> bytes:
        """The text format a scrape would get (used by tests and the demo)."""
        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, port: int) -> None:
        """Expose /metrics on all interfaces at `port` (a daemon thread)."""
        prometheus_client.start_http_server(port, registry=self.registry)
