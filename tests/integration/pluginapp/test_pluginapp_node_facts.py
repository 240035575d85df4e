"""Node facts at plugin startup: channel major, clique, and the CrashOnNVLinkFabricErrors gate."""

from __future__ import annotations

import pytest

from adapters import nvml
from adapters.nvml import simulated
from apps.kubeletplugin import wiring
from core import errors, models


class DisagreeingGPUs:
    """A DeviceInventory whose two GPUs report different NVLink cliques."""

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        return tuple(
            models.FabricRecord(
                gpu_uuid=f"GPU-{i}", state=models.FabricState.COMPLETED,
                cluster_uuid=bytes([i + 1]) * 16, clique_id=i + 1,
            )
            for i in range(2)
        )


def _files() -> simulated.SimulatedNodeFiles:
    return simulated.SimulatedNodeFiles(node_name="gb200-rack1-node01")


def test_fabric_error_stops_the_plugin_by_default() -> None:
    with pytest.raises(errors.PermanentError, match="disagree about their NVLink clique"):
        wiring.read_node_facts(node_name="n", files=_files(), inventory=DisagreeingGPUs())


def test_fabric_error_leaves_the_node_without_clique_when_the_gate_is_off() -> None:
    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=DisagreeingGPUs(), crash_on_fabric_errors=False
    )
    assert facts.clique_id == "" and facts.channel_major == 242


def _forming() -> simulated.SimulatedInventory:
    return simulated.SimulatedInventory(
        profile="gb200-nvl72", node_name="gb200-rack1-node01",
        fabric_state=models.FabricState.IN_PROGRESS,
    )


def test_fabric_still_forming_stops_the_plugin_when_the_gate_is_on() -> None:
    slept: list[float] = []
    with pytest.raises(errors.PermanentError, match="CrashOnNVLinkFabricErrors"):
        wiring.read_node_facts(
            node_name="n", files=_files(), inventory=_forming(), sleep=slept.append
        )
    assert slept == []  # upstream crashes; it does not wait


def test_fabric_still_forming_leaves_no_clique_when_the_gate_is_off() -> None:
    slept: list[float] = []
    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=_forming(), sleep=slept.append,
        crash_on_fabric_errors=False,
    )
    assert facts.clique_id == "" and slept == []


class FailingProbe:
    """A DeviceInventory whose NVML probe fails `failures` times, then reports a healthy fabric."""

    def __init__(self, error: Exception, *, failures: int) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return simulated.SimulatedInventory(
            profile="gb200-nvl72", node_name="gb200-rack1-node01"
        ).fabric_records()


def _timeout() -> nvml.NvmlProbeFailed:
    return nvml.NvmlProbeFailed("NVML probe did not answer within 30s and was killed")


def test_a_one_off_nvml_probe_failure_is_retried_not_crashed_on() -> None:
    slept: list[float] = []
    inventory = FailingProbe(_timeout(), failures=1)
    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=inventory, sleep=slept.append
    )
    assert facts.clique_id and inventory.calls == 2 and len(slept) == 1


def test_an_nvml_probe_that_keeps_failing_stops_the_plugin_after_bounded_retries() -> None:
    inventory = FailingProbe(_timeout(), failures=100)
    with pytest.raises(nvml.NvmlProbeFailed, match="did not answer"):
        wiring.read_node_facts(
            node_name="n", files=_files(), inventory=inventory, sleep=lambda _s: None
        )
    assert inventory.calls == wiring.NVML_PROBE_ATTEMPTS


def test_an_nvml_probe_that_keeps_failing_leaves_no_clique_when_the_gate_is_off() -> None:
    inventory = FailingProbe(_timeout(), failures=100)
    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=inventory, sleep=lambda _s: None,
        crash_on_fabric_errors=False,
    )
    assert facts.clique_id == "" and inventory.calls == wiring.NVML_PROBE_ATTEMPTS


def test_missing_nvml_stops_the_plugin_with_its_message_by_default() -> None:
    inventory = FailingProbe(nvml.NvmlUnavailable("NVML is not available on this node"),
                             failures=100)
    with pytest.raises(nvml.NvmlUnavailable, match="not available"):
        wiring.read_node_facts(
            node_name="n", files=_files(), inventory=inventory, sleep=lambda _s: None
        )
    assert inventory.calls == 1  # no NVML at all is not retried


def test_missing_nvml_leaves_no_clique_when_the_gate_is_off() -> None:
    inventory = FailingProbe(nvml.NvmlUnavailable("NVML is not available on this node"),
                             failures=100)
    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=inventory, sleep=lambda _s: None,
        crash_on_fabric_errors=False,
    )
    assert facts.clique_id == ""
