"""Retry policy for cluster calls: conflict retries, reconnect backoff, and the informer loop.

Everything here speaks only `core.ports.Cluster`, so it runs unchanged on the real API
server and on any fake or embedded cluster. Backoff comes from tenacity (exponential with
full jitter, capped) so a fleet of plugins reconnecting after an API server restart spreads
out instead of stampeding.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar

import tenacity

from core import errors, ports

log = logging.getLogger(__name__)

T = TypeVar("T")

Wait = Callable[[tenacity.RetryCallState], float]


def bounded_backoff(*, initial_s: float = 0.5, max_s: float = 30.0) -> Wait:
    """Exponential backoff with full jitter, never above `max_s` (tenacity wait strategy)."""
    return tenacity.wait_random_exponential(multiplier=initial_s, max=max_s)


# A capped wait reaches its cap long before this many attempts (2**63 times the initial delay).
_MAX_ATTEMPT = 64


def backoff_delay(wait: Wait, *, attempt: int) -> float:
    """Seconds a tenacity wait strategy asks for before retry number `attempt` (1-based).

    Asks tenacity itself, through its public API: a `Retrying` that always retries, stops
    after `attempt` retries and records its sleeps instead of sleeping. O(attempt), with
    `attempt` capped at 64.
    """
    slept: list[float] = []
    retrying = tenacity.Retrying(
        retry=tenacity.retry_always,
        stop=tenacity.stop_after_attempt(min(max(1, attempt), _MAX_ATTEMPT) + 1),
        wait=wait,
        sleep=slept.append,
        retry_error_callback=lambda _state: None,
    )
    retrying(lambda: None)
    return float(slept[-1])


def retry_on_conflict(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    wait: Wait | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `fn` until it does not raise ConflictError, at most `attempts` times.

    `fn` must re-read what it updates on every call (read-modify-write), otherwise each
    retry sends the same stale resourceVersion. After the last attempt the ConflictError
    propagates; every other error propagates at once.
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(errors.ConflictError),
        stop=tenacity.stop_after_attempt(attempts),
        wait=wait or bounded_backoff(initial_s=0.05, max_s=1.0),
        sleep=sleep,
        reraise=True,
    )
    return retrying(fn)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Relist:
    """The informer (re)listed: `items` is now the whole truth; forget objects not in it.

    One synthetic ADDED event per item follows, so consumers that only handle events
    still see every object.
    """

    items: tuple[Mapping[str, Any], ...]
    resource_version: str


InformerEvent = Relist | ports.WatchEvent


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def list_then_watch(
    cluster: ports.Cluster,
    kind: str,
    *,
    namespace: str = "",
    label_selector: ports.LabelSelector | None = None,
    timeout_s: float = 300.0,
    stop: threading.Event | None = None,
    wait: Wait | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Generator[InformerEvent, None, None]:
    """List, then watch from the list's resourceVersion, forever (until `stop` is set).

    - yields `Relist` then one ADDED per listed item after every (re)list;
    - a watch that ends (server timeout, or silence past the API door's idle limit) resumes
      from the last resourceVersion seen, bookmarks included (they are not yielded);
    - GoneError (410) relists;
    - any other ClusterError reconnects after a jittered, capped backoff, which resets
      after the next successful call.
    `stop` is checked between calls, so it takes effect within `timeout_s` of a quiet watch.
    `label_selector` goes to the list and to the watch: the server sends only matching objects
    (one that leaves the selection comes as DELETED), so nothing else crosses the wire.
    """
    stop = stop or threading.Event()
    wait = wait or bounded_backoff()
    failures = 0
    resource_version = ""

    def back_off(exc: errors.ClusterError) -> None:
        nonlocal failures
        failures += 1
        delay = backoff_delay(wait, attempt=failures)
        log.warning(
            "informer reconnecting kind=%s namespace=%s attempt=%d delay_s=%.2f error=%s",
            kind,
            namespace or "*",
            failures,
            delay,
            exc,
        )
        sleep(delay)

    while not stop.is_set():
        if not resource_version:
            try:
                listed = cluster.list(kind, namespace=namespace, label_selector=label_selector)
            except errors.ClusterError as exc:
                back_off(exc)
                continue
            failures = 0
            resource_version = listed.resource_version
            yield Relist(items=listed.items, resource_version=listed.resource_version)
            for item in listed.items:
                yield ports.WatchEvent(type=ports.WatchEventType.ADDED, obj=item)
            continue
        try:
            for event in cluster.watch(
                kind, namespace=namespace, resource_version=resource_version, timeout_s=timeout_s,
                **({"label_selector": label_selector} if label_selector else {}),
            ):
                failures = 0
                resource_version = _resource_version(event.obj) or resource_version
                if event.type is ports.WatchEventType.BOOKMARK:
                    continue  # NB: only the resume point moves; nothing changed
                yield event
                if stop.is_set():
                    return
            failures = 0
        except errors.GoneError as exc:
            log.info("informer relisting kind=%s namespace=%s reason=%s", kind, namespace, exc)
            resource_version = ""
        except errors.ClusterError as exc:
            back_off(exc)
