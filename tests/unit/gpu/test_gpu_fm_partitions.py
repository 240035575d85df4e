"""Fabric Manager partitions in core: the HGX 8-GPU table, the published attributes, and the
exact-match rule prepare uses (every refusal names what would fit)."""

from __future__ import annotations

import pytest

from core import errors
from core.gpu import fm_partitions as fm
from core.gpu.fm_partitions import Partition

HGX = fm.HGX_8GPU_PARTITIONS


def part(partition_id: int, *module_ids: int, active: bool = False) -> Partition:
    return Partition(partition_id=partition_id, module_ids=frozenset(module_ids), active=active)


def test_hgx_table_has_one_8_two_4_four_2_and_eight_1_gpu_partitions() -> None:
    sizes = [p.size for p in HGX]
    assert sizes.count(8) == 1 and sizes.count(4) == 2
    assert sizes.count(2) == 4 and sizes.count(1) == 8
    assert [p.partition_id for p in HGX] == list(range(1, 16))
    assert fm.check_partitions(HGX) == HGX


def test_every_hgx_size_covers_all_eight_modules_exactly_once() -> None:
    for size in (1, 2, 4, 8):
        covered = sorted(m for p in HGX if p.size == size for m in p.module_ids)
        assert covered == list(range(1, 9)), size


@pytest.mark.parametrize(
    ("module_id", "one", "two", "four"), [(1, 8, 4, 2), (4, 11, 5, 3), (7, 14, 6, 3), (8, 15, 7, 3)]
)
def test_published_attributes_name_the_partition_of_each_size(
    module_id: int, one: int, two: int, four: int
) -> None:
    attributes = fm.published_attributes(module_id, HGX)
    assert attributes == {
        "gpuModuleID": module_id, "partition1": one, "partition2": two, "partition4": four,
        "partition8": 1,
    }
    assert list(attributes) == sorted(attributes)


def test_a_module_in_no_partition_publishes_only_its_module_id() -> None:
    assert fm.published_attributes(9, HGX) == {"gpuModuleID": 9}


@pytest.mark.parametrize("module_id", [0, -1])
def test_published_attributes_refuse_a_module_id_that_is_not_a_board_position(
    module_id: int,
) -> None:
    with pytest.raises(errors.PermanentError, match=f"module id {module_id} is not a board"):
        fm.published_attributes(module_id, HGX)


@pytest.mark.parametrize(
    ("module_ids", "partition_id"),
    [({1, 2, 3, 4, 5, 6, 7, 8}, 1), ({3, 4, 7, 8}, 3), ({3, 1}, 4), ({6, 8}, 7), ({2}, 9)],
)
def test_partition_for_finds_the_exact_match(module_ids: set[int], partition_id: int) -> None:
    assert fm.partition_for(module_ids, HGX).partition_id == partition_id


def test_partition_for_keeps_the_active_flag() -> None:
    table = (*HGX[:3], part(4, 1, 3, active=True))
    assert fm.partition_for([1, 3], table).active


def test_partition_for_without_a_match_names_the_partitions_that_would_fit() -> None:
    with pytest.raises(errors.PermanentError) as caught:
        fm.partition_for([1, 2], HGX)
    message = str(caught.value)
    assert "GPU modules [1, 2] do not form a Fabric Manager partition" in message
    # Smallest first: the 4-GPU partition 2, then the whole board.
    assert "2 (4 GPUs: modules [1, 2, 5, 6]), 1 (8 GPUs" in message
    assert "matchAttribute gpu.nvidia.com/partition<N> (sizes here: 1, 2, 4, 8)" in message


def test_partition_for_says_so_when_nothing_holds_all_the_gpus() -> None:
    with pytest.raises(errors.PermanentError, match=r"\[1, 9\] .* no partition holds all"):
        fm.partition_for([1, 9], HGX)


def test_partition_for_marks_active_partitions_in_its_message() -> None:
    table = (part(0, 1, 2, 3, 4, active=True),)
    with pytest.raises(errors.PermanentError, match=r"modules \[1, 2, 3, 4\], active\)"):
        fm.partition_for([1, 2], table)


def test_partition_for_refuses_a_claim_without_gpus() -> None:
    with pytest.raises(errors.PermanentError, match="without GPUs"):
        fm.partition_for([], HGX)


def test_partition_for_with_no_partitions_at_all() -> None:
    with pytest.raises(errors.PermanentError, match=r"no partition holds all of them$"):
        fm.partition_for([1], ())


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ((part(1, 1), part(1, 2)), "reported partition 1 twice"),
        ((part(4),), "partition 4 without GPUs"),
        ((part(2, 0, 1),), r"partition 2 names GPU module ids \[0\]"),
        ((part(3, 1, 3), part(4, 1, 4)), "module 1 is in two 2-GPU partitions \\(3 and 4\\)"),
    ],
)
def test_contradictory_tables_are_refused_everywhere(
    table: tuple[Partition, ...], message: str
) -> None:
    with pytest.raises(errors.PermanentError, match=message):
        fm.check_partitions(table)
    with pytest.raises(errors.PermanentError, match=message):
        fm.published_attributes(1, table)
    with pytest.raises(errors.PermanentError, match=message):
        fm.partition_for([1], table)
