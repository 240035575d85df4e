"""The disk floor: two durable (temp + fsync + rename + dir fsync) writes, as prepare does."""

from __future__ import annotations

import os
import time

from bench import stats


def _durable_write(directory: str, name: str, data: bytes) -> None:
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def two_durable_writes(directory: str) -> float:
    """Seconds for one floor sample (two durable 1 KiB writes), to interleave with a bench."""
    payload = b"x" * 1024
    started = time.perf_counter()
    _durable_write(directory, "a", payload)
    _durable_write(directory, "b", payload)
    return time.perf_counter() - started


def two_fsync_floor(directory: str, *, n: int = 200) -> dict[str, float]:
    """Latency of two durable small-file writes in `directory` (the lower bound of a prepare)."""
    payload = b"x" * 1024

    def two_writes() -> None:
        _durable_write(directory, "a", payload)
        _durable_write(directory, "b", payload)

    return stats.summarize([stats.timed(two_writes) for _ in range(n)])
