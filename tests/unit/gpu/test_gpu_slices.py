"""The `gpu.nvidia.com` devices a node publishes, pinned against upstream's wire format.

Covers: the exact Device JSON of a full GPU, a MIG device and a VFIO function (the expected
values are what upstream's GetDevice marshals for the same inputs); MIG-mode GPUs replaced by
their MIG devices; VFIO only under PassthroughSupport; version coercion and quantities as
Masterminds semver and apimachinery render them; order; and every refusal of bad discovery data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gpu_slices_inventories as inv
import pytest

from core import errors, gates, models, names
from core.gpu import devices
from core.gpu import slices as gpu_slices

NO_GATES = gates.resolve_gates({})
PASSTHROUGH = gates.resolve_gates({gates.PASSTHROUGH_SUPPORT: True})


def _plan(
    inventory: devices.GpuInventory, *, passthrough: bool = False
) -> tuple[models.JSONObject, ...]:
    return gpu_slices.plan_gpu_devices(inventory, gates=PASSTHROUGH if passthrough else NO_GATES)


def _names(planned: tuple[models.JSONObject, ...]) -> list[str]:
    return [device["name"] for device in planned]


def _by_name(planned: tuple[models.JSONObject, ...]) -> dict[str, models.JSONObject]:
    return {device["name"]: device for device in planned}


# ------------------------------------------------------------- exact upstream device JSON

GOLDEN_GPU = devices.GpuInfo(
    minor=3,
    index=3,
    uuid="GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
    product_name="NVIDIA H100 80GB HBM3",
    brand="Nvidia",
    architecture="Hopper",
    cuda_compute_capability="9.0",
    driver_version="580.65.06",
    cuda_driver_version="13.0",
    pci_bus_id="0000:1b:00.0",
    memory_bytes=85899345920,
    pcie_root="pci0000:00",
    numa_node=1,
    mig_capable=True,
    addressing_mode="HMM",
)
GOLDEN_MIG = devices.MigDeviceInfo(
    uuid="MIG-7a1c5c4e-3c5e-5f43-9d4b-0d6f3e1b2a11",
    profile="1g.10gb",
    parent_uuid=GOLDEN_GPU.uuid,
    parent_minor=3,
    gi_profile_id=19,
    gi_id=9,
    ci_id=0,
    placement_start=2,
    placement_size=1,
    memory_bytes=9856 * 1024 * 1024,
    multiprocessors=16,
    copy_engines=1,
    decoders=1,
    encoders=0,
    jpeg_engines=1,
    ofa_engines=0,
)
GOLDEN_VFIO = devices.VfioDeviceInfo(
    index=5,
    uuid="vfio-uuid",
    device_id="0x2330",
    vendor_id="0x10de",
    product_name="GH100 [H100 SXM5 80GB]",
    pci_bus_id="0000:1b:00.0",
    iommu_group=21,
    addressable_memory_bytes=137438953472,
    pcie_root="pci0000:00",
    numa_node=1,
    iommu_fd_enabled=True,
)

_PARENT_ATTRIBUTES: dict[str, Any] = {
    "addressingMode": {"string": "HMM"},
    "architecture": {"string": "Hopper"},
    "brand": {"string": "Nvidia"},
    "cudaComputeCapability": {"version": "9.0.0"},
    "cudaDriverVersion": {"version": "13.0.0"},
    "driverVersion": {"version": "580.65.6"},
    "productName": {"string": "NVIDIA H100 80GB HBM3"},
    "resource.kubernetes.io/numaNode": {"int": 1},
    "resource.kubernetes.io/pciBusID": {"string": "0000:1b:00.0"},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
}


def test_full_gpu_is_published_as_upstream_marshals_it() -> None:
    assert gpu_slices.gpu_device(GOLDEN_GPU) == {
        "name": "gpu-3",
        "attributes": {
            **_PARENT_ATTRIBUTES,
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def test_mig_device_is_published_as_upstream_marshals_it() -> None:
    assert gpu_slices.mig_device(GOLDEN_MIG, parent=GOLDEN_GPU) == {
        "name": "gpu-3-mig-1g10gb-19-2",
        "attributes": {
            **_PARENT_ATTRIBUTES,
            "parentUUID": {"string": "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"},
            "profile": {"string": "1g.10gb"},
            "type": {"string": "mig"},
            "uuid": {"string": "MIG-7a1c5c4e-3c5e-5f43-9d4b-0d6f3e1b2a11"},
        },
        "capacity": {
            "copyEngines": {"value": "1"},
            "decoders": {"value": "1"},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": "1"},
            "memory": {"value": "9856Mi"},
            "memorySlice2": {"value": "1"},
            "multiprocessors": {"value": "16"},
            "ofaEngines": {"value": "0"},
        },
    }


def test_vfio_function_is_published_as_upstream_marshals_it() -> None:
    assert gpu_slices.vfio_device(GOLDEN_VFIO) == {
        "name": "gpu-vfio-5",
        "attributes": {
            "deviceID": {"string": "0x2330"},
            "iommuFDEnabled": {"bool": True},
            "productName": {"string": "GH100 [H100 SXM5 80GB]"},
            "resource.kubernetes.io/numaNode": {"int": 1},
            "resource.kubernetes.io/pciBusID": {"string": "0000:1b:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
            "type": {"string": "vfio"},
            "uuid": {"string": "vfio-uuid"},
            "vendorID": {"string": "0x10de"},
        },
        "capacity": {"addressableMemory": {"value": "128Gi"}},
    }


def test_attribute_keys_are_sorted_as_go_marshals_maps() -> None:
    for device in _plan(inv.A100_MIG_NODE):
        assert list(device["attributes"]) == sorted(device["attributes"])
        assert list(device["capacity"]) == sorted(device["capacity"])


def test_a_mig_device_has_one_memory_slice_capacity_per_slice_of_its_placement() -> None:
    three_g = _by_name(_plan(inv.A100_MIG_NODE))["gpu-0-mig-3g40gb-9-4"]
    slices_held = {key for key in three_g["capacity"] if key.startswith("memorySlice")}
    assert slices_held == {"memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7"}
    assert all(three_g["capacity"][key] == {"value": "1"} for key in slices_held)


def test_optional_attributes_are_left_out_where_discovery_does_not_know_them() -> None:
    bare = dataclasses.replace(GOLDEN_GPU, pcie_root=None, numa_node=None, addressing_mode=None)
    attributes = gpu_slices.gpu_device(bare)["attributes"]
    assert gpu_slices.PCIE_ROOT_ATTRIBUTE not in attributes
    assert gpu_slices.NUMA_NODE_ATTRIBUTE not in attributes
    assert "addressingMode" not in attributes
    assert gpu_slices.PCI_BUS_ID_ATTRIBUTE in attributes


@pytest.mark.parametrize("mode", ["", None])
def test_an_empty_addressing_mode_is_not_published(mode: str | None) -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, addressing_mode=mode)
    assert "addressingMode" not in gpu_slices.gpu_device(gpu)["attributes"]


def test_a_negative_numa_node_is_not_published() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, numa_node=-1)
    assert gpu_slices.NUMA_NODE_ATTRIBUTE not in gpu_slices.gpu_device(gpu)["attributes"]
    vfio = dataclasses.replace(GOLDEN_VFIO, numa_node=-1)
    assert gpu_slices.NUMA_NODE_ATTRIBUTE not in gpu_slices.vfio_device(vfio)["attributes"]


def test_nvml_bus_ids_are_published_in_the_form_deviceattribute_requires() -> None:
    published = _by_name(_plan(inv.HGX_H100))["gpu-5"]["attributes"]
    assert published[gpu_slices.PCI_BUS_ID_ATTRIBUTE] == {"string": "0000:ab:00.0"}


def test_the_gb200_tray_publishes_its_addressing_mode_and_versions() -> None:
    attributes = _by_name(_plan(inv.GB200_TRAY))["gpu-2"]["attributes"]
    assert attributes["addressingMode"] == {"string": "ATS"}
    assert attributes["cudaComputeCapability"] == {"version": "10.0.0"}
    assert attributes["driverVersion"] == {"version": "580.82.7"}
    assert attributes[gpu_slices.PCI_BUS_ID_ATTRIBUTE] == {"string": "0018:01:00.0"}


# ------------------------------------------------------------------------ what is published


def test_an_hgx_h100_node_publishes_its_eight_gpus_by_minor() -> None:
    planned = _plan(inv.HGX_H100)
    assert _names(planned) == [f"gpu-{i}" for i in range(8)]
    assert {d["attributes"]["type"]["string"] for d in planned} == {"gpu"}
    assert planned[0]["capacity"] == {"memory": {"value": "81559Mi"}}


def test_a_gpu_in_mig_mode_is_replaced_by_its_mig_devices() -> None:
    planned = _plan(inv.A100_MIG_NODE)
    assert _names(planned) == [
        "gpu-0-mig-1g10gb-19-2",
        "gpu-0-mig-1g10gb-19-3",
        "gpu-0-mig-2g20gb-14-0",
        "gpu-0-mig-3g40gb-9-4",
        "gpu-1",
    ]
    migs = [d for d in planned if d["attributes"]["type"] == {"string": "mig"}]
    assert {d["attributes"]["parentUUID"]["string"] for d in migs} == {inv.A100_UUIDS[0]}
    assert all(d["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"} for d in migs)


def test_a_gpu_in_mig_mode_without_mig_devices_publishes_nothing() -> None:
    inventory = devices.GpuInventory(gpus=(inv.a100_gpu(0, mig_enabled=True),))
    assert _plan(inventory) == ()


def test_vfio_functions_are_hidden_without_passthrough_support() -> None:
    assert _names(_plan(inv.HGX_H100_WITH_VFIO)) == [f"gpu-{i}" for i in range(8)]


def test_vfio_functions_sit_next_to_their_gpu_under_passthrough_support() -> None:
    planned = _plan(inv.HGX_H100_WITH_VFIO, passthrough=True)
    assert _names(planned) == [name for i in range(8) for name in (f"gpu-{i}", f"gpu-vfio-{i}")]


def test_a_gpu_showing_mig_devices_is_not_offered_for_passthrough() -> None:
    inventory = dataclasses.replace(
        inv.A100_MIG_NODE,
        vfios=(
            inv.vfio(0, pci_bus_id="0000:07:00.0", parent_minor=0),
            inv.vfio(1, pci_bus_id="0000:0f:00.0", parent_minor=1),
            # Bound to vfio-pci already: no parent minor, matched by its address.
            inv.vfio(2, pci_bus_id="0000:07:00.0"),
        ),
    )
    assert "gpu-vfio-0" not in _names(_plan(inventory, passthrough=True))
    assert "gpu-vfio-2" not in _names(_plan(inventory, passthrough=True))
    assert "gpu-vfio-1" in _names(_plan(inventory, passthrough=True))


def test_a_function_without_a_published_gpu_is_offered_for_passthrough() -> None:
    inventory = devices.GpuInventory(vfios=(inv.vfio(0, pci_bus_id="0000:18:00.0"),))
    assert _names(_plan(inventory, passthrough=True)) == ["gpu-vfio-0"]


def test_devices_are_ordered_by_gpu_address_then_name_whatever_the_discovery_order() -> None:
    shuffled = devices.GpuInventory(
        gpus=tuple(reversed(inv.HGX_H100.gpus)),
        vfios=tuple(reversed(inv.HGX_H100_WITH_VFIO.vfios)),
    )
    assert _plan(shuffled, passthrough=True) == _plan(inv.HGX_H100_WITH_VFIO, passthrough=True)
    # gpu-10 sits on a lower bus than gpu-2: the address decides, not the name.
    ten = inv.h100_gpu(2, minor=10, pci_bus_id="00000000:01:00.0", uuid="GPU-ten")
    inventory = devices.GpuInventory(gpus=(inv.h100_gpu(2), ten))
    assert _names(_plan(inventory)) == ["gpu-10", "gpu-2"]


@pytest.mark.parametrize("profile", sorted(inv.PROFILES))
def test_every_device_name_of_every_profile_is_a_valid_dra_device_name(profile: str) -> None:
    planned = _plan(inv.PROFILES[profile], passthrough=True)
    assert planned
    for name in _names(planned):
        assert gpu_slices.is_valid_device_name(name), name
    assert len(set(_names(planned))) == len(planned)


def test_device_names_are_dns_labels_of_at_most_63_characters() -> None:
    assert gpu_slices.is_valid_device_name("gpu-0-mig-1g10gb-me-20-0")
    assert gpu_slices.is_valid_device_name("a" * 63)
    assert not gpu_slices.is_valid_device_name("a" * 64)
    assert not gpu_slices.is_valid_device_name("gpu-0-mig-1g.10gb-19-0")
    assert not gpu_slices.is_valid_device_name("-gpu")
    assert not gpu_slices.is_valid_device_name("Gpu-0")
    assert not gpu_slices.is_valid_device_name("")


# ------------------------------------------------------------------ the slices themselves


def test_the_node_publishes_one_gpu_slice_in_a_pool_named_for_the_node() -> None:
    built = gpu_slices.build_gpu_resource_slices(
        inv.A100_MIG_NODE, node_name="node-a", gates=NO_GATES, generation=3
    )
    assert len(built) == 1
    spec = built[0]["spec"]
    assert built[0]["apiVersion"] == names.DRA_GROUP_VERSION
    assert built[0]["metadata"]["name"] == "node-a-gpu.nvidia.com-0"
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    assert spec["devices"] == list(_plan(inv.A100_MIG_NODE))


def test_a_node_without_gpus_still_publishes_its_empty_pool() -> None:
    built = gpu_slices.build_gpu_resource_slices(
        devices.GpuInventory(), node_name="cpu-node", gates=NO_GATES, generation=1
    )
    assert [s["spec"]["devices"] for s in built] == [[]]


# ------------------------------------------------------------ versions, quantities, buses


# Expected values as Masterminds semver v3 NewVersion(..).String() renders them (upstream's
# semver.MustParse), checked against the Go library.
@pytest.mark.parametrize(
    ("nvml", "published"),
    [
        ("9.0", "9.0.0"),
        ("10.0", "10.0.0"),
        ("580.65.06", "580.65.6"),
        ("570.172.08", "570.172.8"),
        ("13.0", "13.0.0"),
        ("12", "12.0.0"),
        ("v1.2.3", "1.2.3"),
        ("00.01.002", "0.1.2"),
        ("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"),
        ("1.2.3-0a", "1.2.3-0a"),
        ("1.2.3+01", "1.2.3+01"),
        ("18446744073709551615.0", "18446744073709551615.0.0"),
    ],
)
def test_versions_are_coerced_as_upstream_semver_coerces_them(nvml: str, published: str) -> None:
    assert gpu_slices.coerce_semver(nvml) == published


@pytest.mark.parametrize(
    "text",
    [
        "",
        "v",
        "1.2.3.4",
        "1..2",
        " 1.0",
        "1.0\n",
        "1.2.3-01",
        "1.2.3-rc.01",
        "1.2.3-",
        "1.2.3+",
        "18446744073709551616",
        "1.2.3+" + "a" * 251,
    ],
)
def test_what_upstream_semver_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"version|pre-release|longer|2\^64"):
        gpu_slices.coerce_semver(text)


# Expected values as apimachinery marshals resource.NewQuantity(n, resource.BinarySI),
# checked against the Go library.
@pytest.mark.parametrize(
    ("amount", "quantity"),
    [
        (0, "0"),
        (1, "1"),
        (16, "16"),
        (999, "999"),
        (1000, "1k"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1025, "1025"),
        (2048000, "2000Ki"),
        (9856 * 1024 * 1024, "9856Mi"),
        (85899345920, "80Gi"),
        (85520809984, "81559Mi"),
        (2**40 * 3, "3Ti"),
        (2**50, "1Pi"),
        (2**62, "4Ei"),
        (2**63 - 1, "9223372036854775807"),
    ],
)
def test_capacities_are_quantities_as_kubernetes_marshals_binary_si(
    amount: int, quantity: str
) -> None:
    assert gpu_slices.format_binary_si_quantity(amount) == quantity


@pytest.mark.parametrize("amount", [-1, 2**63])
def test_a_quantity_outside_int64_or_below_zero_is_refused(amount: int) -> None:
    with pytest.raises(ValueError, match=r"0 to 2\^63-1"):
        gpu_slices.format_binary_si_quantity(amount)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("0000:1b:00.0", "0000:1b:00.0"),
        ("00000008:01:00.0", "0008:01:00.0"),
        ("0001:AB:1F.7", "0001:ab:1f.7"),
    ],
)
def test_pci_bus_ids_are_normalized_as_go_nvlib_does(text: str, normalized: str) -> None:
    assert gpu_slices.normalize_pci_bus_id(text) == normalized


@pytest.mark.parametrize("text", ["", "1b:00.0", "00010000:1b:00.0", "0000:1b:00", "0000:1g:00.0"])
def test_a_pci_bus_id_deviceattribute_would_refuse_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        gpu_slices.normalize_pci_bus_id(text)


# ----------------------------------------------------------------- bad discovery data


def _single(gpu: devices.GpuInfo) -> devices.GpuInventory:
    return devices.GpuInventory(gpus=(gpu,))


def test_a_malformed_version_is_refused_naming_the_device_and_field() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, driver_version="580.65.06-beta.01")
    with pytest.raises(errors.PermanentError, match=r"gpu-3: driverVersion: .*leading zero"):
        _plan(_single(gpu))


def test_a_malformed_pci_bus_id_is_refused_naming_the_device() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, pci_bus_id="1b:00.0")
    with pytest.raises(errors.PermanentError, match=r"gpu-3: pciBusID: .*0000:1b:00.0"):
        _plan(_single(gpu))


def test_a_vfio_function_with_a_malformed_pci_bus_id_is_refused() -> None:
    inventory = devices.GpuInventory(vfios=(dataclasses.replace(GOLDEN_VFIO, pci_bus_id="x"),))
    with pytest.raises(errors.PermanentError, match="gpu-vfio-5: pciBusID"):
        _plan(inventory, passthrough=True)


def test_an_attribute_longer_than_the_api_allows_is_refused() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, product_name="N" * 65)
    with pytest.raises(errors.PermanentError, match=r"gpu-3: productName: .*64 characters"):
        _plan(_single(gpu))


def test_a_version_longer_than_the_api_allows_is_refused() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, driver_version="580.65.6+" + "b" * 60)
    with pytest.raises(errors.PermanentError, match=r"gpu-3: driverVersion: .*64 characters"):
        _plan(_single(gpu))


def test_a_negative_capacity_is_refused_naming_the_device_and_capacity() -> None:
    gpu = dataclasses.replace(GOLDEN_GPU, memory_bytes=-1)
    with pytest.raises(errors.PermanentError, match="gpu-3: capacity memory: -1"):
        _plan(_single(gpu))


def test_a_mig_device_whose_parent_was_not_discovered_is_refused() -> None:
    inventory = devices.GpuInventory(migs=(GOLDEN_MIG,))
    with pytest.raises(errors.PermanentError, match=r"parent GPU minor 3.*did not report"):
        _plan(inventory)


def test_a_mig_device_naming_another_parent_uuid_is_refused() -> None:
    parent = dataclasses.replace(GOLDEN_GPU, mig_enabled=True, uuid="GPU-other")
    inventory = devices.GpuInventory(gpus=(parent,), migs=(GOLDEN_MIG,))
    with pytest.raises(errors.PermanentError, match="but GPU gpu-3 is GPU-other"):
        _plan(inventory)


def test_a_mig_device_on_a_gpu_not_in_mig_mode_is_refused() -> None:
    inventory = devices.GpuInventory(gpus=(GOLDEN_GPU,), migs=(GOLDEN_MIG,))
    with pytest.raises(errors.PermanentError, match="not in MIG mode"):
        _plan(inventory)


def test_two_gpus_with_one_minor_are_refused() -> None:
    twin = dataclasses.replace(GOLDEN_GPU, uuid="GPU-twin", pci_bus_id="0000:2a:00.0")
    with pytest.raises(errors.PermanentError, match="both named 'gpu-3'"):
        _plan(devices.GpuInventory(gpus=(GOLDEN_GPU, twin)))


def test_a_mig_profile_that_makes_an_invalid_device_name_is_refused() -> None:
    parent = dataclasses.replace(GOLDEN_GPU, mig_enabled=True)
    mig = dataclasses.replace(GOLDEN_MIG, profile="1g.10gb" + "x" * 60)
    with pytest.raises(errors.PermanentError, match="not a DNS label"):
        _plan(devices.GpuInventory(gpus=(parent,), migs=(mig,)))
