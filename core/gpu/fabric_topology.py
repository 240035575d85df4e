"""Which Fabric Manager partitions a GPU claim forms, and whether the driver activates them.

A claim's GpuConfig may carry the seed's `fabricTopologyConfig` (gate FabricTopologySupport);
without one a claim on an NVSwitch node is treated as Auto on BareMetal, upstream's behaviour
under FabricManagerPartitioning: the partition whose GPUs are exactly the claim's. The
prepare planner asks `plan_partitions` once the allocation is known, before it writes
anything, and activates `FabricPlan.partition_ids` only when `driver_activates` says so.

Strategies: Auto (the one partition matching the allocation; with partitionSize, the
allocation must also have that many GPUs), Manual (the listed partitions, which together must
be exactly the allocated GPUs), Disabled (no partitioning). Virtualization models, as Fabric
Manager's guide names them: BareMetal and SharedNVSwitch (the driver activates: on bare metal
for the pod, as the service VM for a guest), FullPassthrough (the guest's own Fabric Manager
activates; the allocation is still checked to be a partition, since a guest handed GPUs that
form none cannot use NVLink), VGPU (no partitioning at all).

NB: minBandwidth and maxLatency are carried into the plan for the log but judge nothing: the
partition list Fabric Manager gives this driver (`fm_partitions.Partition`) has no bandwidth
or latency, so there is no honest figure to compare them with (docs/gpus.md).

Pure: values in, values out; errors are PermanentErrors whose message says what would fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from core import errors
from core.gpu import configs, fm_partitions


@dataclasses.dataclass(frozen=True, kw_only=True)
class FabricPlan:
    """What a claim's GPUs mean to Fabric Manager."""

    # The claim's partitions, checked against Fabric Manager's table, sorted; empty when the
    # claim is not partitioned (Disabled, VGPU).
    partition_ids: tuple[int, ...] = ()
    # Whether the driver activates them at prepare (and deactivates them at unprepare).
    driver_activates: bool = False
    strategy: configs.FabricStrategy = configs.FabricStrategy.AUTO
    virtualization_model: configs.VirtualizationModel = configs.VirtualizationModel.BARE_METAL
    # Recorded from the config for the log; not enforced (module docstring).
    min_bandwidth: float | None = None
    max_latency: float | None = None

    @property
    def activates(self) -> tuple[int, ...]:
        """The partition ids the driver activates: `partition_ids`, or none."""
        return self.partition_ids if self.driver_activates else ()


_DEFAULT = configs.FabricTopologyConfig()
_ACTIVATING = frozenset({
    configs.VirtualizationModel.BARE_METAL, configs.VirtualizationModel.SHARED_NVSWITCH,
})


def plan_partitions(
    topology: configs.FabricTopologyConfig | None,
    *,
    module_ids: frozenset[int],
    partitions: Sequence[fm_partitions.Partition],
) -> FabricPlan:
    """The plan for a claim allocated the GPUs with `module_ids`, given Fabric Manager's
    `partitions`. `topology` None means Auto on BareMetal. No `module_ids` (a claim of MIG
    devices only: no NVLink endpoint of its own) plans nothing.

    Raises PermanentError when the allocation does not fit: no partition is exactly the
    claim's GPUs (Auto), the GPU count is not partitionSize (Auto with partitionSize), or the
    listed partitions are unknown, of another size, overlap, or do not cover exactly the
    claim's GPUs (Manual); each message names what would fit. Deterministic.
    """
    config = _DEFAULT if topology is None else topology
    recorded = FabricPlan(
        strategy=config.strategy,
        virtualization_model=config.virtualization_model,
        min_bandwidth=config.min_bandwidth,
        max_latency=config.max_latency,
    )
    if (
        not module_ids
        or config.strategy is configs.FabricStrategy.DISABLED
        or config.virtualization_model is configs.VirtualizationModel.VGPU
    ):
        return recorded
    checked = fm_partitions.check_partitions(partitions)
    if config.strategy is configs.FabricStrategy.MANUAL:
        chosen = _manual(config, module_ids=module_ids, partitions=checked)
    else:
        chosen = (_auto(config, module_ids=module_ids, partitions=checked),)
    return dataclasses.replace(
        recorded,
        partition_ids=tuple(sorted(p.partition_id for p in chosen)),
        driver_activates=config.virtualization_model in _ACTIVATING,
    )


def _auto(
    config: configs.FabricTopologyConfig,
    *,
    module_ids: frozenset[int],
    partitions: tuple[fm_partitions.Partition, ...],
) -> fm_partitions.Partition:
    size = config.partition_size
    if size is not None and len(module_ids) != size:
        raise errors.PermanentError(
            f"fabricTopologyConfig.partitionSize is {size} but the claim was allocated "
            f"{len(module_ids)} GPU(s) (modules {sorted(module_ids)}): request exactly {size} "
            "GPUs in the requests this config applies to, or change partitionSize"
        )
    return fm_partitions.partition_for(module_ids, partitions)


def _manual(
    config: configs.FabricTopologyConfig,
    *,
    module_ids: frozenset[int],
    partitions: tuple[fm_partitions.Partition, ...],
) -> tuple[fm_partitions.Partition, ...]:
    by_id = {p.partition_id: p for p in partitions}
    unknown = [i for i in config.partition_ids if i not in by_id]
    if unknown:
        raise errors.PermanentError(
            f"fabricTopologyConfig.partitionIDs {unknown} are not partitions of this node's "
            f"Fabric Manager; its partitions are {_listing(partitions)}"
        )
    listed = tuple(by_id[i] for i in config.partition_ids)
    size = config.partition_size
    wrong_size = [p.partition_id for p in listed if size is not None and p.size != size]
    if wrong_size:
        raise errors.PermanentError(
            f"fabricTopologyConfig.partitionIDs {wrong_size} are not {size}-GPU partitions "
            f"(partitionSize is {size}); the {size}-GPU partitions here are "
            f"{_listing(p for p in partitions if p.size == size)}"
        )
    seen: dict[int, int] = {}
    for partition in listed:
        for module_id in sorted(partition.module_ids):
            other = seen.setdefault(module_id, partition.partition_id)
            if other != partition.partition_id:
                raise errors.PermanentError(
                    f"fabricTopologyConfig.partitionIDs {other} and {partition.partition_id} "
                    f"share GPU module {module_id}; Fabric Manager cannot activate both: list "
                    "partitions that share no GPU"
                )
    covered = frozenset(seen)
    if covered != module_ids:
        raise errors.PermanentError(
            f"fabricTopologyConfig.partitionIDs {list(config.partition_ids)} hold GPU modules "
            f"{sorted(covered)} but the claim was allocated modules {sorted(module_ids)}"
            f"{_would_fit(module_ids, partitions)}"
        )
    return listed


def _would_fit(
    module_ids: frozenset[int], partitions: tuple[fm_partitions.Partition, ...]
) -> str:
    exact = [p for p in partitions if p.module_ids == module_ids]
    if exact:
        return f"; partition {_describe(exact[0])} is exactly the allocation: list it"
    return (
        "; no partition is exactly the allocation: constrain the claim's requests to the "
        "listed partitions (the admission webhook adds that selector), or use strategy Auto"
    )


def _listing(partitions: Iterable[fm_partitions.Partition]) -> str:
    shown = [_describe(p) for p in partitions]
    return ", ".join(shown) if shown else "none"


def _describe(partition: fm_partitions.Partition) -> str:
    return (
        f"{partition.partition_id} ({partition.size} GPUs: modules "
        f"{sorted(partition.module_ids)})"
    )
