"""A gRPC server whose unary calls run on a worker pool and whose streams run on an event loop.

The DRA socket carries both prepares (short, blocking work) and the kubelet's health streams
(open for hours). A plain `grpc.server` runs every call, streams included, on one thread
pool, so open streams take threads from prepares. Here the server is `grpc.aio`: handlers
written as coroutines (the streams) run on the server's event loop in a thread of its own,
and plain functions (the DRA servicers) run on `migration_thread_pool`, which nothing else
uses. However many streams are open, prepares find the pool's threads free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

# How long `start()` waits for the loop thread to bind the socket.
START_TIMEOUT_S = 30.0


class LoopServer:
    """One `grpc.aio` server on a dedicated event-loop thread. `start()` once, `stop()` once."""

    def __init__(self, *, max_workers: int, name: str) -> None:
        self._name = name
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=name
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._stop_requested: asyncio.Event | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the coroutine handlers run on (None before `start()`)."""
        return self._loop

    def start(self, *, setup: Callable[[Any], None], address: str) -> None:
        """Create the server on the loop thread, let `setup` add servicers, bind, serve.

        Raises what binding raised (e.g. an unusable socket path).
        """
        if self._thread is not None:
            raise RuntimeError("LoopServer.start() called twice")
        self._thread = threading.Thread(
            target=self._run, args=(setup, address), name=f"{self._name}-loop", daemon=True
        )
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError(f"gRPC server {self._name} did not start within {START_TIMEOUT_S} s")
        if self._start_error is not None:
            raise self._start_error

    def stop(self, grace: float) -> None:
        """Let in-flight calls finish for up to `grace` s, cancel the rest (streams), join."""
        loop, server = self._loop, self._server
        if loop is not None and server is not None and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result()
            finally:
                stop_requested = self._stop_requested
                if stop_requested is not None:
                    loop.call_soon_threadsafe(stop_requested.set)
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True)

    def _run(self, setup: Callable[[Any], None], address: str) -> None:
        try:
            asyncio.run(self._serve(setup, address))
        except BaseException as exc:  # NB: reported to start(); the thread must not die mute.
            if not self._started.is_set():
                self._start_error = exc
                self._started.set()
            else:
                log.exception("event=grpc_loop_failed server=%s", self._name)

    async def _serve(self, setup: Callable[[Any], None], address: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        server = grpc.aio.server(migration_thread_pool=self._pool)
        setup(server)
        server.add_insecure_port(address)
        await server.start()
        self._server = server
        self._started.set()
        await self._stop_requested.wait()
