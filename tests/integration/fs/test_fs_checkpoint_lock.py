"""The checkpoint lock is node-wide: a second process (and a second thread) waits for it."""

from __future__ import annotations

import multiprocessing
import pathlib
import threading
from multiprocessing import synchronize

from adapters import fs

WAIT_S = 0.5
GENEROUS_S = 10.0


def _take_lock_in_child(
    path: str, started: synchronize.Event, acquired: synchronize.Event
) -> None:
    store = fs.FileCheckpointStore(path)
    started.set()
    with store.locked():
        acquired.set()


def test_checkpoint_lock_makes_a_second_process_wait(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "checkpoint.json")
    store = fs.FileCheckpointStore(path)
    context = multiprocessing.get_context("fork")
    started, acquired = context.Event(), context.Event()
    child = context.Process(target=_take_lock_in_child, args=(path, started, acquired))
    with store.locked():
        child.start()
        assert started.wait(GENEROUS_S)
        assert not acquired.wait(WAIT_S), "second process got the lock while we held it"
    assert acquired.wait(GENEROUS_S), "second process never got the lock after release"
    child.join(GENEROUS_S)
    assert child.exitcode == 0


def test_checkpoint_lock_makes_a_second_thread_wait(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "checkpoint.json")
    acquired = threading.Event()

    def take() -> None:
        with fs.FileCheckpointStore(path).locked():
            acquired.set()

    with fs.FileCheckpointStore(path).locked():
        thread = threading.Thread(target=take)
        thread.start()
        assert not acquired.wait(WAIT_S)
    assert acquired.wait(GENEROUS_S)
    thread.join(GENEROUS_S)


def test_checkpoint_lock_is_released_when_the_block_raises(tmp_path: pathlib.Path) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "checkpoint.json"))
    try:
        with store.locked():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    acquired = threading.Event()

    def take() -> None:
        with store.locked():
            acquired.set()

    thread = threading.Thread(target=take)
    thread.start()
    assert acquired.wait(GENEROUS_S)
    thread.join(GENEROUS_S)


def test_checkpoint_lock_file_sits_next_to_the_checkpoint(tmp_path: pathlib.Path) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "plugin" / "checkpoint.json"))
    with store.locked():
        assert (tmp_path / "plugin" / "checkpoint.json.lock").exists()
    assert store.read() is None
