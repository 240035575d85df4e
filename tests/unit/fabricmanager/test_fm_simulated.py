"""The simulated Fabric Manager against real files.

Covers: it satisfies `core.ports.FabricManager` and reports the HGX 8-GPU table, nothing
active at first; activation and deactivation are idempotent; activating a partition whose GPUs
an active one holds is refused (FM_ST_IN_USE) naming that partition, unknown ids are refused
both ways; with a state file a second instance (a restarted plugin) sees what the first left
active, the file is replaced atomically, and a corrupt or foreign file is refused with its
path; the state lives in a simulated driver root only; a contradictory table is refused.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from adapters.fabricmanager import simulated
from adapters.fs import simulated_driverroot
from core import errors, ports
from core.gpu import fm_partitions


def _active(fm: ports.FabricManager) -> list[int]:
    return [p.partition_id for p in fm.partitions() if p.active]


def test_it_is_a_fabric_manager_port_with_the_hgx_table_and_nothing_active() -> None:
    fm: ports.FabricManager = simulated.SimulatedFabricManager()
    assert fm.partitions() == fm_partitions.HGX_8GPU_PARTITIONS
    assert _active(fm) == []


def test_activate_and_deactivate_are_idempotent() -> None:
    fm = simulated.SimulatedFabricManager()
    fm.activate(2)
    fm.activate(2)
    fm.activate(3)
    assert _active(fm) == [2, 3]
    fm.deactivate(2)
    fm.deactivate(2)
    assert _active(fm) == [3]


def test_activating_over_gpus_of_an_active_partition_is_refused() -> None:
    fm = simulated.SimulatedFabricManager()
    fm.activate(4)  # modules 1 and 3
    with pytest.raises(errors.PermanentError, match=r"active partition 4 holds modules \[1, 3\]"):
        fm.activate(1)
    with pytest.raises(errors.PermanentError, match="FM_ST_IN_USE"):
        fm.activate(8)  # module 1 alone
    assert _active(fm) == [4]
    fm.activate(5)  # modules 2 and 4: free
    assert _active(fm) == [4, 5]


@pytest.mark.parametrize("call", ["activate", "deactivate"])
def test_unknown_partition_ids_are_refused(call: str) -> None:
    fm = simulated.SimulatedFabricManager()
    with pytest.raises(errors.PermanentError, match=r"no partition 16 \(it supports: 1, 2,"):
        getattr(fm, call)(16)


def test_a_second_instance_sees_what_the_first_left_active(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "fm.json"
    first = simulated.SimulatedFabricManager(state_path=str(path))
    first.activate(2)
    first.activate(3)
    first.deactivate(3)
    assert json.loads(path.read_text()) == {"active": [2]}
    assert [p.name for p in tmp_path.iterdir()] == ["fm.json"]  # no temp file left
    second = simulated.SimulatedFabricManager(state_path=str(path))
    assert _active(second) == [2]
    second.deactivate(2)
    assert _active(first) == []  # the file is the truth, read on every call


@pytest.mark.parametrize(
    "content", ["{not json", '["active"]', '{"active": [99]}', '{"active": ["1"]}', "{}"]
)
def test_a_corrupt_or_foreign_state_file_is_refused_with_its_path(
    tmp_path: pathlib.Path, content: str
) -> None:
    path = tmp_path / "fm.json"
    path.write_text(content)
    fm = simulated.SimulatedFabricManager(state_path=str(path))
    for call in (fm.partitions, lambda: fm.activate(1), lambda: fm.deactivate(1)):
        with pytest.raises(errors.PermanentError, match=f"{path}.*remove it"):
            call()


def test_an_unreadable_state_file_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "fm.json").mkdir()  # a directory where the file should be
    fm = simulated.SimulatedFabricManager(state_path=str(tmp_path / "fm.json"))
    with pytest.raises(errors.PermanentError, match="is unreadable"):
        fm.partitions()


def test_state_lives_in_a_simulated_driver_root_only(tmp_path: pathlib.Path) -> None:
    assert simulated.state_path_in(str(tmp_path)) is None
    root = tmp_path / "driver"
    simulated_driverroot.install(str(root), ld_cache=False)
    path = simulated.state_path_in(str(root))
    assert path == str(root / "var/lib/nvidia-simulated/fabricmanager-state.json")
    simulated.SimulatedFabricManager(state_path=path).activate(1)
    assert _active(simulated.SimulatedFabricManager(state_path=path)) == [1]


def test_a_contradictory_table_is_refused() -> None:
    twice = (
        fm_partitions.Partition(partition_id=1, module_ids=frozenset({1})),
        fm_partitions.Partition(partition_id=1, module_ids=frozenset({2})),
    )
    with pytest.raises(errors.PermanentError, match="partition 1 twice"):
        simulated.SimulatedFabricManager(table=twice)
