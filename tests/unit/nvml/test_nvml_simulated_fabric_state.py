"""Degrading a simulated node's NVLink fabric on demand (`simulated.degrade_simulated_fabric`).

Covers: the file under the simulated driver root (none for "/"), one GPU or every GPU degraded
and restored, entries kept across writes, `--nvml simulated:` reading it through the driver
root, and an unreadable or malformed file failing the read as NVML would.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from adapters.nvml import gpu_simulation, simulated
from adapters.nvml import inventory as nvml_inventory
from core import errors, models

NODE = "gb200-rack1-node01"
S = models.FabricState


def _inventory(path: pathlib.Path) -> simulated.SimulatedInventory:
    return simulated.SimulatedInventory(profile="gb200-nvl72", node_name=NODE,
                                        fabric_state_file=str(path))


def _states(inventory: simulated.SimulatedInventory) -> list[tuple[S, bool]]:
    return [(r.state, r.status_ok) for r in inventory.fabric_records()]


def test_the_file_lives_in_the_simulated_state_dir_and_the_real_root_has_none() -> None:
    assert simulated.fabric_state_path("/sim/") == (
        "/sim/var/lib/nvidia-simulated/fabric-state.json")
    assert simulated.STATE_DIR == gpu_simulation.STATE_DIR  # one state dir for both halves
    assert simulated.fabric_state_path("/") is None


def test_one_gpu_degrades_and_is_restored(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "fabric-state.json"
    inventory = _inventory(path)
    healthy = inventory.fabric_records()
    assert {(r.state, r.status_ok) for r in healthy} == {(S.COMPLETED, True)}

    simulated.degrade_simulated_fabric(str(path), gpu_uuid=healthy[1].gpu_uuid,
                                       state=S.IN_PROGRESS, status_ok=True)
    assert _states(inventory) == [(S.COMPLETED, True), (S.IN_PROGRESS, True),
                                  (S.COMPLETED, True), (S.COMPLETED, True)]
    degraded = inventory.fabric_records()
    assert [r.cluster_uuid for r in degraded] == [r.cluster_uuid for r in healthy]

    simulated.restore_simulated_fabric(str(path))
    assert inventory.fabric_records() == healthy
    simulated.restore_simulated_fabric(str(path))  # restoring twice is fine


def test_every_gpu_degrades_by_default_with_an_error_status_and_entries_add_up(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "deep" / "fabric-state.json"
    inventory = _inventory(path)
    first = inventory.fabric_records()[0].gpu_uuid

    simulated.degrade_simulated_fabric(str(path))
    assert set(_states(inventory)) == {(S.COMPLETED, False)}
    simulated.degrade_simulated_fabric(str(path), gpu_uuid=first, state=S.NOT_STARTED)
    assert _states(inventory)[0] == (S.NOT_STARTED, False)
    assert set(_states(inventory)[1:]) == {(S.COMPLETED, False)}
    assert [p.name for p in path.parent.iterdir()] == ["fabric-state.json"]  # no temp left


def test_simulated_nvml_reads_the_file_under_its_driver_root(tmp_path: pathlib.Path) -> None:
    inventory = nvml_inventory.inventory_from_spec(
        "simulated:gb200-nvl72", node_name=NODE, driver_root=str(tmp_path))
    path = simulated.fabric_state_path(str(tmp_path))
    assert path is not None
    simulated.degrade_simulated_fabric(path, state=S.IN_PROGRESS)
    assert {r.state for r in inventory.fabric_records()} == {S.IN_PROGRESS}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "unreadable"),
        ("[1, 2]", "want a JSON object"),
        ('{"*": {"state": "BROKEN"}}', "entry '*' is malformed"),
        ('{"*": {"state": "COMPLETED", "statusOk": "no"}}', "statusOk must be true or false"),
        ('{"*": "COMPLETED"}', "entry '*' is malformed"),
    ],
    ids=["not-json", "not-an-object", "unknown-state", "status-not-bool", "entry-not-object"],
)
def test_a_bad_file_fails_the_read_as_nvml_would(
    tmp_path: pathlib.Path, text: str, says: str
) -> None:
    path = tmp_path / "fabric-state.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(errors.DriverError, match=re.escape(says)) as err:
        _inventory(path).fabric_records()
    assert str(path) in str(err.value)


def test_a_file_that_cannot_be_read_fails_the_read(tmp_path: pathlib.Path) -> None:
    (tmp_path / "fabric-state.json").mkdir()  # a directory where the file should be
    with pytest.raises(errors.DriverError, match="unreadable"):
        _inventory(tmp_path / "fabric-state.json").fabric_records()
