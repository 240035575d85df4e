"""Properties of the published `gpu.nvidia.com` devices over generated node inventories, and
the slices of every simulated profile validated strictly against the Kubernetes OpenAPI schemas
(kubernetes-validate, as tests/integration/objects does for the ComputeDomain half's objects).

Covers: names unique and valid DRA device names; each device within the API's 32 attributes and
capacities; exactly the GPUs not in MIG mode, the MIG devices and (under the gate) the VFIO
functions are published; order independent of discovery order; schema-valid slices.
"""

from __future__ import annotations

import gpu_slices_inventories as inv
import hypothesis
import kubernetes_validate
import pytest
from hypothesis import strategies as st
from kubernetes_validate import utils as kv_utils

from core import gates, models
from core.gpu import devices
from core.gpu import slices as gpu_slices

# (profile, GI profile id, memory slices) as NVML names them on A100/H100/B200.
_MIG_PROFILES = (
    ("1g.10gb", 19, 1),
    ("1g.10gb+me", 20, 1),
    ("1g.20gb", 15, 2),
    ("2g.20gb", 14, 2),
    ("3g.40gb", 9, 4),
    ("4g.40gb", 5, 4),
    ("7g.80gb", 0, 8),
    ("1g.23gb", 19, 1),
    ("3g.90gb", 9, 4),
)


def _versions() -> list[str]:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    minors = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=key)
    return [v for v in minors if key(v) >= (1, 34)]


VERSIONS = _versions()


@st.composite
def inventories(draw: st.DrawFn) -> devices.GpuInventory:
    """Nodes of up to 8 GPUs, some in MIG mode with MIG devices, and VFIO functions."""
    minors = draw(st.lists(st.integers(0, 255), max_size=8, unique=True))
    buses = draw(st.lists(st.integers(1, 255), min_size=len(minors), max_size=8, unique=True))
    gpus = []
    migs = []
    for position, (minor, bus) in enumerate(zip(minors, buses, strict=False)):
        mig_enabled = draw(st.booleans())
        gpu = inv.h100_gpu(
            0,
            minor=minor,
            index=position,
            uuid=f"GPU-{minor:08x}-0000-0000-0000-000000000000",
            pci_bus_id=f"{draw(st.sampled_from(['00000000', '0000']))}:{bus:02X}:00.0",
            numa_node=draw(st.none() | st.integers(-1, 3)),
            pcie_root=draw(st.none() | st.just("pci0000:00")),
            addressing_mode=draw(st.sampled_from([None, "", "HMM", "ATS", "None"])),
            mig_enabled=mig_enabled,
        )
        gpus.append(gpu)
        if not mig_enabled:
            continue
        placements = draw(
            st.lists(
                st.tuples(st.sampled_from(_MIG_PROFILES), st.integers(0, 7)),
                max_size=7,
                unique_by=lambda item: (item[0][1], item[1]),
            )
        )
        for gi_id, ((profile, profile_id, size), start) in enumerate(placements):
            migs.append(
                devices.MigDeviceInfo(
                    uuid=f"MIG-{minor:04x}{gi_id:04x}-0000-0000-0000-000000000000",
                    profile=profile,
                    parent_uuid=gpu.uuid,
                    parent_minor=minor,
                    gi_profile_id=profile_id,
                    gi_id=gi_id,
                    ci_id=0,
                    placement_start=start,
                    placement_size=size,
                    memory_bytes=draw(st.integers(0, 2**40)),
                    multiprocessors=draw(st.integers(0, 132)),
                    copy_engines=draw(st.integers(0, 8)),
                )
            )
    vfios = [
        inv.vfio(index, pci_bus_id=f"0000:{bus:02x}:00.0", parent_minor=minor)
        for index, (minor, bus) in enumerate(zip(minors, buses, strict=False))
        if draw(st.booleans())
    ]
    return devices.GpuInventory(gpus=tuple(gpus), migs=tuple(migs), vfios=tuple(vfios))


