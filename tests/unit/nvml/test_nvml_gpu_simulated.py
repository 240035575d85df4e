"""Simulated GPU profiles: the facts the demo, the slice planner and the tests rely on.

Counts and models per profile, deterministic UUIDs per node name, MIG devices that fit on
their GPU without overlapping, valid names, and a clear error for an unknown profile.
"""

from __future__ import annotations

import re

import pytest

from adapters import nvml
from adapters.nvml import _facts, gpu_simulation
from core import errors, ports
from core.gpu import devices

GIB = 2**30


def _inventory(profile: str, node: str = "node-a") -> devices.GpuInventory:
    return nvml.simulated_gpus(profile, node_name=node).gpu_inventory()


def test_profiles_are_listed_by_name() -> None:
    assert nvml.gpu_profile_names() == ("a100-mig", "gb200", "hgx-h100")


def test_simulated_gpus_is_a_gpu_discovery() -> None:
    discovery: ports.GpuDiscovery = nvml.simulated_gpus("hgx-h100")
    assert discovery.gpu_inventory() == discovery.gpu_inventory()


def test_unknown_profile_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(errors.ConfigError, match="unknown simulated GPU profile 'h200'") as caught:
        nvml.simulated_gpus("h200")
    assert "a100-mig, gb200, hgx-h100" in caught.value.message


