"""The checkpoint's stamps change with every write of any process, even when the files look
the same afterwards (a rolling update runs two plugin processes on one checkpoint).

Covers: each write, append, cut and quarantine advances the lock file's write generation;
another store on the same path (another process) sees it; a rewrite that leaves the journal's
inode, size and modification time as they were still changes the stamps.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

from adapters import fs


def _stores(tmp_path: pathlib.Path) -> tuple[fs.FileCheckpointStore, fs.FileCheckpointStore]:
    path = str(tmp_path / "plugin.checkpoint.json")
    return fs.FileCheckpointStore(path), fs.FileCheckpointStore(path)


def test_every_kind_of_write_changes_the_stamps_another_store_sees(
    tmp_path: pathlib.Path,
) -> None:
    ours, theirs = _stores(tmp_path)
    seen = [ours.stamps()]
    writes: list[Callable[[], object]] = [
        lambda: theirs.write(b"snapshot"),
        lambda: theirs.append(b"record\n"),
        lambda: theirs.truncate_journal(0),
        lambda: theirs.quarantine(suffix="test"),
    ]
    for write in writes:
        with theirs.locked():
            write()
        with ours.locked():
            seen.append(ours.stamps())
    assert len(set(seen)) == len(seen), seen


def test_a_rewrite_that_leaves_the_files_looking_the_same_still_changes_the_stamps(
    tmp_path: pathlib.Path,
) -> None:
    ours, theirs = _stores(tmp_path)
    with theirs.locked():
        theirs.write(b"snapshot")
        theirs.append(b"first\n")
    with ours.locked():
        before = ours.stamps()
    journal = os.stat(ours.journal_path)
    with theirs.locked():
        theirs.truncate_journal(0)
        theirs.append(b"other\n")  # same length
    # As a coarse clock would leave it: the same modification time.
    os.utime(ours.journal_path, ns=(journal.st_atime_ns, journal.st_mtime_ns))
    with ours.locked():
        after = ours.stamps()
    assert after[1:] == before[1:], "the files' own stamps cannot tell"
    assert after != before
