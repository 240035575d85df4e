"""A kubelet plugin's claim driver: the shared plumbing composed around one half.

`ClaimDriver` implements `core.ports.KubeletPluginService` (what the gRPC servicer calls)
for either half of the driver, and decides nothing itself. Its parts, one job each:
`per_claim` answers a kubelet call claim by claim, `in_flight` lets an unprepare stop a
prepare still running, `claim_preparer` prepares and unprepares one claim, `step_runner`
runs the planned steps through core's executor, `checkpoint_keeper` loads, recovers and
persists the checkpoint, `stale_sweeper` drops entries whose claims are gone, and
`device_status_writer` keeps the claims' `status.devices` entries in step. What is
specific to the half's devices comes from its `claim_half.ClaimHalf`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from apps.pluginkit import (
    checkpoint_keeper,
    claim_half,
    claim_preparer,
    device_status_writer,
    in_flight,
    node_events,
    per_claim,
    stale_sweeper,
    step_runner,
)
from apps.pluginkit import metrics as plugin_metrics
from core import checkpoint as checkpoint_codec
from core import models, names, ports

Clock = Callable[[], float]


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginPorts:
    """What a kubelet plugin acts on: the API server, its checkpoint and its CDI root."""

    cluster: ports.Cluster
    checkpoints: ports.CheckpointJournal
    cdi: ports.CDIStore
    # `<plugin dir>/checkpoint.json` when the checkpoint has another name: read once, when
    # the checkpoint is missing (a takeover from upstream, or our earlier release's file).
    predecessor: ports.PredecessorCheckpoint | None = None


class ClaimDriver(Generic[RecordT, claim_half.NodeT, claim_half.ObservedT, claim_half.ActionT]):
    """Prepares and unprepares claims on one node; safe to call from many gRPC threads."""

    def __init__(
        self,
        *,
        half: claim_half.ClaimHalf[
            RecordT, claim_half.NodeT, claim_half.ObservedT, claim_half.ActionT
        ],
        ports: PluginPorts,
        node: claim_half.NodeT,
        clock: Clock = time.time,
        metrics: plugin_metrics.PluginMetrics | None = None,
        retry_budget_s: float = 30.0,
        driver_name: str = "",
    ) -> None:
        """With `driver_name`, prepares write (and unprepares clear) that driver's entries of
        their claims' `status.devices`."""
        self._half = half
        self._node = node
        self._metrics = metrics
        self._retry_budget_s = retry_budget_s
        events = node_events.NodeEvents(ports.cluster, node_name=node.node_name)
        # NB: the node's name and boot are fixed for the driver's life (`set_node` changes
        # only what a prepare plans with), so the checkpoint's parts take them as values.
        self._keeper = checkpoint_keeper.CheckpointKeeper(
            half=half, store=ports.checkpoints, cdi=ports.cdi, events=events,
            node_name=node.node_name, boot_id=node.boot_id, clock=clock,
            predecessor=ports.predecessor,
        )
        runner: step_runner.StepRunner[RecordT, claim_half.ActionT] = step_runner.StepRunner(
            half=half, checkpoint=self._keeper, cdi=ports.cdi, cluster=ports.cluster
        )
        self._statuses = (
            device_status_writer.DeviceStatusWriter(
                ports.cluster, driver_name=driver_name, node_name=node.node_name,
            ) if driver_name else None
        )
        self._preparer = claim_preparer.ClaimPreparer(
            half=half, keeper=self._keeper, runner=runner, cluster=ports.cluster,
            cdi=ports.cdi, node=lambda: self._node, clock=clock, metrics=metrics,
            statuses=self._statuses,
        )
        self._sweeper = stale_sweeper.StaleSweeper(
            half=half, keeper=self._keeper, cluster=ports.cluster, execute=runner.execute,
            events=events, metrics=metrics, node_name=node.node_name,
        )
        self._in_flight = in_flight.InFlightPrepares()

    @property
    def half(
        self,
    ) -> claim_half.ClaimHalf[RecordT, claim_half.NodeT, claim_half.ObservedT, claim_half.ActionT]:
        """The device logic this driver runs."""
        return self._half

    @property
    def node(self) -> claim_half.NodeT:
        """The node facts prepares are planned with now."""
        return self._node

    @property
    def device_statuses(self) -> device_status_writer.DeviceStatusWriter | None:
        """The writer of claims' `status.devices` (None: not written)."""
        return self._statuses

    def set_node(self, node: claim_half.NodeT) -> None:
        """New node facts (a clique that appeared); later prepares plan with them."""
        self._node = node

    def load_checkpoint(self) -> models.Checkpoint[RecordT]:
        """The checkpoint as prepares see it (see `CheckpointKeeper.load`); call with the
        checkpoint lock held."""
        return self._keeper.load()

    def recover(self) -> models.Checkpoint[RecordT]:
        """Startup pass: load (and repair) the checkpoint, persist it, drop orphan CDI specs,
        then the half's start-up reports."""
        with self._keeper.locked():
            current = self._keeper.recover()
        self._half.after_recover(current, node=self._node)
        plugin_metrics.publish_prepared_devices(self._metrics, current)
        return current

    def compact(self) -> None:
        """Fold the journal into the snapshot (at a graceful stop)."""
        with self._keeper.locked():
            self._keeper.compact()

    def clean_stale_claims(self) -> tuple[checkpoint_codec.StaleEntry[RecordT], ...]:
        """One clean-up round: drop entries whose claims the API server says are gone, and
        retry the `status.devices` writes that failed."""
        removed = self._sweeper.sweep()
        if self._statuses is not None:
            for item in removed:
                if not item.entry.name:  # rebuilt from a CDI file: no claim to address
                    continue
                self._statuses.clear(models.ClaimRef(
                    uid=item.entry.claim_uid, namespace=item.entry.namespace,
                    name=item.entry.name,
                ))
            self._statuses.retry_failed()
        return removed

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        """Prepare each claim of one NodePrepareResources call; a claim missing from the
        answer or answered with an error is retried by the kubelet."""
        # Every claim of the call is in flight from now: the kubelet may unprepare the last
        # one while the first is still being prepared.
        with self._in_flight.tracking(ref.uid for ref in claims) as tickets:

            def handle(
                ref: models.ClaimRef, deadline: float
            ) -> tuple[models.PreparedDevice, ...]:
                flight = in_flight.InFlight(ref=ref, call=call, overtaken=tickets[ref.uid])
                return self._preparer.prepare(flight, deadline)

            return per_claim.answer_each_claim(
                "prepare", claims, handle, call=call,
                retry_budget_s=self._retry_budget_s, metrics=self._metrics,
            )

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        """Unprepare each claim of one NodeUnprepareResources call; a prepare of the same
        claim still in flight gives up."""
        # NB: before anything else, so a prepare of these claims still in flight (in an API
        # call, or waiting for the lock we are about to take) sees it and gives up.
        self._in_flight.overtake(ref.uid for ref in claims)
        return per_claim.answer_each_claim(
            "unprepare", claims, lambda ref, _deadline: self._preparer.unprepare(ref),
            call=call, retry_budget_s=self._retry_budget_s, metrics=self._metrics,
        )
