"""Node facts at plugin startup: channel major, clique, and the CrashOnNVLinkFabricErrors gate."""

from __future__ import annotations

import pytest

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


def test_fabric_still_forming_is_waited_for_not_crashed_on() -> None:
    forming = simulated.SimulatedInventory(
        profile="gb200-nvl72", node_name="gb200-rack1-node01",
        fabric_state=models.FabricState.IN_PROGRESS,
    )
    slept: list[float] = []

    class EventuallyReady:
        def fabric_records(self) -> tuple[models.FabricRecord, ...]:
            source = forming if len(slept) < 3 else simulated.SimulatedInventory(
                profile="gb200-nvl72", node_name="gb200-rack1-node01")
            return source.fabric_records()

    facts = wiring.read_node_facts(
        node_name="n", files=_files(), inventory=EventuallyReady(), sleep=slept.append
    )
    assert len(slept) == 3 and facts.clique_id
