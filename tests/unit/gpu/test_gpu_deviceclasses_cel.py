"""The chart's GPU DeviceClasses, run by the real CEL evaluator against what the plugin publishes.

The chart is rendered by the real Helm engine with the GPU half on; each DeviceClass's CEL
selectors run (cel-python) against the devices `core.gpu.slices.plan_gpu_devices` publishes for
the simulated nodes (`adapters.nvml` profiles hgx-h100, a100-mig, gb200, plus VFIO functions
under PassthroughSupport) and against the ComputeDomain half's devices, shaped as the DRA
scheduler builds the CEL `device` variable. Each class must pick exactly its kind of device.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping
from typing import Any

import celpy
import celpy.adapter
import helm_python
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from adapters import nvml
from core import gates, models, names
from core.computedomain import modes, slice_devices
from core.gpu import devices
from core.gpu import slices as gpu_slices

CHART_DIR = pathlib.Path(__file__).resolve().parents[3] / "helm" / "nvidia-dra-driver"
GPU_DRIVER = gpu_slices.DRIVER_NAME
PASSTHROUGH = gates.resolve_gates({gates.PASSTHROUGH_SUPPORT: True})
NO_PASSTHROUGH = gates.resolve_gates({})
PROFILES = ("hgx-h100", "a100-mig", "gb200")

# (driver, device) pairs: what one node publishes across both halves.
Published = tuple[tuple[str, Mapping[str, Any]], ...]


def _render_device_classes(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> DeviceClass of the chart rendered with `values` (the real Helm engine)."""
    manifests = helm_python.Chart.load(str(CHART_DIR)).render(
        dict(values), name="cdd", namespace="nvidia-dra-driver", is_install=True, is_upgrade=False
    )
    classes: dict[str, dict[str, Any]] = {}
    for path, text in manifests.items():
        if path.endswith("/NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] == "DeviceClass":
                classes[doc["metadata"]["name"]] = doc
    return classes


ALL_CLASSES = _render_device_classes(
    {"resources": {"gpus": {"enabled": True}}, "featureGates": {"PassthroughSupport": True}}
)
GPU_CLASS, MIG_CLASS, VFIO_CLASS = "gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"
CLASS_FOR_TYPE = {
    devices.GPU_TYPE: GPU_CLASS, devices.MIG_TYPE: MIG_CLASS, devices.VFIO_TYPE: VFIO_CLASS,
}


def _device_variable(device: Mapping[str, Any], *, driver: str) -> Any:
    """The CEL `device` of a resource.k8s.io/v1 device, as the DRA scheduler builds it.

    attributes/capacity: domain -> name -> value; a bare key belongs to the driver's domain, a
    `domain/name` key (resource.kubernetes.io/pciBusID) to that domain; typed values unwrapped.
    """
    attributes: dict[str, dict[str, Any]] = {}
    for key, typed in device.get("attributes", {}).items():
        domain, _, attribute = key.rpartition("/")
        (value,) = typed.values()
        attributes.setdefault(domain or driver, {})[attribute] = value
    capacity: dict[str, dict[str, Any]] = {}
    for key, quantity in device.get("capacity", {}).items():
        domain, _, name = key.rpartition("/")
        capacity.setdefault(domain or driver, {})[name] = quantity["value"]
    variable = {"driver": driver, "attributes": attributes, "capacity": capacity}
    return celpy.adapter.json_to_cel(variable)


def _selects(device_class: Mapping[str, Any], driver: str, device: Mapping[str, Any]) -> bool:
    """Whether every selector of the class accepts the device; a CEL error fails the test
    (the scheduler would fail the claim, not skip the device)."""
    env = celpy.Environment()
    activation = {"device": _device_variable(device, driver=driver)}
    for selector in device_class["spec"]["selectors"]:
        result = env.program(env.compile(selector["cel"]["expression"])).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (
            f"{device_class['metadata']['name']} on {device['name']}: {result!r}"
        )
        if not result:
            return False
    return True


def _selected(class_name: str, published: Published) -> list[str]:
    device_class = ALL_CLASSES[class_name]
    return sorted(str(d["name"]) for driver, d in published if _selects(device_class, driver, d))


def _with_vfios(inventory: devices.GpuInventory) -> devices.GpuInventory:
    """The inventory plus one VFIO function per GPU, as sysfs shows them on a passthrough host."""
    vfios = tuple(
        devices.VfioDeviceInfo(
            index=gpu.minor,
            uuid=gpu.uuid,
            device_id="0x2330",
            vendor_id="0x10de",
            product_name=gpu.product_name,
            pci_bus_id=gpu.pci_bus_id,
            iommu_group=40 + gpu.minor,
            addressable_memory_bytes=gpu.memory_bytes,
            pcie_root=gpu.pcie_root,
            numa_node=gpu.numa_node,
            parent_minor=gpu.minor,
        )
        for gpu in inventory.gpus
    )
    return devices.GpuInventory(gpus=inventory.gpus, migs=inventory.migs, vfios=vfios)


def _compute_domain_devices() -> Published:
    """Every device the ComputeDomain half publishes in any mode (channel, daemon, slots)."""
    configs = (
        modes.resolve_driver_config(
            mode="driverManaged", isolation="", feature_gates={}, namespace="ns"
        ),
        modes.resolve_driver_config(
            mode="hostManaged", isolation="channel",
            feature_gates={"HostManagedIMEXDaemon": True}, namespace="ns",
        ),
    )
    return tuple(
        (names.DRIVER_NAME, device)
        for resolved in configs
        for device in slice_devices.plan_slice_devices(resolved.config)
    )


def _node(profile: str, gate_set: models.FeatureGates) -> Published:
    inventory = _with_vfios(nvml.simulated_gpus(profile).gpu_inventory())
    planned = gpu_slices.plan_gpu_devices(inventory, gates=gate_set)
    return tuple((GPU_DRIVER, device) for device in planned) + _compute_domain_devices()


def _names_of_type(published: Published, device_type: str) -> list[str]:
    return sorted(
        str(d["name"]) for driver, d in published
        if driver == GPU_DRIVER and d["attributes"]["type"] == {"string": device_type}
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_gpu_class_selects_exactly_the_full_gpus(profile: str) -> None:
    published = _node(profile, PASSTHROUGH)
    inventory = nvml.simulated_gpus(profile).gpu_inventory()
    expected = sorted(gpu.name for gpu in inventory.gpus if not gpu.mig_enabled)

    assert _selected(GPU_CLASS, published) == expected
    assert all(re.fullmatch(r"gpu-\d+", name) for name in expected)


@pytest.mark.parametrize("profile", PROFILES)
def test_mig_class_selects_exactly_the_mig_devices(profile: str) -> None:
    published = _node(profile, PASSTHROUGH)
    inventory = nvml.simulated_gpus(profile).gpu_inventory()

    assert _selected(MIG_CLASS, published) == sorted(mig.name for mig in inventory.migs)


@pytest.mark.parametrize("profile", PROFILES)
def test_vfio_class_selects_exactly_the_passthrough_functions(profile: str) -> None:
    published = _node(profile, PASSTHROUGH)

    selected = _selected(VFIO_CLASS, published)
    assert selected == _names_of_type(published, devices.VFIO_TYPE)
    assert selected and all(re.fullmatch(r"gpu-vfio-\d+", name) for name in selected)


def test_the_simulated_nodes_publish_every_kind_so_each_class_is_tested_on_real_output() -> None:
    published = tuple(d for profile in PROFILES for d in _node(profile, PASSTHROUGH))
    for device_type in CLASS_FOR_TYPE:
        assert _names_of_type(published, device_type), f"no {device_type} device published"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_published_gpu_device_is_selected_by_exactly_the_class_of_its_type(
    profile: str,
) -> None:
    for driver, device in _node(profile, PASSTHROUGH):
        selecting = {name for name, cls in ALL_CLASSES.items() if _selects(cls, driver, device)}
        if driver == GPU_DRIVER:
            (typed,) = device["attributes"]["type"].values()
            assert selecting == {CLASS_FOR_TYPE[typed]}, device["name"]
        else:
            # The ComputeDomain half's devices: none of the GPU classes takes them.
            assert not selecting & set(CLASS_FOR_TYPE.values()), device["name"]


def test_compute_domain_classes_select_no_gpu_device() -> None:
    gpu_devices = tuple(
        (driver, device)
        for profile in PROFILES
        for driver, device in _node(profile, PASSTHROUGH)
        if driver == GPU_DRIVER
    )
    cd_classes = [name for name in ALL_CLASSES if name not in CLASS_FOR_TYPE.values()]
    assert cd_classes  # both halves are on in ALL_CLASSES
    for name in cd_classes:
        assert _selected(name, gpu_devices) == []


def test_a_gpu_shaped_device_of_another_driver_is_selected_by_no_gpu_class() -> None:
    (_, gpu), *_ = _node("hgx-h100", NO_PASSTHROUGH)
    for name in CLASS_FOR_TYPE.values():
        assert not _selects(ALL_CLASSES[name], names.DRIVER_NAME, gpu)
        assert not _selects(ALL_CLASSES[name], "gpu.example.com", gpu)


def test_without_passthrough_support_neither_vfio_devices_nor_their_class_exist() -> None:
    published = _node("hgx-h100", NO_PASSTHROUGH)
    assert _names_of_type(published, devices.VFIO_TYPE) == []
    classes = _render_device_classes({"resources": {"gpus": {"enabled": True}}})
    assert VFIO_CLASS not in classes
    assert {GPU_CLASS, MIG_CLASS} <= set(classes)


def test_gpu_classes_are_absent_while_the_gpu_half_is_off() -> None:
    classes = _render_device_classes({"featureGates": {"PassthroughSupport": True}})
    assert not set(classes) & set(CLASS_FOR_TYPE.values())


_SEMVER = st.builds(
    "{}.{}.{}".format, st.integers(0, 999), st.integers(0, 99), st.integers(0, 99)
)
_TEXT = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40
)


@given(
    product_name=_TEXT,
    architecture=_TEXT,
    brand=_TEXT,
    versions=st.tuples(_SEMVER, _SEMVER, _SEMVER),
    minor=st.integers(0, 255),
    bus=st.integers(0, 255),
    numa_node=st.none() | st.integers(0, 7),
    memory=st.integers(0, 2**40),
)
def test_the_gpu_classes_look_only_at_driver_and_type_whatever_the_gpu_reports(
    product_name: str,
    architecture: str,
    brand: str,
    versions: tuple[str, str, str],
    minor: int,
    bus: int,
    numa_node: int | None,
    memory: int,
) -> None:
    gpu = devices.GpuInfo(
        minor=minor, index=minor, uuid=f"GPU-{minor:08x}-0000-0000-0000-000000000000",
        product_name=product_name, brand=brand, architecture=architecture,
        cuda_compute_capability=versions[0], driver_version=versions[1],
        cuda_driver_version=versions[2], pci_bus_id=f"0000:{bus:02x}:00.0",
        memory_bytes=memory, numa_node=numa_node,
    )
    device = gpu_slices.gpu_device(gpu)
    selecting = {
        name for name in CLASS_FOR_TYPE.values()
        if _selects(ALL_CLASSES[name], GPU_DRIVER, device)
    }
    assert selecting == {GPU_CLASS}