def _gates(passthrough: bool) -> models.FeatureGates:
    return gates.resolve_gates({gates.PASSTHROUGH_SUPPORT: passthrough})


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(inventory=inventories(), passthrough=st.booleans())
def test_published_names_are_unique_valid_device_names(
    inventory: devices.GpuInventory, passthrough: bool
) -> None:
    planned = gpu_slices.plan_gpu_devices(inventory, gates=_gates(passthrough))
    published = [device["name"] for device in planned]
    assert len(set(published)) == len(published)
    assert all(gpu_slices.is_valid_device_name(name) for name in published)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(inventory=inventories(), passthrough=st.booleans())
def test_exactly_the_allocatable_devices_are_published(
    inventory: devices.GpuInventory, passthrough: bool
) -> None:
    planned = gpu_slices.plan_gpu_devices(inventory, gates=_gates(passthrough))
    by_type: dict[str, set[str]] = {}
    for device in planned:
        by_type.setdefault(device["attributes"]["type"]["string"], set()).add(device["name"])
    assert by_type.get("gpu", set()) == {g.name for g in inventory.gpus if not g.mig_enabled}
    assert by_type.get("mig", set()) == {m.name for m in inventory.migs}
    sliced = {m.parent_minor for m in inventory.migs}
    expected_vfio = {v.name for v in inventory.vfios if v.parent_minor not in sliced}
    assert by_type.get("vfio", set()) == (expected_vfio if passthrough else set())


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(inventory=inventories(), passthrough=st.booleans(), data=st.data())
def test_order_does_not_depend_on_discovery_order(
    inventory: devices.GpuInventory, passthrough: bool, data: st.DataObject
) -> None:
    shuffled = devices.GpuInventory(
        gpus=tuple(data.draw(st.permutations(inventory.gpus))),
        migs=tuple(data.draw(st.permutations(inventory.migs))),
        vfios=tuple(data.draw(st.permutations(inventory.vfios))),
    )
    gates_ = _gates(passthrough)
    assert gpu_slices.plan_gpu_devices(shuffled, gates=gates_) == gpu_slices.plan_gpu_devices(
        inventory, gates=gates_
    )


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(inventory=inventories(), passthrough=st.booleans())
def test_every_slice_validates_strictly_and_fits_the_api_limits(
    inventory: devices.GpuInventory, passthrough: bool
) -> None:
    built = gpu_slices.build_gpu_resource_slices(
        inventory, node_name="node-a", gates=_gates(passthrough), generation=1
    )
    for resource_slice in built:
        for device in resource_slice["spec"]["devices"]:
            # resource.k8s.io/v1: at most 32 attributes and capacities per device.
            assert len(device["attributes"]) + len(device["capacity"]) <= 32, device["name"]
        assert kubernetes_validate.validate(resource_slice, VERSIONS[0], strict=True)


def test_kubernetes_1_34_or_newer_schemas_are_available() -> None:
    assert "1.34" in VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("profile", sorted(inv.PROFILES))
def test_every_profile_slice_validates_strictly(profile: str, version: str) -> None:
    built = gpu_slices.build_gpu_resource_slices(
        inv.PROFILES[profile], node_name="node-a", gates=_gates(True), generation=1
    )
    for resource_slice in built:
        assert kubernetes_validate.validate(resource_slice, version, strict=True) == version


def test_strict_validation_refuses_a_v1beta1_style_device() -> None:
    """The check above has teeth: the v1beta1 `basic` wrapper is not part of v1."""
    built = gpu_slices.build_gpu_resource_slices(
        inv.HGX_H100, node_name="node-a", gates=_gates(False), generation=1
    )
    device = built[0]["spec"]["devices"][0]
    built[0]["spec"]["devices"][0] = {"name": device["name"], "basic": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(built[0], VERSIONS[0], strict=True)
