"""The one stop-signal setup: SIGTERM and SIGINT each set the event the binary waits on."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator

import pytest

from apps.shell import signals


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_sets_the_event_and_is_logged(
    sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shell-test")
    stop = signals.stop_on_signals(logging.getLogger("shell-test"))
    assert not stop.is_set()

    os.kill(os.getpid(), sig)

    assert stop.wait(timeout=10)
    assert f"event=shutdown signal={sig.name}" in caplog.messages
