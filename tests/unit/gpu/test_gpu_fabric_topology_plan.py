"""core.gpu.fabric_topology.plan_partitions on an 8-GPU partition table.

Covers: no config (Auto on BareMetal, upstream's), Auto with and without partitionSize,
Manual (one partition, two disjoint ones), Disabled and VGPU (nothing), which models let the
driver activate (BareMetal, SharedNVSwitch) and which only validate (FullPassthrough), that
minBandwidth/maxLatency are recorded, and every refusal with what would fit.
"""

from __future__ import annotations

import gpu_prep_fixtures as f
import pytest

from core import errors
from core.gpu import configs, fabric_topology, fm_partitions

BOARD = f.ZERO_BASED_BOARD
Model = configs.VirtualizationModel
Strategy = configs.FabricStrategy


def plan(
    topology: configs.FabricTopologyConfig | None, *modules: int
) -> fabric_topology.FabricPlan:
    return fabric_topology.plan_partitions(
        topology, module_ids=frozenset(modules), partitions=BOARD)


def refusal(topology: configs.FabricTopologyConfig | None, *modules: int) -> str:
    with pytest.raises(errors.PermanentError) as caught:
        plan(topology, *modules)
    return caught.value.message


def auto(size: int | None = None, model: Model = Model.BARE_METAL) -> configs.FabricTopologyConfig:
    return configs.FabricTopologyConfig(partition_size=size, virtualization_model=model)


def manual(*ids: int, size: int | None = None,
           model: Model = Model.BARE_METAL) -> configs.FabricTopologyConfig:
    return configs.FabricTopologyConfig(
        strategy=Strategy.MANUAL, partition_ids=ids, partition_size=size,
        virtualization_model=model)


def test_no_config_activates_the_partition_that_is_exactly_the_claims_gpus() -> None:
    assert plan(None, 5, 6, 7, 8) == fabric_topology.FabricPlan(
        partition_ids=(2,), driver_activates=True)
    assert plan(None, 6, 8).activates == (6,)
    assert plan(None, 3).activates == (9,)


@pytest.mark.parametrize(("modules", "expected"), [((1, 2, 3, 4), 1), ((1, 3), 3),
                                                   (tuple(range(1, 9)), 0)])
def test_auto_with_a_matching_partition_size_picks_the_allocations_partition(
    modules: tuple[int, ...], expected: int,
) -> None:
    assert plan(auto(len(modules)), *modules).activates == (expected,)


def test_auto_refuses_a_gpu_count_other_than_partition_size() -> None:
    assert refusal(auto(4), 1, 3) == (
        "fabricTopologyConfig.partitionSize is 4 but the claim was allocated 2 GPU(s) "
        "(modules [1, 3]): request exactly 4 GPUs in the requests this config applies to, "
        "or change partitionSize"
    )


def test_auto_refuses_gpus_that_form_no_partition_naming_those_that_would_fit() -> None:
    message = refusal(auto(2), 1, 2)
    assert message.startswith("GPU modules [1, 2] do not form a Fabric Manager partition; "
                              "partitions holding all of them: 1 (4 GPUs: modules [1, 2, 3, 4])")


@pytest.mark.parametrize("model", [Model.BARE_METAL, Model.SHARED_NVSWITCH])
def test_bare_metal_and_shared_nvswitch_let_the_driver_activate(model: Model) -> None:
    assert plan(auto(4, model), 1, 2, 3, 4).activates == (1,)


def test_full_passthrough_validates_the_partition_but_leaves_activation_to_the_guest() -> None:
    planned = plan(auto(4, Model.FULL_PASSTHROUGH), 1, 2, 3, 4)
    assert (planned.partition_ids, planned.driver_activates, planned.activates) == (
        (1,), False, ())
    assert "do not form a Fabric Manager partition" in refusal(
        auto(None, Model.FULL_PASSTHROUGH), 1, 2)


@pytest.mark.parametrize(
    "topology",
    [configs.FabricTopologyConfig(strategy=Strategy.DISABLED),
     auto(4, Model.VGPU), manual(99, model=Model.VGPU)],
)
def test_disabled_and_vgpu_partition_nothing_whatever_the_gpus(
    topology: configs.FabricTopologyConfig,
) -> None:
    planned = plan(topology, 1, 2)
    assert (planned.partition_ids, planned.activates) == ((), ())


