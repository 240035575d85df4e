"""Which Fabric Manager partitions a GPU claim activates, and which ones are free to deactivate.

Gate FabricManagerPartitioning, on a node with an NVSwitch fabric: GPUs of one claim reach each
other over NVLink only inside an active partition, so prepare activates the partition whose
module set equals the claim's GPUs (`plan_fabric_partitions`, the one decision; a claim's
`fabricTopologyConfig` changes it as `gpu.fabric_topology` says). The ids are recorded in the
claim's checkpoint record before the activation, so unprepare, rollback, the stale sweep
(`to_release`) and the start-up clean-up (`orphans`) know who owns an active partition: a
partition is deactivated only when no claim that still holds GPUs records it, and one active
that no claim records at start is left over from a crash and deactivated.

As upstream: full GPUs and VFIO passthrough functions (their GPU) count, MIG devices do not
(a MIG device is no NVLink endpoint of its own). Admin-access results count neither: such a
claim watches the GPU and changes nothing on it (see `gpu.overlap`).

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from core import checkpoint as checkpoints
from core import errors, names
from core.gpu import checkpoint_records as records
from core.gpu import configs, devices, fabric_topology, fm_partitions

_WHOLE_GPU_KINDS = frozenset({devices.GPU_TYPE, devices.VFIO_TYPE})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimGpu:
    """A GPU a claim gets whole (a full GPU, or the GPU of a VFIO function)."""

    # The allocated device (`gpu-<minor>`, `gpu-vfio-<index>`), for messages.
    device: str
    # Its board position (`GpuInfo.module_id`); None where discovery did not see one.
    module_id: int | None


def plan_fabric_partitions(
    gpus: Sequence[ClaimGpu],
    *,
    partitions: Sequence[fm_partitions.Partition],
    claim: str,
    topology: configs.FabricTopologyConfig | None = None,
) -> tuple[int, ...]:
    """The ids of the partitions the driver activates for a claim of `gpus` (sorted).

    No GPU (MIG devices only, or admin access only): none. Otherwise as
    `fabric_topology.plan_partitions` decides for the claim's `topology` (None: Auto on
    BareMetal, the one partition whose module set is exactly the GPUs'); PermanentError,
    naming `claim`, where the allocation does not fit or a GPU's module id is unknown.
    """
    if not gpus:
        return ()
    unknown = sorted({g.device for g in gpus if not g.module_id})
    if unknown:
        raise errors.PermanentError(
            f"claim {claim}: Fabric Manager partitioning is on, but GPU(s) {', '.join(unknown)} "
            "have no module id (NVML's nvmlDeviceGetModuleId), so no partition can be matched; "
            "check that the GPU plugin sees the GPUs through NVML, or turn gate "
            "FabricManagerPartitioning off on this node"
        )
    modules = frozenset(g.module_id for g in gpus if g.module_id)
    try:
        plan = fabric_topology.plan_partitions(
            topology, module_ids=modules, partitions=partitions
        )
    except errors.PermanentError as err:
        raise errors.PermanentError(f"claim {claim}: {err.message}") from err
    return tuple(sorted(plan.activates))


def owned(
    checkpoint: records.Checkpoint, *, except_uid: names.ClaimUID | None = None
) -> frozenset[int]:
    """The partition ids recorded by every claim that holds GPUs (PrepareStarted or
    PrepareCompleted), but `except_uid`."""
    return frozenset(
        partition_id
        for uid, entry in checkpoint.entries.items()
        if uid != except_uid and entry.state in checkpoints.HOLDING_STATES
        for partition_id in entry.record.fabric_partitions
    )


def to_release(
    recorded: Iterable[int], *, claim_uid: names.ClaimUID, after: records.Checkpoint
) -> tuple[int, ...]:
    """Of the partitions `claim_uid` recorded, those no other claim in `after` records (in use
    by none once it is gone), sorted."""
    others = owned(after, except_uid=claim_uid)
    return tuple(sorted({p for p in recorded if p not in others}))


def orphans(
    partitions: Iterable[fm_partitions.Partition], *, checkpoint: records.Checkpoint
) -> tuple[int, ...]:
    """The active partitions no claim of `checkpoint` records, sorted: left by a plugin killed
    after an activation and before its claim's record was kept, or by a claim whose record was
    lost. Fabric Manager keeps them active across plugin restarts."""
    claimed = owned(checkpoint)
    return tuple(sorted(
        p.partition_id for p in partitions if p.active and p.partition_id not in claimed
    ))


def inferred(
    held: Iterable[records.HeldDevice],
    *,
    module_ids: Mapping[int, int],
    partitions: Sequence[fm_partitions.Partition],
) -> tuple[int, ...]:
    """For a record rebuilt from CDI specs (which do not say which partition was activated):
    the partition whose module set is exactly the held full GPUs' and VFIO functions' (by GPU
    minor in `module_ids`); none where that is not one partition (then nothing is claimed, and
    the start-up clean-up deactivates whatever is active there)."""
    modules: set[int] = set()
    for device in held:
        if device.admin_access or device.kind not in _WHOLE_GPU_KINDS:
            continue
        module = module_ids.get(device.gpu_minor) if device.gpu_minor is not None else None
        if module is None:
            return ()
        modules.add(module)
    if not modules:
        return ()
    try:
        return (fm_partitions.partition_for(modules, partitions).partition_id,)
    except errors.PermanentError:
        return ()





def with_inferred(
    checkpoint: records.Checkpoint,
    *,
    module_ids: Mapping[int, int],
    partitions: Sequence[fm_partitions.Partition],
) -> records.Checkpoint:
    """`checkpoint` with each holding entry that records no partition given the one its GPUs
    form (`inferred`): for claims taken over from a checkpoint that does not record them
    (upstream's), so that their running workloads keep their partition through the start-up
    clean-up and unprepare deactivates it."""
    entries = dict(checkpoint.entries)
    for uid, entry in checkpoint.entries.items():
        if entry.state not in checkpoints.HOLDING_STATES or entry.record.fabric_partitions:
            continue
        found = inferred(entry.record.held, module_ids=module_ids, partitions=partitions)
        if found:
            entries[uid] = dataclasses.replace(
                entry, record=dataclasses.replace(entry.record, fabric_partitions=found)
            )
    return dataclasses.replace(checkpoint, entries=entries)
