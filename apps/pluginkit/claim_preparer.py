"""Prepare and unprepare of one claim: read, plan with the half, run the steps, answer.

A prepare fetches the claim, checks that a pod on this node reserves it, lets the half read
what its planner needs, and runs the planned steps in order under the node-wide lock (every
API read happens outside it). A claim already completed gets the same answer without asking
the API server (DESIGN §4 step 1). Transient refusals are retried within the kubelet call's
budget; a permanent one is also reported as an Event on the claim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Generic, NoReturn, TypeVar

import tenacity

from apps.pluginkit import (
    checkpoint_keeper,
    claim_half,
    claim_reads,
    device_status_writer,
    in_flight,
    step_runner,
)
from apps.pluginkit import metrics as plugin_metrics
from core import claims as claim_checks
from core import device_status, errors, kinds, models, ports

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)


class ClaimPreparer(
    Generic[RecordT, claim_half.NodeT, claim_half.ObservedT, claim_half.ActionT]
):
    """Prepares and unprepares single claims with one half's device logic."""

    def __init__(
        self,
        *,
        half: claim_half.ClaimHalf[
            RecordT, claim_half.NodeT, claim_half.ObservedT, claim_half.ActionT
        ],
        keeper: checkpoint_keeper.CheckpointKeeper[RecordT],
        runner: step_runner.StepRunner[RecordT, claim_half.ActionT],
        cluster: ports.Cluster,
        cdi: ports.CDIStore,
        node: Callable[[], claim_half.NodeT],
        clock: Callable[[], float],
        metrics: plugin_metrics.PluginMetrics | None,
        statuses: device_status_writer.DeviceStatusWriter | None = None,
    ) -> None:
        self._half = half
        self._statuses = statuses
        self._keeper = keeper
        self._runner = runner
        self._cluster = cluster
        self._cdi = cdi
        self._reads = claim_reads.ClaimReads(cluster)
        self._node = node
        self._clock = clock
        self._metrics = metrics

    def prepare(
        self, flight: in_flight.InFlight, deadline: float
    ) -> tuple[models.PreparedDevice, ...]:
        """Prepare the claim of `flight`, retrying transient refusals until `deadline`
        (monotonic) or until the prepare is abandoned."""
        # Transient conditions (daemon not ready yet, channel still held) may clear within the
        # kubelet's 45 s budget; permanent ones are reported at once. Retrying stops as soon
        # as the kubelet has given up on the call.
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(errors.RetryableError),
            stop=lambda state: (
                time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline
                or in_flight.abandonment(flight) is not None
            ),
            wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._prepare_once(flight)
        raise AssertionError("unreachable: tenacity reraises")

    def unprepare(self, ref: models.ClaimRef) -> tuple[models.PreparedDevice, ...]:
        """Undo what the claim's entry says was done; the answer has no devices."""
        with self._keeper.locked():
            current = self._keeper.load()
            outcome = self._half.plan_unprepare(ref, checkpoint=current, now=self._clock())
            self._runner.run(outcome.steps)
        plugin_metrics.publish_prepared_devices(self._metrics, outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info("event=claim_unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
        entry = current.entries.get(ref.uid)
        if entry is not None and self._statuses is not None:
            self._statuses.clear(ref)
        if entry is not None:
            self._half.after_unprepare(entry, after=outcome.checkpoint, node=self._node())
        return ()

    def _prepare_once(self, flight: in_flight.InFlight) -> tuple[models.PreparedDevice, ...]:
        ref = flight.ref
        in_flight.check_in_flight(flight)
        with self._keeper.locked():
            current = self._keeper.load()
            refused = self._keeper.degraded_reason
            if refused is not None:
                raise errors.PermanentError(refused)
            reused = claim_checks.reusable_devices(current, ref.uid)
            if reused is not None:
                self._ensure_spec_file(current.entries[ref.uid])
        if reused is not None:
            log.info(
                "event=claim_already_prepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid
            )
            return reused
        # Every API call happens here, outside the node-wide lock.
        claim = self._reads.claim(ref)
        placements = self._reads.reserved_placements(claim, node_name=self._node().node_name)
        not_reserved = claim_checks.reservation_error(
            claim, placements=placements, node=self._node()
        )
        if not_reserved is not None:
            in_flight.check_in_flight(flight)
            self._report(ref, not_reserved)
        observed = self._half.observe(claim, node=self._node())
        with self._keeper.locked():
            current = self._keeper.load()
            outcome = self._half.plan_prepare(
                claim, checkpoint=current, observed=observed, node=self._node(),
                now=self._clock(),
            )
            if outcome.error is None:
                self._half.check_before_steps(outcome)
            try:
                self._runner.run(outcome.steps, flight=flight, rollback_to=current)
            except errors.ClusterError as exc:  # an API write the planner asked for
                doing = self._half.api_steps_doing(node=self._node())
                raise claim_reads.api_unavailable(doing, exc) from exc
        plugin_metrics.publish_prepared_devices(self._metrics, outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info(
            "event=claim_prepared claim=%s/%s uid=%s devices=%s",
            ref.namespace, ref.name, ref.uid,
            ",".join(d.device_name for d in outcome.devices),
        )
        self._publish_status(ref, outcome.checkpoint.entries.get(ref.uid))
        return outcome.devices

    def _publish_status(
        self, ref: models.ClaimRef, entry: models.CheckpointEntry[RecordT] | None
    ) -> None:
        """Hand the claim's device status to the background writer (never fails a prepare)."""
        if self._statuses is None or entry is None:
            return
        try:
            data = self._half.device_status_data(entry, node=self._node())
        except Exception as exc:  # the answer stands; the status just says less
            log.warning(
                "event=claim_device_status_data_failed claim=%s/%s uid=%s reason=%r",
                ref.namespace, ref.name, ref.uid, str(exc),
            )
            data = {}
        self._statuses.publish(ref, device_status.planned(entry.devices, data))

    def _ensure_spec_file(self, entry: models.CheckpointEntry[RecordT]) -> None:
        """An answer must have its CDI file: write back a lost or unreadable one from the entry.

        Call with the checkpoint lock held.
        """
        try:
            intact = self._cdi.read(entry.claim_uid) is not None
        except errors.DecodeError:
            intact = False
        if intact:
            return
        restore = self._half.plan_restore_spec(entry, node=self._node())
        if restore is None:
            raise errors.PermanentError(
                f"the CDI spec file of claim {entry.namespace}/{entry.name} ({entry.claim_uid}) "
                "is missing or unreadable and cannot be rebuilt from the checkpoint; delete the "
                "pod so the kubelet unprepares the claim, then recreate it"
            )
        log.warning(
            "event=cdi_spec_restored claim=%s/%s uid=%s reason=missing_or_unreadable",
            entry.namespace, entry.name, entry.claim_uid,
        )
        self._runner.execute((restore,))

    def _report(self, ref: models.ClaimRef, error: Exception) -> NoReturn:
        """Raise `error` as the claim's answer; a permanent one is also an Event on the claim."""
        if isinstance(error, errors.PermanentError):
            self._cluster.emit_event(
                involved=models.ObjectRef(
                    kind=kinds.RESOURCE_CLAIM.kind,
                    name=ref.name,
                    namespace=ref.namespace,
                    uid=ref.uid,
                    api_version=kinds.RESOURCE_CLAIM.api_version,
                ),
                reason="PrepareFailed",
                message=str(error),
            )
        raise error