@pytest.mark.parametrize("topology", [None, auto(4), manual(1)])
def test_a_claim_without_whole_gpus_plans_nothing(
    topology: configs.FabricTopologyConfig | None,
) -> None:
    planned = plan(topology)
    assert (planned.partition_ids, planned.activates) == ((), ())


def test_bandwidth_and_latency_are_recorded_not_judged() -> None:
    topology = configs.FabricTopologyConfig(partition_size=2, min_bandwidth=10_000.0,
                                            max_latency=0.0)
    planned = plan(topology, 2, 4)
    assert (planned.activates, planned.min_bandwidth, planned.max_latency) == ((4,), 10_000.0, 0.0)


def test_manual_activates_the_listed_partition_when_it_is_the_allocation() -> None:
    assert plan(manual(2, size=4), 5, 6, 7, 8) == fabric_topology.FabricPlan(
        partition_ids=(2,), driver_activates=True, strategy=Strategy.MANUAL)


def test_manual_may_list_disjoint_partitions_that_together_are_the_allocation() -> None:
    assert plan(manual(6, 5), 5, 6, 7, 8).activates == (5, 6)


def test_manual_refuses_an_unknown_partition_listing_the_nodes() -> None:
    message = refusal(manual(1, 42), 1, 2, 3, 4)
    assert message.startswith(
        "fabricTopologyConfig.partitionIDs [42] are not partitions of this node's Fabric "
        "Manager; its partitions are 0 (8 GPUs: modules [1, 2, 3, 4, 5, 6, 7, 8]), "
        "1 (4 GPUs: modules [1, 2, 3, 4]),")


def test_manual_refuses_a_partition_of_another_size_than_partition_size() -> None:
    assert refusal(manual(3, size=4), 1, 3) == (
        "fabricTopologyConfig.partitionIDs [3] are not 4-GPU partitions (partitionSize is 4); "
        "the 4-GPU partitions here are 1 (4 GPUs: modules [1, 2, 3, 4]), "
        "2 (4 GPUs: modules [5, 6, 7, 8])"
    )


def test_manual_refuses_overlapping_partitions() -> None:
    assert refusal(manual(1, 3), 1, 2, 3, 4) == (
        "fabricTopologyConfig.partitionIDs 1 and 3 share GPU module 1; Fabric Manager cannot "
        "activate both: list partitions that share no GPU"
    )


def test_manual_refuses_partitions_that_are_not_the_allocation_naming_the_one_that_is() -> None:
    assert refusal(manual(3), 1, 2, 3, 4) == (
        "fabricTopologyConfig.partitionIDs [3] hold GPU modules [1, 3] but the claim was "
        "allocated modules [1, 2, 3, 4]; partition 1 (4 GPUs: modules [1, 2, 3, 4]) is exactly "
        "the allocation: list it"
    )


def test_manual_refusal_without_an_exact_partition_says_how_to_constrain_the_claim() -> None:
    message = refusal(manual(5), 1, 5)
    assert message == (
        "fabricTopologyConfig.partitionIDs [5] hold GPU modules [5, 7] but the claim was "
        "allocated modules [1, 5]; no partition is exactly the allocation: constrain the "
        "claim's requests to the listed partitions (the admission webhook adds that "
        "selector), or use strategy Auto"
    )


def test_full_passthrough_manual_still_checks_the_listed_partitions() -> None:
    assert "hold GPU modules [1, 3]" in refusal(manual(3, model=Model.FULL_PASSTHROUGH), 2, 4)
    planned = plan(manual(4, model=Model.FULL_PASSTHROUGH), 2, 4)
    assert (planned.partition_ids, planned.activates) == ((4,), ())


def test_contradictory_fabric_manager_tables_are_refused() -> None:
    twice = (*BOARD, fm_partitions.Partition(partition_id=1, module_ids=frozenset({1})))
    with pytest.raises(errors.PermanentError, match="reported partition 1 twice"):
        fabric_topology.plan_partitions(None, module_ids=frozenset({1}), partitions=twice)
