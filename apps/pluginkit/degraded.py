"""The degraded mode: the checkpoint cannot be written, so the node serves no prepares.

Its state lives in memory (unprepares, CDI files and API writes still act) until the path is
fixed and the plugin restarted. The reason is what prepares answer and the Node event says.
"""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

from core import models

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unwritable:
    """Why the checkpoint cannot be written: where, what was being done, and the error."""

    path: object
    problem: str
    cause: OSError

    @property
    def where(self) -> object:
        """The path for messages (the checkpoint in general when the error named none)."""
        return self.path or "the plugin checkpoint"

    @property
    def reason(self) -> str:
        """The message prepares answer with and the Node event carries."""
        return (
            f"the plugin checkpoint {self.where} cannot be written ({self.problem}; then "
            f"{type(self.cause).__name__}: {self.cause.strerror or self.cause}), so this node "
            "serves no prepares: make the plugin directory writable by the plugin (a read-only "
            "mount, an immutable or foreign-owned path, or a full disk causes this), then "
            "restart the plugin pod; unprepares still work"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Degraded(Generic[RecordT]):
    """The checkpoint cannot be written: its state in memory, and why no prepare is served."""

    checkpoint: models.Checkpoint[RecordT]
    reason: str
