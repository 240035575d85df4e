"""The two halves as `apps.pluginkit.claim_half.ClaimHalf` implementations.

Covers: each half is checked statically against the interface with its own observation and
action types; the GPU half carries out its actions through core's executor and its ports and
logs each change as before; the ComputeDomain half has no device action to undo.
"""

from __future__ import annotations

import logging
from typing import Never

import pytest

from adapters.memory import cluster as memory_cluster
from apps.gpuplugin import driver as gpu_driver
from apps.gpuplugin import logged_ports
from apps.kubeletplugin import driver as cd_driver
from apps.pluginkit import claim_half
from core import models, names, ports
from core.computedomain import node_facts
from core.gpu import actions, configs, devices

HOST = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
    gates=models.FeatureGates(values={}),
)
NODE = node_facts.ImexNodeFacts(
    node_name=names.NodeName("node-a"), clique_id="", channel_major=0, boot_id="b"
)


class Ports:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: configs.TimeSliceInterval
    ) -> None:
        self.calls.append(("time_slice", gpu_uuids))

    def bind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("bind", pci_bus_id))

    def unbind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("unbind", pci_bus_id))


def _cd_half() -> cd_driver.ComputeDomainHalf:
    return cd_driver.ComputeDomainHalf(
        cluster=memory_cluster.InMemoryCluster(), config=HOST, host_imex_probe=None,
        domains=lambda: {},
    )


def _gpu_half(device_ports: Ports) -> gpu_driver.GpuHalf:
    return gpu_driver.GpuHalf(
        gates=models.FeatureGates(values={}), inventory=devices.GpuInventory,
        files=lambda: devices.DriverFiles(nvidia_major=195, caps_major=511),
        time_slicer=logged_ports.LoggedTimeSlicer(device_ports, node_name="node-a"),
        vfio=logged_ports.LoggedVfioBinder(device_ports, node_name="node-a"),
        vfio_nodes=lambda: {},
    )


def test_each_half_implements_the_interface_with_its_own_types() -> None:
    cd: claim_half.ClaimHalf[cd_driver.Observed, Never] = _cd_half()
    gpu: claim_half.ClaimHalf[None, actions.GpuAction] = _gpu_half(Ports())
    slicer: ports.TimeSlicer = logged_ports.LoggedTimeSlicer(Ports(), node_name="n")
    vfio: ports.VfioBinder = logged_ports.LoggedVfioBinder(Ports(), node_name="n")
    assert None not in (cd, gpu, slicer, vfio)


def test_the_gpu_half_applies_its_actions_through_its_ports_and_logs_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    device_ports = Ports()
    half = _gpu_half(device_ports)

    with caplog.at_level(logging.INFO):
        half.apply(actions.SetTimeSlice(
            gpu_uuids=("GPU-1", "GPU-2"), interval=configs.TimeSliceInterval.LONG
        ))
        half.apply(actions.BindVfio(pci_bus_id="0000:01:00.0"))
        half.apply(actions.UnbindVfio(pci_bus_id="0000:01:00.0"))

    assert device_ports.calls == [
        ("time_slice", ("GPU-1", "GPU-2")), ("bind", "0000:01:00.0"), ("unbind", "0000:01:00.0"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "event=time_slice_set node=node-a gpus=GPU-1,GPU-2 interval=Long",
        "event=vfio_bound node=node-a pci_bus_id=0000:01:00.0",
        "event=vfio_unbound node=node-a pci_bus_id=0000:01:00.0",
    ]


def test_the_compute_domain_half_has_nothing_of_its_own_to_undo() -> None:
    empty = _cd_half().empty_checkpoint(boot_id="b")
    done = (models.WriteCheckpoint(checkpoint=empty),)

    undo = _cd_half().plan_rollback(
        done, claim_uid=names.ClaimUID("aaaaaaaa-0000-4000-8000-000000000001"),
        rollback_to=empty,
    )

    assert undo == ()
