"""Simulated GPU profiles: deterministic nodes and the cliques the demo and tests rely on."""

from __future__ import annotations

import re

import pytest

from adapters import nvml
from adapters.nvml import inventory as nvml_inventory
from adapters.nvml import simulated as nvml_simulated
from core import errors, models, names, ports, procdevices
from core.computedomain import cliques


def _clique(profile: str, node: str) -> str:
    inventory = nvml.SimulatedInventory(profile=profile, node_name=node)
    return cliques.clique_id_from_fabric(inventory.fabric_records())


def test_profiles_are_listed_by_name() -> None:
    assert nvml.PROFILES == ("gb200-2racks", "gb200-nvl72", "h100")


def test_gb200_nvl72_has_18_deterministically_named_nodes() -> None:
    nodes = nvml.profile_nodes("gb200-nvl72")
    assert len(nodes) == 18
    assert nodes[0] == "gb200-rack1-node01"
    assert nodes[-1] == "gb200-rack1-node18"
    assert list(nodes) == sorted(nodes)


def test_gb200_nvl72_nodes_all_share_one_clique() -> None:
    found = {_clique("gb200-nvl72", node) for node in nvml.profile_nodes("gb200-nvl72")}
    assert len(found) == 1
    (clique,) = found
    cluster, _, clique_number = clique.rpartition(".")
    assert len(cluster) == 36 and clique_number.isdigit()


def test_gb200_nvl72_nodes_have_four_completed_gpus_with_unique_uuids() -> None:
    uuids: set[str] = set()
    for node in nvml.profile_nodes("gb200-nvl72"):
        records = nvml.SimulatedInventory(profile="gb200-nvl72", node_name=node).fabric_records()
        assert len(records) == 4
        assert {r.state for r in records} == {models.FabricState.COMPLETED}
        assert all(r.gpu_uuid.startswith("GPU-") for r in records)
        uuids |= {r.gpu_uuid for r in records}
    assert len(uuids) == 18 * 4


def test_gb200_2racks_has_two_distinct_cliques_of_18_nodes() -> None:
    nodes = nvml.profile_nodes("gb200-2racks")
    assert len(nodes) == 36
    by_clique: dict[str, list[str]] = {}
    for node in nodes:
        by_clique.setdefault(_clique("gb200-2racks", node), []).append(node)
    assert len(by_clique) == 2
    assert sorted(len(members) for members in by_clique.values()) == [18, 18]
    rack1 = _clique("gb200-2racks", "gb200-rack1-node01")
    rack2 = _clique("gb200-2racks", "gb200-rack2-node01")
    assert rack1.split(".")[0] != rack2.split(".")[0]
    assert rack1.split(".")[1] != rack2.split(".")[1]


def test_h100_node_has_eight_gpus_and_no_clique() -> None:
    (node,) = nvml.profile_nodes("h100")
    records = nvml.SimulatedInventory(profile="h100", node_name=node).fabric_records()
    assert len(records) == 8
    assert {r.state for r in records} == {models.FabricState.NOT_SUPPORTED}
    assert {r.cluster_uuid for r in records} == {b"\x00" * 16}
    assert _clique("h100", node) == ""


def test_fabric_records_are_identical_on_every_call_and_sorted() -> None:
    first = nvml.SimulatedInventory(profile="gb200-nvl72", node_name="gb200-rack1-node03")
    second = nvml.SimulatedInventory(profile="gb200-nvl72", node_name="gb200-rack1-node03")
    assert first.fabric_records() == second.fabric_records()
    uuids = [r.gpu_uuid for r in first.fabric_records()]
    assert uuids == sorted(uuids)


def test_fabric_state_override_simulates_a_fabric_not_ready_yet() -> None:
    inventory = nvml.SimulatedInventory(
        profile="gb200-nvl72",
        node_name="gb200-rack1-node01",
        fabric_state=models.FabricState.IN_PROGRESS,
    )
    with pytest.raises(errors.PermanentError, match="not complete"):
        cliques.clique_id_from_fabric(inventory.fabric_records())
    assert cliques.clique_id_from_fabric(inventory.fabric_records(), strict=False) == ""


def test_unknown_profile_is_rejected_listing_the_known_ones() -> None:
    with pytest.raises(ValueError, match="gb200-2racks, gb200-nvl72, h100"):
        nvml.SimulatedInventory(profile="dgx-a100", node_name="n1")
    with pytest.raises(ValueError, match="unknown simulated GPU profile 'x'"):
        nvml.profile_nodes("x")


def test_node_outside_the_profile_is_rejected_naming_its_nodes() -> None:
    with pytest.raises(ValueError, match=re.escape("gb200-rack1-node01 .. gb200-rack1-node18")):
        nvml.SimulatedInventory(profile="gb200-nvl72", node_name="gb200-rack2-node01")


def test_simulated_proc_devices_carries_the_imex_channel_major() -> None:
    assert procdevices.imex_channel_major(nvml.simulated_proc_devices()) == 242
    assert procdevices.imex_channel_major(nvml.simulated_proc_devices(major=511)) == 511


def test_simulated_boot_id_is_stable_per_node_and_changes_on_reboot() -> None:
    boot = nvml.simulated_boot_id("gb200-rack1-node01")
    assert boot == nvml.simulated_boot_id("gb200-rack1-node01")
    assert boot != nvml.simulated_boot_id("gb200-rack1-node02")
    assert boot != nvml.simulated_boot_id("gb200-rack1-node01", boot=1)


def test_simulated_node_files_fake_a_node() -> None:
    files: ports.NodeFiles = nvml.SimulatedNodeFiles(node_name="h100-node01", channel_major=240)
    assert procdevices.imex_channel_major(files.proc_devices()) == 240
    assert files.boot_id() == nvml.simulated_boot_id("h100-node01")


def test_inventory_from_spec_selects_a_simulated_node() -> None:
    inventory: ports.DeviceInventory = nvml.inventory_from_spec(
        "simulated:gb200-nvl72", node_name="gb200-rack1-node05"
    )
    assert isinstance(inventory, nvml.SimulatedInventory)
    assert inventory.node_name == names.NodeName("gb200-rack1-node05")


def test_inventory_from_spec_selects_real_nvml_without_probing() -> None:
    assert isinstance(nvml.inventory_from_spec("real", node_name="n1"), nvml.NvmlInventory)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("nvml", "use 'real' (NVML) or one of simulated:gb200-2racks"),
        ("simulated:nope", "unknown simulated GPU profile 'nope'"),
        ("simulated:h100", "node 'gb200-rack1-node01' is not part"),
    ],
)
def test_inventory_from_spec_rejects_bad_values_as_config_errors(spec: str, complaint: str) -> None:
    with pytest.raises(errors.ConfigError, match=re.escape(complaint)):
        nvml.inventory_from_spec(spec, node_name="gb200-rack1-node01")


def test_simulated_spec_may_name_the_driver_version() -> None:
    default = nvml_inventory.inventory_from_spec(
        "simulated:gb200-nvl72", node_name="gb200-rack1-node01"
    )
    older = nvml_inventory.inventory_from_spec(
        "simulated:gb200-nvl72@570.148.08", node_name="gb200-rack1-node01"
    )
    assert default.driver_version() == nvml_simulated.DEFAULT_DRIVER_VERSION
    assert older.driver_version() == "570.148.08"
    assert older.fabric_records() == default.fabric_records()
