"""Port contracts of `CheckpointStore` and `CDIStore`, run against the real file adapters.

One suite per port: every behaviour the executor relies on. The fixtures are
parametrized so that an in-memory fake of either port (e.g. one shipped in
`adapters.memory`) can be added as another param and held to the same contract.
Also covers crash leftovers: a temp file from an interrupted write never confuses
`read()` or `claim_uids()`.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable

import pytest

from adapters import fs
from core import errors, names, ports

CheckpointFactory = Callable[[pathlib.Path], ports.CheckpointStore]
Store = ports.CheckpointStore
CDIFactory = Callable[[pathlib.Path], ports.CDIStore]

# Add an in-memory fake here to hold it to the same contract.
CHECKPOINT_STORES: dict[str, CheckpointFactory] = {
    "file": lambda tmp: fs.FileCheckpointStore(str(tmp / "plugin" / "checkpoint.json")),
}
CDI_STORES: dict[str, CDIFactory] = {
    "dir": lambda tmp: fs.CDIDirectory(str(tmp / "cdi")),
}

UID_A = names.ClaimUID("0f1e2d3c-aaaa-4bbb-8ccc-000000000001")
UID_B = names.ClaimUID("0f1e2d3c-aaaa-4bbb-8ccc-000000000002")


@pytest.fixture(params=sorted(CHECKPOINT_STORES))
def checkpoint_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Store:
    factory: CheckpointFactory = CHECKPOINT_STORES[request.param]
    return factory(tmp_path)


@pytest.fixture(params=sorted(CDI_STORES))
def cdi_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> ports.CDIStore:
    factory: CDIFactory = CDI_STORES[request.param]
    return factory(tmp_path)


def _spec(uid: str, *, minor: int = 0) -> dict[str, object]:
    return {
        "cdiVersion": "0.5.0",
        "kind": names.CDI_KIND_CLAIM,
        "devices": [
            {
                "name": f"{uid}-channel-{minor}",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": f"{names.IMEX_CHANNEL_DIR}/channel{minor}",
                            "type": "c",
                            "major": 242,
                            "minor": minor,
                            "fileMode": 0o666,
                        }
                    ]
                },
            }
        ],
    }


# ------------------------------------------------------------------ CheckpointStore


def test_checkpoint_read_is_none_before_first_write(checkpoint_store: Store) -> None:
    assert checkpoint_store.read() is None


def test_checkpoint_read_returns_last_written_bytes(checkpoint_store: Store) -> None:
    checkpoint_store.write(b'{"version": 1}')
    checkpoint_store.write(b'{"version": 1, "claims": []}')
    assert checkpoint_store.read() == b'{"version": 1, "claims": []}'


def test_checkpoint_quarantine_moves_bytes_aside_and_leaves_no_checkpoint(
    checkpoint_store: Store,
) -> None:
    checkpoint_store.write(b"garbage")
    moved_to = checkpoint_store.quarantine(suffix="20260101T000000Z")
    assert checkpoint_store.read() is None
    assert pathlib.Path(moved_to).read_bytes() == b"garbage"


def test_checkpoint_write_after_quarantine_works(checkpoint_store: Store) -> None:
    checkpoint_store.write(b"garbage")
    checkpoint_store.quarantine(suffix="1")
    checkpoint_store.write(b'{"version": 1}')
    assert checkpoint_store.read() == b'{"version": 1}'


def test_checkpoint_quarantine_never_overwrites_an_earlier_quarantined_file(
    checkpoint_store: Store,
) -> None:
    checkpoint_store.write(b"first")
    first = checkpoint_store.quarantine(suffix="same")
    checkpoint_store.write(b"second")
    second = checkpoint_store.quarantine(suffix="same")
    assert first != second
    assert pathlib.Path(first).read_bytes() == b"first"
    assert pathlib.Path(second).read_bytes() == b"second"


def test_checkpoint_locked_allows_read_modify_write(checkpoint_store: Store) -> None:
    checkpoint_store.write(b"1")
    with checkpoint_store.locked():
        current = checkpoint_store.read()
        assert current is not None
        checkpoint_store.write(current + b"2")
    with checkpoint_store.locked():
        assert checkpoint_store.read() == b"12"


# ------------------------------------------------------------------ CDIStore


def test_cdi_empty_store_has_no_claims(cdi_store: ports.CDIStore) -> None:
    assert cdi_store.claim_uids() == frozenset()
    assert cdi_store.read(UID_A) is None


def test_cdi_write_then_read_round_trips(cdi_store: ports.CDIStore) -> None:
    cdi_store.write(UID_A, _spec(UID_A))
    assert cdi_store.read(UID_A) == _spec(UID_A)
    assert cdi_store.claim_uids() == frozenset({UID_A})


def test_cdi_write_replaces_the_claims_previous_spec(cdi_store: ports.CDIStore) -> None:
    cdi_store.write(UID_A, _spec(UID_A, minor=0))
    cdi_store.write(UID_A, _spec(UID_A, minor=5))
    assert cdi_store.read(UID_A) == _spec(UID_A, minor=5)


def test_cdi_claim_uids_lists_every_claim_with_a_spec(cdi_store: ports.CDIStore) -> None:
    cdi_store.write(UID_A, _spec(UID_A))
    cdi_store.write(UID_B, _spec(UID_B))
    assert cdi_store.claim_uids() == frozenset({UID_A, UID_B})


def test_cdi_delete_removes_only_that_claim(cdi_store: ports.CDIStore) -> None:
    cdi_store.write(UID_A, _spec(UID_A))
    cdi_store.write(UID_B, _spec(UID_B))
    cdi_store.delete(UID_A)
    assert cdi_store.read(UID_A) is None
    assert cdi_store.claim_uids() == frozenset({UID_B})


def test_cdi_delete_is_idempotent(cdi_store: ports.CDIStore) -> None:
    cdi_store.delete(UID_A)
    cdi_store.write(UID_A, _spec(UID_A))
    cdi_store.delete(UID_A)
    cdi_store.delete(UID_A)
    assert cdi_store.claim_uids() == frozenset()


# ------------------------------------------------------------------ real files only


def test_checkpoint_leftover_temp_file_does_not_confuse_read(tmp_path: pathlib.Path) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "checkpoint.json"))
    store.write(b"good")
    (tmp_path / ".checkpoint.json.abc123.tmp").write_bytes(b"half-writ")
    assert store.read() == b"good"
    store.write(b"better")
    assert store.read() == b"better"


def test_checkpoint_write_leaves_no_temp_file_behind(tmp_path: pathlib.Path) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "checkpoint.json"))
    store.write(b"a")
    store.write(b"b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]


def test_checkpoint_quarantine_names_the_file_after_the_suffix(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    store = fs.FileCheckpointStore(str(path))
    store.write(b"x")
    assert store.quarantine(suffix="20260101T000000Z") == f"{path}.corrupt-20260101T000000Z"


def test_checkpoint_quarantine_without_a_file_raises_file_not_found(
    tmp_path: pathlib.Path,
) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "checkpoint.json"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        store.quarantine(suffix="1")


def test_checkpoint_quarantine_rejects_a_suffix_with_a_slash(tmp_path: pathlib.Path) -> None:
    store = fs.FileCheckpointStore(str(tmp_path / "checkpoint.json"))
    store.write(b"x")
    with pytest.raises(ValueError, match="suffix"):
        store.quarantine(suffix="../escape")
    assert store.read() == b"x"


def test_cdi_spec_file_is_named_per_claim_with_mode_0644(tmp_path: pathlib.Path) -> None:
    store = fs.CDIDirectory(str(tmp_path / "cdi"))
    store.write(UID_A, _spec(UID_A))
    path = tmp_path / "cdi" / names.cdi_spec_file_name(UID_A)
    assert json.loads(path.read_text()) == _spec(UID_A)
    assert path.stat().st_mode & 0o777 == 0o644


def test_cdi_root_is_created_with_mode_0755(tmp_path: pathlib.Path) -> None:
    old_umask = os.umask(0o077)
    try:
        fs.CDIDirectory(str(tmp_path / "run" / "cdi")).write(UID_A, _spec(UID_A))
    finally:
        os.umask(old_umask)
    assert (tmp_path / "run" / "cdi").stat().st_mode & 0o777 == 0o755


def test_cdi_claim_uids_ignores_temp_and_other_vendors_files(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cdi"
    store = fs.CDIDirectory(str(root))
    store.write(UID_A, _spec(UID_A))
    spec_name = names.cdi_spec_file_name(UID_B)
    (root / f".{spec_name}.x1y2z3.tmp").write_text("{")
    (root / "nvidia.com-gpu.json").write_text("{}")
    (root / "k8s.gpu.nvidia.com-claim_0f1e2d3c.json").write_text("{}")
    (root / f"{names.CDI_VENDOR}-{names.CDI_CLASS_CLAIM}_.json").write_text("{}")
    (root / "README").write_text("hi")
    assert store.claim_uids() == frozenset({UID_A})
    assert store.read(UID_B) is None


def test_cdi_write_leaves_no_temp_file_behind(tmp_path: pathlib.Path) -> None:
    store = fs.CDIDirectory(str(tmp_path))
    store.write(UID_A, _spec(UID_A))
    store.write(UID_A, _spec(UID_A, minor=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [names.cdi_spec_file_name(UID_A)]


def test_cdi_read_of_a_corrupt_spec_names_the_file(tmp_path: pathlib.Path) -> None:
    store = fs.CDIDirectory(str(tmp_path))
    (tmp_path / names.cdi_spec_file_name(UID_A)).write_text("{not json")
    with pytest.raises(errors.DecodeError, match=names.cdi_spec_file_name(UID_A)):
        store.read(UID_A)


def test_cdi_rejects_a_claim_uid_that_would_escape_the_root(tmp_path: pathlib.Path) -> None:
    store = fs.CDIDirectory(str(tmp_path / "cdi"))
    with pytest.raises(ValueError, match="claim UID"):
        store.write(names.ClaimUID("../../etc/x"), {})


def test_real_adapters_satisfy_the_ports(tmp_path: pathlib.Path) -> None:
    checkpoint: ports.CheckpointStore = fs.FileCheckpointStore(str(tmp_path / "c.json"))
    cdi: ports.CDIStore = fs.CDIDirectory(str(tmp_path))
    node_files: ports.NodeFiles = fs.ProcNodeFiles()
    assert checkpoint and cdi and node_files
