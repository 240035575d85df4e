"""Percentiles and timing of repeated calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def summarize(samples_s: list[float]) -> dict[str, float]:
    """p50/p99/mean/max in milliseconds."""
    ordered = sorted(samples_s)

    def pct(p: float) -> float:
        index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
        return ordered[index] * 1000

    return {
        "n": float(len(ordered)),
        "p50_ms": round(pct(50), 3),
        "p99_ms": round(pct(99), 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
