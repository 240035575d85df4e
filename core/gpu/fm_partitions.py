"""Fabric Manager partitions (gate FabricManagerPartitioning): the model, HGX's table, matching.

On an NVSwitch system (HGX/DGX H100, H200, B200) GPUs talk over NVLink only inside an active
Fabric Manager partition, so a multi-GPU claim must get exactly the GPUs of one partition.
Upstream publishes, on every GPU, `gpuModuleID` (the GPU's physical module id on the
baseboard, 1-based, from NVML) and one `partition<size>` int per partition size holding the id
of the partition of that size the GPU belongs to; a claim constrained with `matchAttribute:
gpu.nvidia.com/partition<N>` then gets the GPUs of one N-GPU partition, and prepare activates
the partition whose module set is exactly the claim's.

Pure: values in, values out. Talking to Fabric Manager is `core.ports.FabricManager`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from core import errors

# Attribute names as upstream publishes them (deviceinfo.go, addFabricManagerAttributes).
MODULE_ID_ATTRIBUTE: Final = "gpuModuleID"
PARTITION_ATTRIBUTE_PREFIX: Final = "partition"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Partition:
    """One partition Fabric Manager supports: its id, its GPUs' module ids, whether active."""

    partition_id: int
    module_ids: frozenset[int]
    active: bool = False

    @property
    def size(self) -> int:
        """How many GPUs the partition holds."""
        return len(self.module_ids)


def _partition(partition_id: int, *module_ids: int) -> Partition:
    return Partition(partition_id=partition_id, module_ids=frozenset(module_ids))


# The default Shared NVSwitch partitions of an HGX H100 / H200 8-GPU baseboard, as Fabric
# Manager reports them (NVIDIA Fabric Manager User Guide, "Shared NVSwitch Virtualization
# Model", default partitions of DGX H100 and HGX H100; upstream's Fabric Manager tests use the
# same ids and module sets). Module ids are the GPUs' physical positions on the board
# (nvmlDeviceGetModuleId), 1 to 8; partition ids start at 1 on H100 (A100 boards start at 0).
# The 4-GPU halves are (1,2,5,6) and (3,4,7,8), the 2-GPU pairs (1,3), (2,4), (5,7), (6,8).
HGX_8GPU_PARTITIONS: Final[tuple[Partition, ...]] = (
    _partition(1, 1, 2, 3, 4, 5, 6, 7, 8),
    _partition(2, 1, 2, 5, 6),
    _partition(3, 3, 4, 7, 8),
    _partition(4, 1, 3),
    _partition(5, 2, 4),
    _partition(6, 5, 7),
    _partition(7, 6, 8),
    *(_partition(7 + module_id, module_id) for module_id in range(1, 9)),
)


def check_partitions(partitions: Iterable[Partition]) -> tuple[Partition, ...]:
    """`partitions` sorted by id; PermanentError where Fabric Manager reported something
    contradictory (an id twice, a partition without GPUs, a module id that is not positive,
    one GPU in two partitions of the same size, which would give it two `partition<N>`)."""
    checked = tuple(sorted(partitions, key=lambda p: p.partition_id))
    seen: dict[int, Partition] = {}
    by_size_and_module: dict[tuple[int, int], int] = {}
    for partition in checked:
        if partition.partition_id in seen:
            raise errors.PermanentError(
                f"Fabric Manager reported partition {partition.partition_id} twice; restart "
                "Fabric Manager (nv-fabricmanager) and then the plugin"
            )
        seen[partition.partition_id] = partition
        if not partition.module_ids:
            raise errors.PermanentError(
                f"Fabric Manager reported partition {partition.partition_id} without GPUs; "
                "check its partition list (fmpm -l)"
            )
        bad = sorted(m for m in partition.module_ids if m <= 0)
        if bad:
            raise errors.PermanentError(
                f"Fabric Manager partition {partition.partition_id} names GPU module ids "
                f"{bad}; module ids are positive (1-based board positions)"
            )
        for module_id in partition.module_ids:
            key = (partition.size, module_id)
            other = by_size_and_module.setdefault(key, partition.partition_id)
            if other != partition.partition_id:
                raise errors.PermanentError(
                    f"GPU module {module_id} is in two {partition.size}-GPU partitions "
                    f"({other} and {partition.partition_id}), so its "
                    f"{PARTITION_ATTRIBUTE_PREFIX}{partition.size} attribute would be "
                    "ambiguous; check Fabric Manager's partition list (fmpm -l)"
                )
    return checked


def published_attributes(
    module_id: int, partitions: Iterable[Partition]
) -> dict[str, int]:
    """What a GPU with `module_id` publishes: `gpuModuleID` and `partition<size>` = the id of
    the partition of that size holding it, for each size it is in (upstream's names and int
    values). PermanentError for a module id that is not positive or contradictory partitions.
    """
    if module_id <= 0:
        raise errors.PermanentError(
            f"GPU module id {module_id} is not a board position (1-based); NVML's "
            "nvmlDeviceGetModuleId reports positive ids on NVSwitch systems"
        )
    attributes = {MODULE_ID_ATTRIBUTE: module_id}
    for partition in check_partitions(partitions):
        if module_id in partition.module_ids:
            attributes[f"{PARTITION_ATTRIBUTE_PREFIX}{partition.size}"] = partition.partition_id
    return {key: attributes[key] for key in sorted(attributes)}


def partition_for(module_ids: Iterable[int], partitions: Iterable[Partition]) -> Partition:
    """The partition whose GPUs are exactly `module_ids` (a claim's GPUs).

    PermanentError when there is none (or no GPUs are given): the message names the
    partitions that hold all of the claim's GPUs (those that would fit, smallest first), so
    the user can widen the claim or constrain it with `matchAttribute` on `partition<N>`.
    """
    wanted = frozenset(module_ids)
    checked = check_partitions(partitions)
    if not wanted:
        raise errors.PermanentError(
            "no Fabric Manager partition for a claim without GPUs (no module ids given)"
        )
    for partition in checked:
        if partition.module_ids == wanted:
            return partition
    fitting = sorted(
        (p for p in checked if wanted <= p.module_ids), key=lambda p: (p.size, p.partition_id)
    )
    fits = (
        "; partitions holding all of them: " + ", ".join(_describe(p) for p in fitting)
        if fitting else "; no partition holds all of them"
    )
    sizes = sorted({p.size for p in checked})
    hint = (
        f"; constrain the claim with matchAttribute gpu.nvidia.com/{PARTITION_ATTRIBUTE_PREFIX}"
        f"<N> (sizes here: {', '.join(map(str, sizes))})" if sizes else ""
    )
    raise errors.PermanentError(
        f"GPU modules {sorted(wanted)} do not form a Fabric Manager partition{fits}"
        f"{hint}"
    )


def _describe(partition: Partition) -> str:
    state = ", active" if partition.active else ""
    return (
        f"{partition.partition_id} ({partition.size} GPUs: modules "
        f"{sorted(partition.module_ids)}{state})"
    )
