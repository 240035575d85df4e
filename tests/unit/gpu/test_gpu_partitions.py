"""Dynamic MIG publishing (`core.gpu.partitions`): what the scheduler sees under gate DynamicMIG.

Covers upstream's names (devices, counter sets, counters), which GPUs are partitionable, that
the counters forbid exactly the layouts a GPU cannot hold (overlapping placements, a full GPU
with any slice, a second media-extension slice) and allow the ones it can, both slice layouts
and the version that picks them, and the errors for what the API server would refuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from gpu_slices_inventories import a100_gpu, a100_mig, h100_gpu

from core import errors, models
from core.gpu import devices, migprofiles, partitions, shares
from core.gpu import slices as gpu_slices

H100 = h100_gpu(0, mig_profiles=migprofiles.H100_80GB)
PROFILE_TABLES = {
    "A100-40GB": migprofiles.A100_40GB,
    "A100-80GB": migprofiles.A100_80GB,
    "H100-80GB": migprofiles.H100_80GB,
    "GB200": migprofiles.GB200,
}
UNITS = {"Mi": 2**20, "Gi": 2**30, "Ki": 2**10, "": 1}


def _amount(quantity: str) -> int:
    for suffix in ("Mi", "Gi", "Ki"):
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * UNITS[suffix]
    return int(quantity)


def fits(chosen: Iterable[Mapping[str, Any]], counter_set: Mapping[str, Any]) -> bool:
    """Whether the scheduler could allocate all of `chosen` together: their consumption,
    summed per counter, stays within the counter set (what KEP-4815 allocation checks)."""
    left = {name: _amount(c["value"]) for name, c in counter_set["counters"].items()}
    for device in chosen:
        for consumption in device["consumesCounters"]:
            assert consumption["counterSet"] == counter_set["name"]
            for name, counter in consumption["counters"].items():
                left[name] -= _amount(counter["value"])
    return all(value >= 0 for value in left.values())


def published(gpu: devices.GpuInfo) -> dict[str, Any]:
    [content] = partitions.plan_partitioned_slices(
        devices.GpuInventory(gpus=(gpu,)), layout=partitions.SliceLayout.COMBINED)
    return {str(device["name"]): device for device in content.devices}


def test_names_are_upstreams_for_devices_counter_sets_and_counters() -> None:
    gpu = dataclasses.replace(H100, minor=3)
    names = [spec.name for spec in partitions.possible_migs(gpu)]
    assert names[:2] == ["gpu-3-mig-1g10gb-19-0", "gpu-3-mig-1g10gb-19-1"]
    assert "gpu-3-mig-1g10gb-me-20-6" in names  # "+me" becomes "-me"
    assert names[-1] == "gpu-3-mig-7g80gb-0-0"
    assert partitions.counter_set_name(gpu) == "gpu-3-counter-set"
    assert set(partitions.counter_set(gpu)["counters"]) == {
        "multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines",
        "ofa-engines", "memory", *(f"memory-slice-{i}" for i in range(8)),
    }


@pytest.mark.parametrize("table", PROFILE_TABLES.values(), ids=PROFILE_TABLES.keys())
def test_every_model_offers_25_placements_whose_every_full_layout_fits(
    table: tuple[migprofiles.MigProfile, ...],
) -> None:
    gpu = h100_gpu(0, mig_profiles=table)
    by_name = published(gpu)
    assert len(by_name) == 26  # 25 profile x placement pairs and the full GPU
    specs = partitions.possible_migs(gpu)
    counters = partitions.counter_set(gpu)
    small, double, two, three, four, seven = (
        [s for s in specs if s.profile.profile_id == pid] for pid in (19, 15, 14, 9, 5, 0))
    for layout in (small, double, two, three, [*four, three[1]], seven):
        assert fits((by_name[s.name] for s in layout), counters), [s.name for s in layout]


def test_overlapping_placements_a_full_gpu_with_a_slice_and_two_media_slices_never_fit() -> None:
    by_name = published(H100)
    counters = partitions.counter_set(H100)
    assert not fits([by_name["gpu-0-mig-3g40gb-9-0"], by_name["gpu-0-mig-2g20gb-14-2"]], counters)
    assert not fits([by_name["gpu-0"], by_name["gpu-0-mig-1g10gb-19-6"]], counters)
    assert not fits(
        [by_name["gpu-0-mig-1g10gb-me-20-0"], by_name["gpu-0-mig-1g10gb-me-20-1"]], counters)
    assert fits([by_name["gpu-0-mig-1g10gb-me-20-0"], by_name["gpu-0-mig-1g10gb-19-1"]], counters)
    everything = [device for name, device in by_name.items() if name != "gpu-0"]
    assert all(not fits([by_name["gpu-0"], other], counters) for other in everything)


def test_a_partition_publishes_static_migs_attributes_less_uuid_and_consumes_its_slices() -> None:
    device = published(H100)["gpu-0-mig-3g40gb-9-4"]
    static = gpu_slices.mig_device(
        a100_mig("3g.40gb", gi_profile_id=9, start=4, size=4, memory_mib=40448,
                 multiprocessors=60, gi_id=2),
        parent=dataclasses.replace(H100, mig_enabled=True),
    )
    assert {k: v for k, v in static["attributes"].items() if k != "uuid"} == {
        **device["attributes"], "parentUUID": static["attributes"]["parentUUID"]}
    assert "uuid" not in device["attributes"]
    assert device["capacity"]["memory"] == {"value": "40448Mi"}
    assert not any(name.startswith("memorySlice") for name in device["capacity"])
    [consumption] = device["consumesCounters"]
    assert [n for n in consumption["counters"] if n.startswith("memory-slice")] == [
        "memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7"]


def test_full_gpu_consumes_its_whole_counter_set_and_shows_the_largest_profile() -> None:
    device = published(H100)["gpu-0"]
    assert device["consumesCounters"] == [{
        "counterSet": "gpu-0-counter-set",
        "counters": partitions.counter_set(H100)["counters"],
    }]
    assert device["capacity"]["multiprocessors"] == {"value": "132"}
    assert device["attributes"]["uuid"] == {"string": H100.uuid}


def test_which_gpus_are_partitioned_follows_reset_free_mig_toggling() -> None:
    a100_80 = migprofiles.A100_80GB
    in_mig = dataclasses.replace(a100_gpu(0, mig_enabled=True), mig_profiles=a100_80)
    not_in_mig = dataclasses.replace(a100_gpu(1, mig_enabled=False), mig_profiles=a100_80)
    hopper_in_mig = dataclasses.replace(H100, mig_enabled=True)
    assert "gpu-0" not in published(in_mig) and len(published(in_mig)) == 25
    assert list(published(not_in_mig)) == ["gpu-1"]
    assert "consumesCounters" not in published(not_in_mig)["gpu-1"]
    assert len(published(hopper_in_mig)) == 26
    assert not partitions.is_partitionable(h100_gpu(0))  # no profiles listed
    assert not partitions.is_partitionable(dataclasses.replace(H100, mig_capable=False))


def test_a_gpu_that_is_not_partitioned_keeps_its_static_mig_devices() -> None:
    parent = a100_gpu(0, mig_enabled=True)  # no profiles listed: not partitionable
    mig = a100_mig("1g.10gb", gi_profile_id=19, start=0, size=1, memory_mib=9856,
                   multiprocessors=14, gi_id=9)
    [content] = partitions.plan_partitioned_slices(
        devices.GpuInventory(gpus=(parent,), migs=(mig,)),
        layout=partitions.SliceLayout.COMBINED)
    assert [d["name"] for d in content.devices] == [mig.name]
    assert content.shared_counters == ()


def test_combined_layout_keeps_counters_with_their_gpu_and_split_puts_them_first() -> None:
    gpus = (dataclasses.replace(h100_gpu(1), mig_profiles=migprofiles.H100_80GB), H100,
            h100_gpu(2))
    inventory = devices.GpuInventory(gpus=gpus)
    combined = partitions.plan_partitioned_slices(
        inventory, layout=partitions.SliceLayout.COMBINED)
    assert [[c["name"] for c in s.shared_counters] for s in combined] == [
        ["gpu-0-counter-set"], ["gpu-1-counter-set"], []]
    assert [s.devices[0]["name"] for s in combined] == ["gpu-0", "gpu-1", "gpu-2"]
    split = partitions.plan_partitioned_slices(inventory, layout=partitions.SliceLayout.SPLIT)
    assert split[0].devices == ()
    assert [c["name"] for c in split[0].shared_counters] == [
        "gpu-0-counter-set", "gpu-1-counter-set"]
    assert [s.devices for s in split[1:]] == [s.devices for s in combined]
    assert all(s.shared_counters == () for s in split[1:])


def test_built_slices_hold_only_the_fields_they_have_and_count_the_pool() -> None:
    contents = partitions.plan_partitioned_slices(
        devices.GpuInventory(gpus=(H100,)), layout=partitions.SliceLayout.SPLIT)
    first, second = partitions.build_partitioned_slices(
        contents, node_name="node-a", generation=4, node_uid="uid-1")
    assert first["metadata"]["name"] == "node-a-gpu.nvidia.com-0"
    assert "devices" not in first["spec"] and len(first["spec"]["sharedCounters"]) == 1
    assert "sharedCounters" not in second["spec"] and len(second["spec"]["devices"]) == 26
    assert second["spec"]["pool"] == {"name": "node-a", "generation": 4,
                                      "resourceSliceCount": 2}
    assert first["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    [empty] = partitions.build_partitioned_slices(
        partitions.plan_partitioned_slices(
            devices.GpuInventory(), layout=partitions.SliceLayout.COMBINED),
        node_name="node-a", generation=1)
    assert empty["spec"]["devices"] == [] and "ownerReferences" not in empty["metadata"]


@pytest.mark.parametrize(
    ("version", "layout"),
    [("v1.34.4", "combined"), ("v1.35.0", "split"), ("1.37.2+k3s1", "split"),
     ("v2.0.0", "split"), ("v1.9.0", "combined")],
)
def test_the_server_version_picks_the_layout(version: str, layout: str) -> None:
    assert partitions.layout_for(version) is partitions.SliceLayout(layout)


def test_a_version_that_is_not_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'unknown' is not a Kubernetes version"):
        partitions.layout_for("unknown")


def test_what_the_api_would_refuse_is_a_permanent_error_naming_the_device() -> None:
    bad_profile = dataclasses.replace(
        migprofiles.H100_80GB[0], name="1g." + "x" * 70)
    with pytest.raises(errors.PermanentError, match="is not a DNS label"):
        published(dataclasses.replace(H100, mig_profiles=(bad_profile,)))
    with pytest.raises(errors.PermanentError, match="device gpu-0: pciBusID"):
        published(dataclasses.replace(H100, pci_bus_id="nowhere"))


def test_consumable_shares_make_partitions_and_the_full_gpu_shareable() -> None:
    gates = models.FeatureGates(values={"ConsumableShares": True})
    consumable = shares.parse_consumable_shares("2", gates=gates)
    [content] = partitions.plan_partitioned_slices(
        devices.GpuInventory(gpus=(H100,)), layout=partitions.SliceLayout.COMBINED,
        consumable=consumable)
    assert all(d.get("allowMultipleAllocations") for d in content.devices)
    assert all(d["consumesCounters"] for d in content.devices)


def test_profile_tables_hold_distinct_ids_and_placements_inside_the_gpu() -> None:
    for table in PROFILE_TABLES.values():
        assert len({p.profile_id for p in table}) == len(table)
        for profile in table:
            assert all(s + profile.placement_size <= 8 for s in profile.placement_starts)
    assert [migprofiles.toggles_without_reset(arch) for arch in (
        "Hopper", "Blackwell", "Ampere", "Volta")] == [True, True, False, False]
