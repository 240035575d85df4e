"""The prepares running now, so that an unprepare or the kubelet giving up can stop them.

In memory only, and only for calls in progress (a restart ends every in-flight prepare
anyway): nothing is kept about claims once their prepare calls returned.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import threading

from core import errors, models, names, ports


class AbandonedError(errors.PermanentError):
    """A prepare that must not finish: the kubelet gave up on it, or unprepared the claim."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class InFlight:
    """One claim's prepare as it runs: its kubelet call, and whether an unprepare overtook it."""

    ref: models.ClaimRef
    call: ports.KubeletCall | None
    overtaken: threading.Event


def abandonment(flight: InFlight) -> AbandonedError | None:
    """Why the prepare in `flight` must stop before its next durable step, if it must."""
    ref = flight.ref
    if flight.overtaken.is_set():
        return AbandonedError(
            f"claim {ref.namespace}/{ref.name} was unprepared while its prepare was in "
            "flight; the unprepare wins and nothing is kept (the kubelet prepares the "
            "claim again if a pod on this node still needs it)"
        )
    if flight.call is not None and not flight.call.is_active():
        return AbandonedError(
            f"the kubelet cancelled the prepare of claim {ref.namespace}/{ref.name} or its "
            "deadline passed; nothing is kept (the kubelet retries)"
        )
    return None


def check_in_flight(flight: InFlight) -> None:
    """Raise the AbandonedError of a prepare that must stop now."""
    abandoned = abandonment(flight)
    if abandoned is not None:
        raise abandoned


class InFlightPrepares:
    """The prepares running now, by claim, so that an unprepare can tell them to give up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tickets: dict[names.ClaimUID, list[threading.Event]] = {}

    @contextlib.contextmanager
    def tracking(
        self, uids: collections.abc.Iterable[names.ClaimUID]
    ) -> collections.abc.Iterator[dict[names.ClaimUID, threading.Event]]:
        """Register one prepare call's claims; yields each claim's "overtaken" flag."""
        tickets = {uid: threading.Event() for uid in uids}
        with self._lock:
            for uid, ticket in tickets.items():
                self._tickets.setdefault(uid, []).append(ticket)
        try:
            yield tickets
        finally:
            with self._lock:
                for uid, ticket in tickets.items():
                    held = self._tickets.get(uid, [])
                    if ticket in held:
                        held.remove(ticket)
                    if not held:
                        self._tickets.pop(uid, None)

    def overtake(self, uids: collections.abc.Iterable[names.ClaimUID]) -> None:
        """An unprepare of these claims arrived: every prepare of them in flight gives up."""
        with self._lock:
            for uid in uids:
                for ticket in self._tickets.get(uid, ()):
                    ticket.set()
