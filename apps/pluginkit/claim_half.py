"""The seam between the shared plugin plumbing and one half's device logic.

Like dra-example-driver's device profile: the plumbing (`apps.pluginkit.driver` and the parts
it composes) runs kubelet calls, the checkpoint, CDI files, retries, rollback and the stale
sweep, and asks the half only what is specific to its devices: how to plan a claim, what an
empty or rebuilt checkpoint of its claims is, what to read from the API before planning, and
how to carry out its own device actions. The ComputeDomain half
(`apps.kubeletplugin.driver.ComputeDomainHalf`) and the GPU half
(`apps.gpuplugin.driver.GpuHalf`) implement `ClaimHalf`; `mypy --strict` checks that each
half's observations and actions flow back to it with their own types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from core import device_status, models, names, upstream_checkpoint

# What a half reads from the API server before the node-wide lock (None when nothing).
ObservedT = TypeVar("ObservedT")
# The half's own device actions, beside the shared plugin steps (`typing.Never` for none).
ActionT = TypeVar("ActionT")
ActionT_co = TypeVar("ActionT_co", covariant=True)


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")
# What the half knows of its node (`models.NodeFacts` or a half's richer facts).
NodeT = TypeVar("NodeT", bound=models.NodeFacts)
NodeT_contra = TypeVar("NodeT_contra", bound=models.NodeFacts, contravariant=True)


class PlannedClaim(Protocol[RecordT, ActionT_co]):
    """What a half's planner returns for one claim (`models.ClaimOutcome` and the like)."""

    @property
    def steps(self) -> tuple[models.PluginAction[RecordT] | ActionT_co, ...]:
        """The steps to run in order."""
        ...

    @property
    def checkpoint(self) -> models.Checkpoint[RecordT]:
        """The checkpoint once every step ran."""
        ...

    @property
    def devices(self) -> tuple[models.PreparedDevice, ...]:
        """The kubelet's answer when `error` is None."""
        ...

    @property
    def error(self) -> Exception | None:
        """Why the claim is refused (reported after the steps ran), or None."""
        ...


class HalfCheckpoint(Protocol[RecordT]):
    """What a half's checkpoint entries are: their typed record (`RecordT`, written by
    `codec`), empty, rebuilt from CDI specs, restored, freed. Pure."""

    @property
    def codec(self) -> models.RecordCodec[RecordT]:
        """How the half's records are written into, and read from, the checkpoint."""
        ...

    @property
    def unreadable_spec_action(self) -> str:
        """What the start-up log says is done with a claim whose CDI spec cannot be read."""
        ...

    def empty_checkpoint(self, *, boot_id: str) -> models.Checkpoint[RecordT]:
        """The checkpoint of a node with nothing prepared (a first start)."""
        ...

    def rebuild_from_cdi(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        *,
        unreadable: tuple[names.ClaimUID, ...],
        boot_id: str,
        now: float,
    ) -> models.Checkpoint[RecordT]:
        """The checkpoint the readable CDI specs (and the unreadable ones' UIDs) prove."""
        ...

    def freed_by(self, entry: models.CheckpointEntry[RecordT]) -> str:
        """What a stale entry's clean-up set free, for the Node event."""
        ...

    def adopt_upstream(
        self, upstream: upstream_checkpoint.UpstreamCheckpoint, *, boot_id: str, now: float
    ) -> upstream_checkpoint.Adoption[RecordT]:
        """Upstream's prepared claims as this half's entries (a takeover), and the notices
        about what is adopted but not managed."""
        ...


class HalfActions(Protocol[RecordT, ActionT]):
    """A half's own device actions: how they are carried out, and how they are undone."""

    def apply(self, action: ActionT) -> None:
        """Carry out one of the half's device actions (through `core.executing`)."""
        ...

    def plan_rollback(
        self,
        done: Sequence[models.PluginAction[RecordT] | ActionT],
        *,
        claim_uid: names.ClaimUID,
        rollback_to: models.Checkpoint[RecordT],
    ) -> tuple[ActionT, ...]:
        """Device actions that undo the half's own steps in `done` (an abandoned prepare
        going back to `rollback_to`), as the half's core planner decides them."""
        ...

    def plan_stale_undo(
        self,
        entry: models.CheckpointEntry[RecordT],
        *,
        after: models.Checkpoint[RecordT],
    ) -> tuple[ActionT, ...]:
        """Device actions that undo what a stale entry (its claim gone) says was done, run
        before the entry is dropped (`after` is the checkpoint without it)."""
        ...


class ClaimHalf(
    HalfCheckpoint[RecordT],
    HalfActions[RecordT, ActionT],
    Protocol[RecordT, NodeT_contra, ObservedT, ActionT],
):
    """One half's device logic as the shared claim driver calls it.

    Planning methods are pure (node facts and the time come in as arguments); `observe`,
    `check_before_steps`, `after_recover`, `after_unprepare` and `apply` may do I/O.
    """

    # ------------------------------------------------------------ planning a claim

    def plan_restore_spec(
        self, entry: models.CheckpointEntry[RecordT], *, node: NodeT_contra
    ) -> models.WriteCDISpec | None:
        """The write that brings back the entry's lost CDI spec, or None if it cannot."""
        ...


    def observe(self, claim: models.ResourceClaim, *, node: NodeT_contra) -> ObservedT:
        """API reads the planner needs, done before the node-wide lock is taken."""
        ...

    def plan_prepare(
        self,
        claim: models.ResourceClaim,
        *,
        checkpoint: models.Checkpoint[RecordT],
        observed: ObservedT,
        node: NodeT_contra,
        now: float,
    ) -> PlannedClaim[RecordT, ActionT]:
        """The steps that prepare `claim` (called under the node-wide lock)."""
        ...

    def check_before_steps(self, outcome: PlannedClaim[RecordT, ActionT]) -> None:
        """Raise a RetryableError when the node cannot take the planned steps yet."""
        ...

    def plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: models.Checkpoint[RecordT], now: float
    ) -> PlannedClaim[RecordT, ActionT]:
        """The steps that undo the claim's entry (called under the node-wide lock)."""
        ...

    def api_steps_doing(self, *, node: NodeT_contra) -> str:
        """What a failed API write among the planned steps was doing, for the error."""
        ...

    def device_status_data(
        self, entry: models.CheckpointEntry[RecordT], *, node: NodeT_contra
    ) -> Mapping[str, device_status.DeviceData]:
        """Device name -> the data its `status.devices` entry carries once prepared."""
        ...

    # ------------------------------------------------------------ follow-ups (best effort)

    def after_recover(self, current: models.Checkpoint[RecordT], *, node: NodeT_contra) -> None:
        """Start-up reports about the recovered checkpoint."""
        ...

    def after_unprepare(
        self,
        entry: models.CheckpointEntry[RecordT],
        *,
        after: models.Checkpoint[RecordT],
        node: NodeT_contra,
    ) -> None:
        """Best-effort follow-up once the claim's entry is gone."""
        ...
