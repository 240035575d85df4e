"""When the kubelet plugin folds its checkpoint journal into a new snapshot (pure).

The journal is compacted once it holds more records than `COMPACT_MIN_RECORDS` or a quarter
of the claims on the node, whichever is more: a start-up replays at most that many records,
and a compaction (O(claims)) comes at most once per that many writes.
"""

from __future__ import annotations

from typing import Final

COMPACT_MIN_RECORDS: Final = 1024


def compaction_threshold(claims: int) -> int:
    """The most journal records kept before the journal is folded into a new snapshot."""
    return max(COMPACT_MIN_RECORDS, claims // 4)


def needs_compaction(*, journal_records: int, appended: int, claims: int) -> bool:
    """Whether appending `appended` records to a journal of `journal_records` would outgrow
    the threshold for a checkpoint of `claims` entries (write a snapshot instead).

    Keeps replay at start-up O(claims) and the amortised cost of a write O(1).
    """
    return journal_records + appended > compaction_threshold(claims)
