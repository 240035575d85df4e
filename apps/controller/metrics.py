"""Prometheus metrics of the controller (`nvidia_dra_compute_domain_info`, as upstream)."""

from __future__ import annotations

import threading

import prometheus_client

from core import models


class ControllerMetrics:
    """One info series per live ComputeDomain; series of deleted CDs are forgotten."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.compute_domain_info = prometheus_client.Gauge(
            "nvidia_dra_compute_domain_info",
            "ComputeDomains known to the controller (value 1), with mode and status.",
            ["namespace", "name", "uid", "mode", "isolation", "status"],
            registry=self.registry,
        )
        self.reconcile_actions_total = prometheus_client.Counter(
            "nvidia_dra_controller_actions_total",
            "Cluster actions the controller applied, by kind of action.",
            ["action"],
            registry=self.registry,
        )
        self.reconcile_failures_total = prometheus_client.Counter(
            "nvidia_dra_controller_reconcile_failures_total",
            "ComputeDomain reconciles that failed and were retried with backoff.",
            registry=self.registry,
        )
        self._series: dict[str, tuple[str, ...]] = {}
        # NB: several work-queue workers record at once.
        self._lock = threading.Lock()

    def record_domain(self, cd: models.ComputeDomain, *, config: models.DriverConfig) -> None:
        status = cd.status.status.value if cd.status is not None else "NotReady"
        labels = (
            cd.meta.namespace, cd.meta.name, cd.meta.uid,
            config.mode.value, config.isolation.value, status,
        )
        with self._lock:
            previous = self._series.get(cd.meta.uid)
            if previous is not None and previous != labels:
                self.compute_domain_info.remove(*previous)
            self.compute_domain_info.labels(*labels).set(1)
            self._series[cd.meta.uid] = labels

    def forget(self, uid: str) -> None:
        with self._lock:
            labels = self._series.pop(uid, None)
            if labels is not None:
                self.compute_domain_info.remove(*labels)

    def count_action(self, action: models.ClusterAction) -> None:
        self.reconcile_actions_total.labels(type(action).__name__).inc()

    def actions_applied(self) -> int:
        """Cluster actions applied so far, all kinds together (what `count_action` counted)."""
        return int(sum(
            sample.value
            for metric in self.reconcile_actions_total.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")  # not the series' `_created` timestamps
        ))

    def exposition(self) -> bytes:
        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, port: int) -> None:
        prometheus_client.start_http_server(port, registry=self.registry)
