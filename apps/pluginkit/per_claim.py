"""One kubelet call answered claim by claim: each claim's result or error, never the batch's.

A claim's failure (bad input, a refusal, a bug) is logged, counted and answered for that
claim only; the others go on. The call's retry budget is shared by its claims and ends
before the kubelet's own deadline, so the answer still reaches it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from apps.pluginkit import in_flight
from apps.pluginkit import metrics as plugin_metrics
from core import claims as claim_checks
from core import errors, models, names, ports

log = logging.getLogger(__name__)

# Leave the kubelet this long before its deadline to receive our answer.
_ANSWER_MARGIN_S = 0.2

# Handles one claim, retrying until the monotonic deadline it is given; returns its devices.
ClaimHandler = Callable[[models.ClaimRef, float], tuple[models.PreparedDevice, ...]]


def answer_each_claim(
    operation: str,
    claims: tuple[models.ClaimRef, ...],
    handle: ClaimHandler,
    *,
    call: ports.KubeletCall | None,
    retry_budget_s: float,
    metrics: plugin_metrics.PluginMetrics | None,
) -> dict[names.ClaimUID, models.ClaimResult]:
    """Run `handle` for each claim of the call (`operation`: "prepare" or "unprepare")."""
    started = time.perf_counter()
    # One retry budget for the whole kubelet call, shared by its claims: the kubelet gives
    # up on the call after 45 s, and then every claim's answer is lost.
    deadline = time.monotonic() + retry_budget_s
    remaining = call.time_remaining() if call is not None else None
    if remaining is not None:
        deadline = min(deadline, time.monotonic() + remaining - _ANSWER_MARGIN_S)
    results: dict[names.ClaimUID, models.ClaimResult] = {}
    for ref in claims:
        invalid = claim_checks.claim_uid_error(ref.uid)
        if invalid is not None:  # bad input, not a bug: no traceback, no huge log line
            log.warning(
                "event=%s_failed claim=%s/%s uid=%s kind=permanent error=invalid_claim_uid",
                operation, claim_checks.shown(ref.namespace), claim_checks.shown(ref.name),
                claim_checks.shown(ref.uid),
            )
            _count_error(metrics, operation, "permanent")
            results[ref.uid] = models.ClaimResult(error=invalid.message)
            continue
        try:
            with _in_flight(metrics, operation):
                results[ref.uid] = models.ClaimResult(devices=handle(ref, deadline))
        except errors.DriverError as exc:
            kind = (
                "abandoned" if isinstance(exc, in_flight.AbandonedError)
                else "permanent" if isinstance(exc, errors.PermanentError)
                else "retryable"
            )
            log.warning(
                "event=%s_failed claim=%s/%s uid=%s kind=%s error=%r",
                operation, ref.namespace, ref.name, ref.uid, kind, exc.message,
            )
            _count_error(metrics, operation, kind)
            results[ref.uid] = models.ClaimResult(error=exc.message)
        except Exception as exc:  # one claim's bug or I/O error must not sink the others
            log.exception(
                "event=%s_failed claim=%s/%s uid=%s kind=internal",
                operation, ref.namespace, ref.name, ref.uid,
            )
            _count_error(metrics, operation, "internal")
            results[ref.uid] = models.ClaimResult(
                error=f"internal error {operation.removesuffix('e')}ing claim: {exc}"
            )
    if metrics is not None:
        metrics.observe_call(operation=operation, seconds=time.perf_counter() - started)
    return results


def _in_flight(
    metrics: plugin_metrics.PluginMetrics | None, operation: str
) -> contextlib.AbstractContextManager[None]:
    return metrics.in_flight(operation) if metrics is not None else contextlib.nullcontext()


def _count_error(
    metrics: plugin_metrics.PluginMetrics | None, operation: str, kind: str
) -> None:
    if metrics is not None:
        metrics.count_error(operation=operation, kind=kind)
