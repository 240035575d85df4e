"""The controller's work queue: coalescing, one worker per key, per-key backoff, shut-down, idle."""

from __future__ import annotations

import threading

from adapters.kube import workqueue


def _queue() -> workqueue.WorkQueue[str]:
    return workqueue.WorkQueue(backoff=workqueue.per_key_backoff(initial_s=0.01, max_s=0.08))


def test_a_key_added_many_times_waits_once() -> None:
    queue = _queue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert queue.get(timeout_s=0) == "a"
    assert queue.get(timeout_s=0) == "b"
    assert queue.get(timeout_s=0) is None


def test_a_key_added_while_in_flight_comes_back_after_done_not_before() -> None:
    queue = _queue()
    queue.add("a")
    key = queue.get(timeout_s=0)
    queue.add("a")
    assert queue.get(timeout_s=0) is None, "a second worker got a key still in flight"
    queue.done(key or "")
    assert queue.get(timeout_s=0) == "a"


def test_backoff_grows_per_key_and_forget_resets_it() -> None:
    queue = _queue()
    delays = [queue.add_rate_limited("bad") for _ in range(5)]
    assert delays == [0.01, 0.02, 0.04, 0.08, 0.08]
    assert queue.add_rate_limited("good") == 0.01, "one key's failures delayed another"
    queue.forget("bad")
    assert queue.failures("bad") == 0
    assert queue.add_rate_limited("bad") == 0.01


def test_a_delayed_key_becomes_due_and_a_ready_key_is_not_held_behind_it() -> None:
    queue = _queue()
    queue.add_after("later", 0.05)
    queue.add("now")
    assert queue.get(timeout_s=0) == "now"
    assert queue.get(timeout_s=5) == "later"


def test_shut_down_wakes_a_blocked_worker() -> None:
    queue = _queue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.shut_down()
    worker.join(timeout=5)
    assert got == [None]
    queue.add("ignored")
    assert len(queue) == 0


def test_idle_means_nothing_queued_waiting_or_in_flight() -> None:
    queue = _queue()
    assert queue.is_idle()
    queue.add("a")
    assert not queue.is_idle(), "a queued key"
    key = queue.get(timeout_s=0)
    assert not queue.is_idle(), "a key in flight"
    queue.done(key or "")
    assert queue.is_idle()
    queue.add_after("b", 60)
    assert not queue.is_idle(), "a key waiting out its delay"
