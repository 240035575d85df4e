"""Channel isolation: the leader's one place that hands out IMEX channel IDs.

Workers run in parallel, and the caches may lag the controller's own status writes, so the
choice is made under one lock and remembered (`_pending`) until the CD's status shows it. The
table itself is rebuilt from the cluster (CDs + ResourceClaims,
`computedomain.channels.build_table`) on every fresh assignment, so nothing here survives a
restart or a failover, nor needs to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from core import models
from core.computedomain import channels

log = logging.getLogger(__name__)

# (CD UID, max channels) -> the table as the cluster shows it (without this process's pending
# choices): rebuilt from lists, or read from the informers' channel indexes.
TableSource = Callable[[str, int], channels.ChannelTable]


class ChannelAllocator:
    """Gives each ComputeDomain a channel unique across the cluster (lowest free first)."""

    def __init__(self, *, max_channels: int, snapshot: TableSource) -> None:
        self._max = max_channels
        self._snapshot = snapshot
        self._lock = threading.Lock()
        # CD UID -> channel assigned by this process, until its status is seen with it.
        self._pending: dict[str, int] = {}

    def use_snapshot(self, snapshot: TableSource) -> None:
        """A new leadership term reads from its own caches; earlier choices are forgotten
        (they are in the CDs' status by now, or were never written and are free)."""
        with self._lock:
            self._snapshot = snapshot
            self._pending.clear()

    def channel_for(
        self, cd: models.ComputeDomain, *, reassign: bool = False
    ) -> tuple[int | None, str]:
        """(channel, "") for `cd`, or (None, why) when every channel is taken. `reassign`: the
        channel its status names is a duplicate another CD keeps (see
        `channels.duplicate_standing`): choose another one, as for a new CD."""
        recorded = cd.status.channel_id if cd.status is not None else None
        with self._lock:
            if recorded is not None and not reassign:
                self._pending.pop(cd.uid, None)
                return recorded, ""
            pending = self._pending.get(cd.uid)
            if pending is not None and pending != recorded:
                return pending, ""
            table = self._table(cd.uid)
            # Claims of this CD may name a channel its status lost: keep it, never a second one.
            channel = table.channel_of(cd.uid)
            if channel == recorded:
                channel = None  # being re-assigned: the earlier holder keeps that one
            if channel is None:
                channel = table.lowest_free()
            if channel is None:
                message = channels.exhausted_message(
                    namespace=cd.meta.namespace, name=cd.meta.name, table=table
                )
                log.warning("event=channel_exhausted cd=%s/%s uid=%s in_use=%d max=%d",
                            cd.meta.namespace, cd.meta.name, cd.uid, table.in_use, self._max)
                return None, message
            self._pending[cd.uid] = channel
        log.info("event=channel_assigned cd=%s/%s uid=%s channel=%d",
                 cd.meta.namespace, cd.meta.name, cd.uid, channel)
        return channel, ""

    def forget(self, uid: str) -> None:
        """The CD is gone: its unwritten choice (if any) is free again."""
        with self._lock:
            self._pending.pop(uid, None)

    def _table(self, uid: str) -> channels.ChannelTable:
        table = self._snapshot(uid, self._max)
        for pending_uid, channel in self._pending.items():
            table = channels.with_assignment(table, domain_uid=pending_uid, channel_id=channel)
        return table
