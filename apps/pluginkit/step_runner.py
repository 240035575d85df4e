"""Runs a claim's planned steps through core's executor, stopping an abandoned prepare.

Every step goes to `core.executing.execute_claim_steps`: checkpoint writes to the keeper,
CDI specs to the CDI root, API writes to the cluster, and the half's own device actions to
the half. A prepare abandoned part-way (the kubelet gave up, or an unprepare overtook it) is
undone as `core.abandoning` plans it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from apps.pluginkit import claim_half, in_flight
from core import abandoning, executing, models, ports

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


class StepRunner(Generic[RecordT, claim_half.ActionT]):
    """Carries out plans of one half (its records are `RecordT`, its device actions
    `ActionT`)."""

    def __init__(
        self,
        *,
        half: claim_half.HalfActions[RecordT, claim_half.ActionT],
        checkpoint: ports.CheckpointRecorder[RecordT],
        cdi: ports.CDIStore,
        cluster: ports.Cluster,
    ) -> None:
        self._half = half
        self._checkpoint = checkpoint
        self._cdi = cdi
        self._cluster = cluster

    def execute(
        self, steps: Sequence[models.PluginAction[RecordT] | claim_half.ActionT]
    ) -> None:
        """Run `steps` in order; the first that fails stops the rest (its error propagates)."""
        executing.execute_claim_steps(
            steps, checkpoint=self._checkpoint, cdi=self._cdi, cluster=self._cluster,
            devices=self._half,
        )

    def run(
        self,
        steps: Sequence[models.PluginAction[RecordT] | claim_half.ActionT],
        *,
        flight: in_flight.InFlight | None = None,
        rollback_to: models.Checkpoint[RecordT] | None = None,
    ) -> None:
        """Run planned steps in order; for a prepare, check before each that it still counts.

        A prepare abandoned after a durable step is rolled back to `rollback_to` before its
        AbandonedError is raised.
        """
        done: list[models.PluginAction[RecordT] | claim_half.ActionT] = []
        for step in steps:
            abandoned = in_flight.abandonment(flight) if flight is not None else None
            if abandoned is not None:
                if (
                    rollback_to is not None and flight is not None
                    and abandoning.has_durable_step(done)
                ):
                    undo = self._half.plan_rollback(
                        tuple(done), claim_uid=flight.ref.uid, rollback_to=rollback_to
                    )
                    self.execute(abandoning.plan_prepare_rollback(
                        flight.ref.uid, rollback_to=rollback_to, device_undo=undo
                    ))
                raise abandoned
            self.execute((step,))
            done.append(step)
