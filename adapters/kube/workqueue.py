"""A rate-limited work queue as client-go's controllers use: keys, not events.

- A key waits in the queue at most once, however many events named it (they coalesce).
- A key is handed to one worker at a time; added again while in flight, it is processed again
  after `done`.
- `add_rate_limited` re-adds a key after an exponential per-key delay (a tenacity wait), reset
  by `forget`: one failing key backs off alone, every other key goes on at once.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

import tenacity

from adapters.kube import retrying

K = TypeVar("K", bound=Hashable)


def per_key_backoff(*, initial_s: float = 0.005, max_s: float = 60.0) -> retrying.Wait:
    """initial_s, 2x, 4x, ... capped at max_s (client-go's per-item exponential limiter).

    NB: a minute, not client-go's 1000 s: a CD stuck behind a webhook that comes back is
    served within a minute, for one failing request a minute while it is down.
    """
    return tenacity.wait_exponential(multiplier=initial_s, exp_base=2, min=initial_s, max=max_s)


class WorkQueue(Generic[K]):
    """Thread-safe; `get` blocks until a key is due or the queue is shut down."""

    def __init__(
        self,
        *,
        backoff: retrying.Wait | None = None,
    ) -> None:
        self._backoff = backoff or per_key_backoff()
        self._cond = threading.Condition()
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._shut_down = False

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: K, delay_s: float) -> None:
        if delay_s <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shut_down:
                return
            heapq.heappush(self._waiting, (time.monotonic() + delay_s, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: K) -> float:
        """Re-add `key` after its next backoff delay; returns that delay in seconds."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
        delay = retrying.backoff_delay(self._backoff, attempt=failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts from the initial delay again."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout_s: float | None = None) -> K | None:
        """The next due key (the caller must call `done` with it), or None on shut-down or
        when `timeout_s` passes with nothing due."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shut_down:
                    return None
                now = time.monotonic()
                waits = [w for w in (
                    self._waiting[0][0] - now if self._waiting else None,
                    deadline - now if deadline is not None else None,
                ) if w is not None]
                if deadline is not None and now >= deadline:
                    return None
                self._cond.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._waiting)

    def is_idle(self) -> bool:
        """True when no key is queued, waiting out a delay, or being processed."""
        with self._cond:
            return not (self._queue or self._waiting or self._processing)

    def _add_locked(self, key: K) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def _promote_due_locked(self) -> None:
        now = time.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            _, _, key = heapq.heappop(self._waiting)
            self._add_locked(key)