def test_hgx_h100_has_eight_h100s_split_over_two_numa_nodes() -> None:
    inventory = _inventory("hgx-h100")
    assert [gpu.minor for gpu in inventory.gpus] == list(range(8))
    assert {gpu.product_name for gpu in inventory.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {(gpu.architecture, gpu.cuda_compute_capability) for gpu in inventory.gpus} == {
        ("Hopper", "9.0")
    }
    assert {gpu.memory_bytes for gpu in inventory.gpus} == {81559 * 2**20}
    assert [gpu.numa_node for gpu in inventory.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({gpu.pcie_root for gpu in inventory.gpus}) == 8
    assert all(gpu.mig_capable and not gpu.mig_enabled for gpu in inventory.gpus)
    assert inventory.migs == () and inventory.vfios == ()


def test_only_the_hgx_board_reports_module_ids_one_to_eight_in_index_order() -> None:
    assert [gpu.module_id for gpu in _inventory("hgx-h100").gpus] == list(range(1, 9))
    for profile in ("a100-mig", "gb200"):
        assert {gpu.module_id for gpu in _inventory(profile).gpus} == {None}


def test_gb200_tray_has_four_coherent_blackwell_gpus() -> None:
    inventory = _inventory("gb200")
    assert [gpu.name for gpu in inventory.gpus] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {gpu.product_name for gpu in inventory.gpus} == {"NVIDIA GB200"}
    assert {(gpu.architecture, gpu.cuda_compute_capability) for gpu in inventory.gpus} == {
        ("Blackwell", "10.0")
    }
    assert all(184 * GIB < gpu.memory_bytes < 190 * GIB for gpu in inventory.gpus)
    assert {gpu.addressing_mode for gpu in inventory.gpus} == {"ATS"}


def test_a100_mig_has_one_gpu_in_mig_mode_with_its_devices_and_one_without() -> None:
    inventory = _inventory("a100-mig")
    gpu0, gpu1 = inventory.gpus
    assert (gpu0.mig_enabled, gpu1.mig_enabled) == (True, False)
    assert {gpu.product_name for gpu in inventory.gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert [mig.name for mig in inventory.migs] == [
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-19-3",
        "gpu-0-mig-3g20gb-9-4",
    ]
    assert {mig.parent_uuid for mig in inventory.migs} == {gpu0.uuid}


def test_a100_mig_devices_carry_the_a100_40gb_profile_facts() -> None:
    by_profile = {mig.profile: mig for mig in _inventory("a100-mig").migs}
    three_g = by_profile["3g.20gb"]
    assert (three_g.gi_profile_id, three_g.placement_size) == (9, 4)
    assert three_g.memory_bytes == 19968 * 2**20
    assert (three_g.multiprocessors, three_g.copy_engines, three_g.decoders) == (42, 3, 2)
    one_g = by_profile["1g.5gb"]
    assert (one_g.gi_profile_id, one_g.placement_size, one_g.multiprocessors) == (19, 1, 14)


@pytest.mark.parametrize("profile", nvml.gpu_profile_names())
def test_mig_devices_fit_their_gpu_without_overlapping(profile: str) -> None:
    spec = gpu_simulation.gpu_profile(profile)
    inventory = _inventory(profile)
    for gpu in inventory.gpus:
        migs = [mig for mig in inventory.migs if mig.parent_minor == gpu.minor]
        taken: set[int] = set()
        for mig in migs:
            slices = set(range(mig.placement_start, mig.placement_start + mig.placement_size))
            assert not slices & taken, f"{mig.name} overlaps another MIG device"
            assert max(slices) < spec.memory_slices
            taken |= slices
            profile_spec = spec.mig_profile(mig.profile)
            assert mig.placement_start in profile_spec.placement_starts
        compute = sum(int(mig.profile.split("g.")[0]) for mig in migs)
        assert compute <= spec.compute_slices
        assert sum(mig.memory_bytes for mig in migs) <= gpu.memory_bytes
        assert bool(migs) == gpu.mig_enabled


@pytest.mark.parametrize("profile", nvml.gpu_profile_names())
def test_mig_profile_names_agree_with_how_nvml_values_are_named(profile: str) -> None:
    inventory = _inventory(profile)
    for mig in inventory.migs:
        parent = inventory.gpu_by_minor(mig.parent_minor)
        assert parent is not None
        gb = _facts.mig_memory_gb(
            device_memory_bytes=parent.memory_bytes, mig_memory_mib=mig.memory_bytes // 2**20
        )
        assert mig.profile.split("+")[0].endswith(f".{gb}gb")


@pytest.mark.parametrize("profile", nvml.gpu_profile_names())
def test_names_ids_and_uuids_are_valid_and_unique(profile: str) -> None:
    inventory = _inventory(profile)
    names = [gpu.name for gpu in inventory.gpus] + [mig.name for mig in inventory.migs]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) for name in names)
    assert all(devices.parse_mig_name(mig.name) is not None for mig in inventory.migs)
    uuids = [gpu.uuid for gpu in inventory.gpus] + [mig.uuid for mig in inventory.migs]
    assert len(set(uuids)) == len(uuids)
    assert all(re.fullmatch(r"GPU-[0-9a-f-]{36}", gpu.uuid) for gpu in inventory.gpus)
    assert all(re.fullmatch(r"MIG-[0-9a-f-]{36}", mig.uuid) for mig in inventory.migs)
    assert all(_facts.is_pci_bus_id(gpu.pci_bus_id) for gpu in inventory.gpus)
    assert all(
        gpu.pcie_root and _facts.pcie_root(f"/sys/devices/{gpu.pcie_root}") == gpu.pcie_root
        for gpu in inventory.gpus
    )
    assert {(g.driver_version, g.cuda_driver_version) for g in inventory.gpus} == {
        ("580.65.06", "13.0")
    }


def test_uuids_are_deterministic_per_node_name() -> None:
    assert _inventory("a100-mig", "node-a") == _inventory("a100-mig", "node-a")
    a, b = _inventory("a100-mig", "node-a"), _inventory("a100-mig", "node-b")
    assert not {gpu.uuid for gpu in a.gpus} & {gpu.uuid for gpu in b.gpus}
    assert not {mig.uuid for mig in a.migs} & {mig.uuid for mig in b.migs}


def test_gpu_uuids_match_the_fabric_simulation_of_a_node_of_that_name() -> None:
    fabric = nvml.SimulatedInventory(profile="h100", node_name="h100-node01").fabric_records()
    gpus = _inventory("hgx-h100", "h100-node01").gpus
    assert {record.gpu_uuid for record in fabric} == {gpu.uuid for gpu in gpus}


def test_mig_capability_minors_follow_the_drivers_numbering() -> None:
    # /proc/driver/nvidia-caps/mig-minors: "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13".
    assert gpu_simulation.mig_cap_minor(gpu_minor=0, gi_id=1) == 12
    assert gpu_simulation.mig_cap_minor(gpu_minor=0, gi_id=1, ci_id=0) == 13
    three_g = next(m for m in _inventory("a100-mig").migs if m.profile == "3g.20gb")
    assert (three_g.gi_cap_minor, three_g.ci_cap_minor) == (21, 22)


def test_a_profile_without_a_mig_profile_says_which_it_has() -> None:
    with pytest.raises(ValueError, match=r"has no MIG profile '9g\.99gb' \(it has: 1g\.5gb, "):
        gpu_simulation.gpu_profile("a100-mig").mig_profile("9g.99gb")


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("simulated:hgx-h100", nvml.SimulatedGpus), ("real", nvml.NvmlInventory)],
)
def test_gpu_discovery_from_spec_builds_the_named_discovery(spec: str, kind: type) -> None:
    discovery = nvml.gpu_discovery_from_spec(spec, node_name="n", driver_root="/driver-root")
    assert isinstance(discovery, kind)


@pytest.mark.parametrize("spec", ["simulated:h100", "simulated:", "nvml", ""])
def test_gpu_discovery_from_spec_refuses_other_values_listing_the_accepted(spec: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid GPU discovery") as caught:
        nvml.gpu_discovery_from_spec(spec, node_name="n")
    assert "'real' (NVML) or one of simulated:a100-mig, simulated:gb200" in caught.value.message
