"""The one stop-signal setup of every long-running binary: SIGTERM or SIGINT sets an event.

The kubelet, Kubernetes and the tests stop every binary the same way, and each binary then
winds down from its main thread, so the handler only records the signal and wakes whoever
waits on the event.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType


def stop_on_signals(log: logging.Logger) -> threading.Event:
    """Install SIGTERM and SIGINT handlers (main thread only) and return the event they set;
    each signal is logged as `event=shutdown signal=<name>` on `log`.

    NB: call it before anything announces the process as started (registration with the
    kubelet, a "listening" line): whoever waits for that may signal right away.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("event=shutdown signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
