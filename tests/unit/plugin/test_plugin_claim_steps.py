"""The claim executor (`core.executing.execute_claim_steps`, `execute_gpu_actions`) and the
rollback plan of an abandoned prepare (`core.abandoning`), against recording fakes.

Covers: each shared step goes to its port in plan order and every other step to the half's
device actuator; GPU actions reach the time-slicer and vfio ports, and an unwired port is a
wiring error; an abandoned prepare is undone only after a durable step, device changes first,
then the checkpoint, then the CDI spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Never

import pytest

from adapters.memory import cluster as memory_cluster
from core import abandoning, executing, models, names, ports
from core.computedomain import checkpoint_records as cd_records
from core.gpu import actions, configs

UID = names.ClaimUID("aaaaaaaa-0000-4000-8000-000000000001")
EMPTY = cd_records.empty(boot_id="b")


@dataclasses.dataclass(frozen=True)
class Reset:
    """A device action of a made-up half."""

    device: str


class Recorder:
    """Every port call in the order it came, as (port, what)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []


class RecordingCheckpoint:
    def __init__(self, into: Recorder) -> None:
        self._into = into

    def record(self, step: models.WriteCheckpoint) -> None:
        self._into.calls.append(("checkpoint", step.changed))


class RecordingCDI:
    def __init__(self, into: Recorder) -> None:
        self._into = into

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        self._into.calls.append(("cdi.write", claim_uid))

    def delete(self, claim_uid: names.ClaimUID) -> None:
        self._into.calls.append(("cdi.delete", claim_uid))

    def claim_uids(self) -> frozenset[names.ClaimUID]:
        return frozenset()

    def read(self, claim_uid: names.ClaimUID) -> Mapping[str, Any] | None:
        return None


class RecordingDevices:
    def __init__(self, into: Recorder) -> None:
        self._into = into

    def apply(self, action: Reset) -> None:
        self._into.calls.append(("device", action.device))


class RecordingGpuPorts:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: configs.TimeSliceInterval
    ) -> None:
        self.calls.append(("time_slice", (gpu_uuids, interval)))

    def bind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("bind", pci_bus_id))

    def unbind_vfio(self, pci_bus_id: str) -> None:
        self.calls.append(("unbind", pci_bus_id))


class NoDevices:
    def apply(self, action: Never) -> None:
        raise AssertionError(f"no device action expected, got {action!r}")


def test_the_fakes_implement_the_ports() -> None:
    into = Recorder()
    checkpoint: ports.CheckpointRecorder = RecordingCheckpoint(into)
    cdi: ports.CDIStore = RecordingCDI(into)
    devices: ports.DeviceActuator[Reset] = RecordingDevices(into)
    none: ports.DeviceActuator[Never] = NoDevices()
    gpu = RecordingGpuPorts()
    slicer: ports.TimeSlicer = gpu
    vfio: ports.VfioBinder = gpu
    assert None not in (checkpoint, cdi, devices, none, slicer, vfio)


def test_each_step_goes_to_its_port_in_plan_order() -> None:
    into = Recorder()
    cluster = memory_cluster.InMemoryCluster()
    steps: tuple[models.PluginAction | Reset, ...] = (
        models.WriteCheckpoint(checkpoint=EMPTY, changed=(UID,)),
        Reset(device="gpu-0"),
        models.WriteCDISpec(claim_uid=UID, spec={}),
        models.DeleteCDISpec(claim_uid=UID),
    )

    executing.execute_claim_steps(
        steps, checkpoint=RecordingCheckpoint(into), cdi=RecordingCDI(into), cluster=cluster,
        devices=RecordingDevices(into),
    )

    assert into.calls == [
        ("checkpoint", (UID,)), ("device", "gpu-0"), ("cdi.write", UID), ("cdi.delete", UID),
    ]


def test_a_plan_without_device_actions_runs_with_no_actuator_called() -> None:
    into = Recorder()
    steps = (models.WriteCheckpoint(checkpoint=EMPTY), models.DeleteCDISpec(claim_uid=UID))

    executing.execute_claim_steps(
        steps, checkpoint=RecordingCheckpoint(into), cdi=RecordingCDI(into),
        cluster=memory_cluster.InMemoryCluster(), devices=NoDevices(),
    )

    assert [port for port, _ in into.calls] == ["checkpoint", "cdi.delete"]


def test_gpu_actions_reach_their_ports() -> None:
    gpu = RecordingGpuPorts()
    long = configs.TimeSliceInterval.LONG

    executing.execute_gpu_actions(
        (
            actions.BindVfio(pci_bus_id="0000:01:00.0"),
            actions.SetTimeSlice(gpu_uuids=("GPU-1",), interval=long),
            actions.UnbindVfio(pci_bus_id="0000:01:00.0"),
        ),
        time_slicer=gpu, vfio=gpu,
    )

    assert gpu.calls == [
        ("bind", "0000:01:00.0"), ("time_slice", (("GPU-1",), long)), ("unbind", "0000:01:00.0"),
    ]


@pytest.mark.parametrize(
    "action",
    [
        actions.SetTimeSlice(gpu_uuids=("GPU-1",), interval=configs.TimeSliceInterval.LONG),
        actions.BindVfio(pci_bus_id="0000:01:00.0"),
        actions.UnbindVfio(pci_bus_id="0000:01:00.0"),
    ],
)
def test_a_gpu_action_without_its_port_wired_is_a_wiring_error(
    action: actions.GpuAction,
) -> None:
    with pytest.raises(TypeError, match=r"no .* is wired"):
        executing.execute_gpu_actions((action,), time_slicer=None, vfio=None)


@pytest.mark.parametrize(
    ("done", "durable"),
    [
        ((), False),
        ((Reset(device="gpu-0"),), False),
        ((models.WriteCheckpoint(checkpoint=EMPTY),), True),
        ((Reset(device="gpu-0"), models.WriteCDISpec(claim_uid=UID, spec={})), True),
    ],
)
def test_only_a_durable_step_makes_an_abandoned_prepare_need_undoing(
    done: tuple[object, ...], durable: bool
) -> None:
    assert abandoning.has_durable_step(done) is durable


def test_an_abandoned_prepare_is_undone_devices_first_then_entry_then_spec() -> None:
    steps = abandoning.plan_prepare_rollback(
        UID, rollback_to=EMPTY, device_undo=(Reset(device="gpu-0"),)
    )

    assert steps == (
        Reset(device="gpu-0"),
        models.WriteCheckpoint(checkpoint=EMPTY, changed=(UID,)),
        models.DeleteCDISpec(claim_uid=UID),
    )
    write = steps[1]
    assert isinstance(write, models.WriteCheckpoint) and write.changed == (UID,)
