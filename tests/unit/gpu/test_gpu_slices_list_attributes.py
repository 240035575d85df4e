"""`numaNode` as a list under gate DRAListTypeAttributes, as upstream publishes it.

Covers: without the gate every device's `resource.kubernetes.io/numaNode` is `{"int": n}`;
with it, `{"ints": [n]}` on full GPUs, MIG devices and passthrough functions alike; a device
without a NUMA node gets none either way; nothing else changes.
"""

from __future__ import annotations

import gpu_prep_fixtures as f

from core import models
from core.gpu import devices
from core.gpu import slices as gpu_slices

NUMA = gpu_slices.NUMA_NODE_ATTRIBUTE
INVENTORY = devices.GpuInventory(
    gpus=(f.gpu(0, numa_node=1), f.gpu(1), f.gpu(3, numa_node=0, mig_enabled=True)),
    migs=(f.mig(3, 0, parent_uuid=f.gpu(3).uuid),),
    vfios=(f.vfio(0, numa_node=1),),
)
OFF = models.FeatureGates(values={"PassthroughSupport": True})
ON = models.FeatureGates(values={"PassthroughSupport": True, "DRAListTypeAttributes": True})


def numa(gates: models.FeatureGates) -> dict[str, object]:
    return {
        str(d["name"]): d["attributes"].get(NUMA)  # type: ignore[union-attr]
        for d in gpu_slices.plan_gpu_devices(INVENTORY, gates=gates)
    }


def test_without_the_gate_numa_node_is_an_int() -> None:
    assert numa(OFF) == {
        "gpu-0": {"int": 1}, "gpu-1": None, "gpu-3-mig-1g10gb-19-0": {"int": 0},
        "gpu-vfio-0": {"int": 1},
    }


def test_with_the_gate_numa_node_is_a_one_element_list_on_every_device() -> None:
    assert numa(ON) == {
        "gpu-0": {"ints": [1]}, "gpu-1": None, "gpu-3-mig-1g10gb-19-0": {"ints": [0]},
        "gpu-vfio-0": {"ints": [1]},
    }


def test_the_gate_changes_nothing_but_numa_node() -> None:
    def without_numa(gates: models.FeatureGates) -> list[models.JSONObject]:
        return [
            {**d, "attributes": {k: v for k, v in d["attributes"].items() if k != NUMA}}
            for d in gpu_slices.plan_gpu_devices(INVENTORY, gates=gates)
        ]

    assert without_numa(ON) == without_numa(OFF)
