"""VfioDeviceConfig's IOMMU backend honoured at prepare, as upstream.

Covers: `LegacyOnly` (the default) gives the function's group node `/dev/vfio/<group>`;
`PreferIommuFD` on a host with iommufd gives its iommufd node `/dev/vfio/devices/vfio<N>`,
which exists only once the function is bound: the spec is then written after the bind, from
the node the binder finds (a claim of functions alone still gets no driver files, and the
API device where asked); `PreferIommuFD` on a host without iommufd falls back to the group
node; a bound function without an iommufd node fails the step, saying to bind it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gpu_prep_fixtures as f
import pytest

from core import errors, models
from core.gpu import actions, devices, dynamic_mig
from core.gpu import preparing as p

NODE = devices.DeviceNode(path="/dev/vfio/devices/vfio3", major=234, minor=3)
BUS_ID = f.vfio(0).pci_bus_id


def vfio_config(policy: str, *, api: bool = False) -> models.RawOpaqueConfig:
    return f.config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
                     "iommu": {"backendPolicy": policy, "enableAPIDevice": api}})


def plan(policy: str, *, iommufd: bool, api: bool = False) -> p.GpuClaimOutcome:
    inventory = dataclasses.replace(f.INVENTORY, vfios=(f.vfio(0, iommu_fd_enabled=iommufd),))
    outcome = p.plan_gpu_prepare(
        f.claim("gpu-vfio-0", configs=[vfio_config(policy, api=api)]),
        checkpoint=p.empty_gpu_checkpoint(boot_id="boot-1"), inventory=inventory,
        files=f.FILES, gates=f.ALL_GATES, now=100.0, vfio_nodes={},
    )
    assert outcome.error is None, outcome.error
    return outcome


def kinds(outcome: p.GpuClaimOutcome) -> list[str]:
    return [type(s).__name__ for s in outcome.steps]


def rendered(step: actions.WriteMigCDISpec) -> dict[str, Any]:
    return f.check_cdi(dynamic_mig.created_spec(step, {}, iommufd_nodes=lambda bus: (NODE,)))


@pytest.mark.parametrize(("policy", "iommufd"), [
    ("LegacyOnly", True), ("LegacyOnly", False), ("PreferIommuFD", False),
])
def test_the_group_node_serves_unless_iommufd_is_preferred_and_there(
    policy: str, iommufd: bool
) -> None:
    outcome = plan(policy, iommufd=iommufd)
    assert kinds(outcome) == ["WriteCheckpoint", "BindVfio", "WriteCDISpec", "WriteCheckpoint"]
    [spec] = [s.spec for s in outcome.steps if isinstance(s, models.WriteCDISpec)]
    assert spec["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/vfio/30"}]}


def test_prefer_iommufd_on_an_iommufd_host_gives_the_iommufd_node_after_the_bind() -> None:
    outcome = plan("PreferIommuFD", iommufd=True, api=True)
    assert kinds(outcome) == [
        "WriteCheckpoint", "BindVfio", "WriteMigCDISpec", "WriteCheckpoint",
    ]
    step = outcome.steps[2]
    assert isinstance(step, actions.WriteMigCDISpec)
    assert step.cdi_devices == (actions.IommufdFunction(name="gpu-vfio-0", pci_bus_id=BUS_ID),)
    spec = rendered(step)
    uid = outcome.devices[0].cdi_device_ids[0].split("=")[1].removesuffix("-gpu-vfio-0")
    assert spec["devices"] == [{"name": f"{uid}-gpu-vfio-0", "containerEdits": {"deviceNodes": [
        {"path": "/dev/vfio/devices/vfio3", "type": "c", "major": 234, "minor": 3,
         "fileMode": 0o666},
    ]}}]
    # A VM's GPU: no host driver files; the API device it asked for is iommufd's.
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": [{"path": "/dev/iommu"}],
    }


def test_a_function_without_an_iommufd_node_fails_the_spec_step() -> None:
    step = plan("PreferIommuFD", iommufd=True).steps[2]
    assert isinstance(step, actions.WriteMigCDISpec)

    def missing(bus_id: str) -> tuple[devices.DeviceNode, ...]:
        raise errors.RetryableError(f"no iommufd device for GPU {bus_id}; bind it first")

    with pytest.raises(errors.RetryableError, match="bind it first"):
        dynamic_mig.created_spec(step, {}, iommufd_nodes=missing)
    with pytest.raises(TypeError, match="no vfio nodes are wired"):
        dynamic_mig.created_spec(step, {})
