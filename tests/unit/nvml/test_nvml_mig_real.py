"""The real-NVML MIG partitioner's process handling, with stand-in children (no GPU here).

Covers: a created device read back through the probe; destroy's answer; NVML refusals as
PermanentError; the child crashing, hanging, printing nonsense or not starting as
NvmlMigFailed; a create the probe does not list; migctl's own argument checks and its answer
on a host without NVML.
"""

from __future__ import annotations

import sys

import pytest

from adapters import nvml
from adapters.nvml import migctl
from core import errors, ports
from core.gpu import devices

_PLACEMENT = devices.MigPlacement(parent_minor=0, gi_profile_id=9, placement_start=4)


class _Probe(nvml.NvmlInventory):
    """An inventory whose probe answers from a simulated node (the MIG device already there)."""

    def __init__(self, inventory: devices.GpuInventory) -> None:
        super().__init__()
        self._fixed = inventory

    def gpu_inventory(self) -> devices.GpuInventory:
        return self._fixed


def _child(script: str, **kwargs: float) -> nvml.NvmlMigPartitioner:
    inventory = nvml.simulated_gpus("a100-mig").gpu_inventory()
    return nvml.NvmlMigPartitioner(
        inventory=_Probe(inventory), command=(sys.executable, "-c", script), **kwargs
    )


def test_create_reads_the_new_device_back_through_the_probe() -> None:
    partitioner: ports.MigPartitioner = _child('print(\'{"ok": true, "changed": true}\')')
    created = partitioner.create_mig_device(_PLACEMENT)
    assert created.name == "gpu-0-mig-3g20gb-9-4"


def test_create_the_probe_does_not_list_fails() -> None:
    partitioner = _child('print(\'{"ok": true, "changed": true}\')')
    missing = devices.MigPlacement(parent_minor=1, gi_profile_id=9, placement_start=0)
    with pytest.raises(nvml.NvmlMigFailed, match="the probe does not list it"):
        partitioner.create_mig_device(missing)


@pytest.mark.parametrize(("changed", "expected"), [("true", True), ("false", False)])
def test_destroy_says_whether_there_was_a_device(changed: str, expected: bool) -> None:
    partitioner = _child(f'print(\'{{"ok": true, "changed": {changed}}}\')')
    assert partitioner.destroy_mig_device(_PLACEMENT) is expected


def test_an_nvml_refusal_is_permanent() -> None:
    partitioner = _child('print(\'{"ok": false, "error": "Insufficient Resources"}\')')
    with pytest.raises(errors.PermanentError, match=r"refused to create.*Insufficient Resources"):
        partitioner.create_mig_device(_PLACEMENT)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("import os; os.abort()", "exited with status -6 and no answer"),
        ("print('not json')", "exited with status 0 and no answer"),
        ("import sys; sys.exit(3)", "exited with status 3"),
    ],
)
def test_a_broken_child_is_reported(script: str, message: str) -> None:
    with pytest.raises(nvml.NvmlMigFailed, match=message):
        _child(script).destroy_mig_device(_PLACEMENT)


def test_a_hanging_child_is_killed() -> None:
    partitioner = _child("import time; time.sleep(30)", timeout_s=0.5)
    with pytest.raises(nvml.NvmlMigFailed, match=r"did not finish within 0.5s"):
        partitioner.destroy_mig_device(_PLACEMENT)


def test_a_child_that_cannot_start_is_reported() -> None:
    partitioner = nvml.NvmlMigPartitioner(
        inventory=nvml.NvmlInventory(), command=("/nonexistent/migctl",)
    )
    with pytest.raises(nvml.NvmlMigFailed, match="cannot start MIG destroy"):
        partitioner.destroy_mig_device(_PLACEMENT)


@pytest.mark.parametrize("argv", [[], ["grow", "0", "9", "4"], ["create", "0", "x", "4"]])
def test_migctl_refuses_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert migctl.main(argv) == 2
    assert "usage: migctl" in capsys.readouterr().err


def test_migctl_on_a_host_without_nvml_answers_with_the_reason() -> None:
    partitioner = nvml.NvmlMigPartitioner(inventory=nvml.NvmlInventory())
    with pytest.raises(errors.PermanentError, match=r"refused to destroy.*(nvmlInit|pynvml)"):
        partitioner.destroy_mig_device(_PLACEMENT)
