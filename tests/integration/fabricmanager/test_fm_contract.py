"""One contract for every `core.ports.FabricManager`: the simulated one and the real client
(libnvfm in a child process) over the fake library, so that neither drifts from the other.

Covers: the HGX 8-GPU table with nothing active at first; activation and deactivation are
idempotent; activating over GPUs an active partition holds is refused naming it and
FM_ST_IN_USE, and changes nothing; unknown ids are refused both ways naming the supported
ones; a second instance (a restarted plugin) sees what the first left active.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from adapters.fabricmanager import simulated
from core import errors, ports
from core.gpu import fm_partitions

Opener = Callable[[], ports.FabricManager]


@pytest.fixture(params=["simulated", "nvfm"])
def open_fm(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Opener:
    """Opens a Fabric Manager; every one opened in a test shares the same Fabric Manager."""
    if request.param == "simulated":
        state = str(tmp_path / "fm.json")
        return lambda: simulated.SimulatedFabricManager(state_path=state)
    fake = request.getfixturevalue("fake_fm")
    return lambda: fake.manager()


def _active(fm: ports.FabricManager) -> list[int]:
    return [p.partition_id for p in fm.partitions() if p.active]


def test_it_lists_the_hgx_table_with_nothing_active(open_fm: Opener) -> None:
    assert open_fm().partitions() == fm_partitions.HGX_8GPU_PARTITIONS


def test_activate_and_deactivate_are_idempotent(open_fm: Opener) -> None:
    fm = open_fm()
    fm.activate(2)
    fm.activate(2)
    fm.activate(3)
    assert _active(fm) == [2, 3]
    fm.deactivate(2)
    fm.deactivate(2)
    assert _active(fm) == [3]


def test_activating_over_gpus_of_an_active_partition_is_refused(open_fm: Opener) -> None:
    fm = open_fm()
    fm.activate(4)  # modules 1 and 3
    with pytest.raises(
        errors.PermanentError,
        match=r"partition 1 \(modules \[1, 2, 3, 4, 5, 6, 7, 8\]\): active partition 4 holds "
        r"modules \[1, 3\] \(FM_ST_IN_USE\)",
    ):
        fm.activate(1)
    with pytest.raises(errors.PermanentError, match="FM_ST_IN_USE"):
        fm.activate(8)  # module 1 alone
    assert _active(fm) == [4]
    fm.activate(5)  # modules 2 and 4: free
    assert _active(fm) == [4, 5]


@pytest.mark.parametrize("call", ["activate", "deactivate"])
def test_unknown_partition_ids_are_refused(open_fm: Opener, call: str) -> None:
    fm = open_fm()
    with pytest.raises(
        errors.PermanentError,
        match=r"Fabric Manager has no partition 16 \(it supports: 1, 2, 3, .*, 15\)",
    ):
        getattr(fm, call)(16)


def test_a_second_instance_sees_what_the_first_left_active(open_fm: Opener) -> None:
    first = open_fm()
    first.activate(2)
    second = open_fm()
    assert _active(second) == [2]
    second.deactivate(2)
    assert _active(first) == []
