"""Prepare and unprepare of one `gpu.nvidia.com` claim as pure transitions.

The GPU half's counterpart of `computedomain.preparing`, on the same checkpoint format and the same
guarantees: every check runs before the first step that writes, so a rejected claim leaves
no trace; the entry says PrepareStarted before any GPU is touched or any CDI file written and
PrepareCompleted after; a completed claim prepared again gets the same devices and no steps;
an unprepare of a started claim leaves a PrepareAborted tombstone so a late retry of its
prepare cannot resurrect it.

What the GPU half must remember about a claim beyond the shared entry fields (which devices
it holds, whether they may be shared, what was done to the GPUs) is the entry's typed
`gpu.checkpoint_records.GpuClaimRecord`.

Dynamic MIG (gate DynamicMIG): an allocated partition (`gpu-<minor>-mig-<profile>-<id>-<start>`)
is created at prepare. Its placement is recorded in PrepareStarted before `CreateMigDevice`,
and the spec is written by `WriteMigCDISpec` from what the create returned (the capability
minors exist only then); unprepare, rollback and the stale sweep destroy it. A kill between
create and PrepareCompleted leaves a PrepareStarted entry: the start-up teardown
(`gpu.dynamic_mig`) destroys the device, and the kubelet's retried prepare creates it again.

Fabric Manager (gate FabricManagerPartitioning, `fabric_partitions` given): the partition a
claim's GPUs form (`gpu.fabric_partitioning`) is recorded in PrepareStarted and activated right
after it, before any other GPU step; unprepare, rollback and the stale sweep deactivate it
last, once no other claim that holds GPUs records it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from core import checkpoint as checkpoints
from core import errors, models, names
from core import gates as feature_gates
from core.gpu import (
    actions,
    configs,
    devices,
    fabric_partitioning,
    fm_partitions,
    mps,
    overlap,
    partitions,
    pinned_memory,
    shares,
)
from core.gpu import cdi as gpu_cdi
from core.gpu import checkpoint_records as records

DRIVER_NAME: Final = configs.DRIVER_NAME
Step = records.PluginAction | actions.GpuAction


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuClaimOutcome:
    """What prepare/unprepare of one GPU claim decided: steps to run in order, then the answer.

    `error is None` means success. `checkpoint` is the state after all steps ran.
    """

    steps: tuple[Step, ...]
    checkpoint: records.Checkpoint
    devices: tuple[models.PreparedDevice, ...] = ()
    error: Exception | None = None


def empty_gpu_checkpoint(*, boot_id: str) -> records.Checkpoint:
    """A fresh GPU-plugin checkpoint for this boot."""
    return records.empty(boot_id=boot_id)


# ---------------------------------------------------------------- prepare


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Planned:
    """One allocation result of ours: the inventory device and the config that applies."""

    result: models.DeviceResult
    config: configs.DeviceConfig
    gpu: devices.GpuInfo | None = None
    mig: devices.MigDeviceInfo | None = None
    vfio: devices.VfioDeviceInfo | None = None
    # A MIG device this prepare creates (dynamic MIG).
    dynamic: devices.MigPlacement | None = None

    @property
    def kind(self) -> str:
        if self.gpu is not None:
            return devices.GPU_TYPE
        if self.mig is not None or self.dynamic is not None:
            return devices.MIG_TYPE
        return devices.VFIO_TYPE

    def held(self) -> records.HeldDevice:
        shared = self.vfio is None and configs.allows_sharing(self.config)
        admin = self.result.admin_access
        share = self.vfio is None and bool(self.result.share_id)
        config = shares.normalized_config(self.config) if share else ""
        if self.gpu is not None:
            return records.HeldDevice(
                name=self.gpu.name, kind=self.kind, gpu_minor=self.gpu.minor,
                uuid=self.gpu.uuid, shared=shared, admin_access=admin,
                consumable=share, config=config,
            )
        if self.mig is not None:
            return records.HeldDevice(
                name=self.mig.name, kind=self.kind, gpu_minor=self.mig.parent_minor,
                shared=shared, admin_access=admin, consumable=share, config=config,
            )
        if self.dynamic is not None:
            return records.HeldDevice(
                name=self.result.device, kind=self.kind, gpu_minor=self.dynamic.parent_minor,
                shared=shared, admin_access=admin, consumable=share, config=config,
            )
        assert self.vfio is not None
        return records.HeldDevice(
            name=self.vfio.name, kind=self.kind, gpu_minor=self.vfio.parent_minor,
            pci_bus_id=self.vfio.pci_bus_id,
        )


def plan_gpu_prepare(
    claim: models.ResourceClaim,
    *,
    checkpoint: records.Checkpoint,
    inventory: devices.GpuInventory,
    files: devices.DriverFiles,
    gates: models.FeatureGates,
    now: float,
    pool: str = "",
    vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None = None,
    mps_root: str | None = None,
    fabric_partitions: Sequence[fm_partitions.Partition] | None = None,
) -> GpuClaimOutcome:
    """Decide how to prepare `claim` on this node; never raises for a bad claim.

    `pool` is the node's pool (its name); when given, a result of ours in another pool is
    refused. `vfio_nodes` are the vfio device nodes discovery found, by PCI address (else
    the legacy group node by path). `mps_root` is the host directory of the MPS control
    daemons' files (`<plugin dir>/mps`); None: this plugin runs no daemons, and MPS claims
    are refused. Idempotent: a completed claim gets the same devices and no steps. Steps:
    PrepareStarted, GPU actions (vfio binds, time-slices, then for MPS: EXCLUSIVE_PROCESS,
    each daemon started, each daemon Ready), the CDI spec, PrepareCompleted. On error no
    step at all. With gate DynamicMIG, an allocated MIG partition is created after the
    binds and time-slices, and the spec is a `WriteMigCDISpec` (see the module docstring).
    `fabric_partitions` (Fabric Manager's partitions, gate FabricManagerPartitioning on an
    NVSwitch node; None: off) makes the claim's partition recorded and activated right after
    PrepareStarted; GPUs that form no partition are refused with the partitions that fit.
    """
    entry = checkpoint.entries.get(claim.uid)
    if entry is not None and checkpoints.is_reusable(entry):
        return GpuClaimOutcome(steps=(), checkpoint=checkpoint, devices=entry.devices)
    try:
        checkpoints.check_not_aborted(entry, now=now)
        planned = _planned(claim, inventory=inventory, gates=gates, pool=pool)
        _check_conflicts(claim, planned, checkpoint=checkpoint)
        daemons = _mps_daemons(claim, planned, gates=gates, mps_root=mps_root)
        spec_step, vfio_api = _spec(
            claim.uid, planned, files=files, vfio_nodes=vfio_nodes,
            mps_edits=_mps_edits(daemons, mps_root=mps_root),
        )
        fabric = _fabric_plan(
            claim, planned, inventory=inventory, gates=gates, partitions=fabric_partitions
        )
    except errors.PermanentError as err:
        return GpuClaimOutcome(steps=(), checkpoint=checkpoint, error=err)
    gpu_steps, sliced = _gpu_steps(planned, gates=gates)
    # NB: one record per device, however many shares of it the claim holds.
    held = {h.name: h for h in (p.held() for p in planned)}
    created = tuple(sorted({p.dynamic for p in planned if p.dynamic is not None}))
    record = records.GpuClaimRecord(
        held=tuple(held.values()), time_sliced=sliced, vfio_api=vfio_api,
        mps=tuple(_mps_record(d) for d in daemons), dynamic_migs=created,
        fabric_partitions=fabric,
    )
    prepared = tuple(
        models.PreparedDevice(
            request_names=(p.result.request,),
            pool_name=p.result.pool,
            device_name=p.result.device,
            cdi_device_ids=(gpu_cdi.qualified_name(claim.uid, p.result.device),),
            share_id=p.result.share_id,
        )
        for p in planned
    )
    started = models.CheckpointEntry(
        claim_uid=claim.uid,
        namespace=claim.namespace,
        name=claim.name,
        state=models.ClaimState.PREPARE_STARTED,
        record=record,
        updated_at=now,
        extra=entry.extra if entry is not None else {},
    )
    completed = dataclasses.replace(
        started, state=models.ClaimState.PREPARE_COMPLETED, devices=prepared
    )
    writes = checkpoints.prepare_writes(
        checkpoint, started=started, completed=completed, now=now
    )
    steps: tuple[Step, ...] = (
        # NB: no sync of its own; the PrepareCompleted sync flushes it (see
        # computedomain.preparing).
        models.WriteCheckpoint(checkpoint=writes.started, changed=writes.changed, durable=False),
        *(actions.ActivateFabricPartition(partition_id=p) for p in fabric),
        *gpu_steps,
        *(actions.CreateMigDevice(placement=placement) for placement in created),
        *_mps_steps(daemons),
        spec_step,
        models.WriteCheckpoint(checkpoint=writes.completed, changed=writes.changed),
    )
    return GpuClaimOutcome(steps=steps, checkpoint=writes.completed, devices=prepared)


def _planned(
    claim: models.ResourceClaim,
    *,
    inventory: devices.GpuInventory,
    gates: models.FeatureGates,
    pool: str,
) -> tuple[_Planned, ...]:
    ours = sorted(
        (r for r in claim.results if r.driver == DRIVER_NAME),
        key=lambda r: (r.request, r.pool, r.device),
    )
    if not claim.allocated or not ours:
        raise errors.PermanentError(
            f"claim {claim.namespace}/{claim.name} has no allocation for {DRIVER_NAME}; the "
            "scheduler must allocate it first (does the claim request a gpu.nvidia.com, "
            "mig.nvidia.com or vfio.gpu.nvidia.com device?)"
        )
    by_name = _inventory_by_name(inventory)
    decoded = _decoded_configs(claim, gates=gates)
    dynamic_mig = gates.enabled(feature_gates.DYNAMIC_MIG)
    planned: list[_Planned] = []
    for result in ours:
        if pool and result.pool != pool:
            raise errors.PermanentError(
                f"request {result.request} of claim {claim.namespace}/{claim.name} was "
                f"allocated device {result.device} of pool {result.pool!r}, but this node's "
                f"pool is {pool!r}; the claim was allocated for another node: delete the pod "
                "so the claim is allocated again"
            )
        placement = _partition(result.device, inventory) if dynamic_mig else None
        if placement is not None:
            config = _config_for(result, kind=devices.MIG_TYPE, decoded=decoded)
            shares.check_share_config(result, config, claim=f"{claim.namespace}/{claim.name}")
            planned.append(_Planned(result=result, config=config, dynamic=placement))
            continue
        found = by_name.get(result.device)
        if found is None:
            raise errors.PermanentError(
                f"request {result.request} of claim {claim.namespace}/{claim.name} was "
                f"allocated device {result.device}, which is not on this node (it has "
                f"{_listing(by_name)}); the allocation is stale (the device went away or was "
                "reconfigured): delete the pod and claim so that it is allocated again"
            )
        kind = _kind_of(found)
        if kind == devices.VFIO_TYPE and not gates.enabled(feature_gates.PASSTHROUGH_SUPPORT):
            raise errors.PermanentError(
                f"device {result.device} of claim {claim.namespace}/{claim.name} is a VFIO "
                "passthrough device, but feature gate PassthroughSupport is off on this node; "
                "enable it (featureGates.PassthroughSupport=true) or request a full GPU"
            )
        if kind == devices.VFIO_TYPE and result.admin_access:
            raise errors.PermanentError(
                f"request {result.request} of claim {claim.namespace}/{claim.name} asks for "
                f"admin access to VFIO passthrough device {result.device}; admin access never "
                "changes a device, and a passthrough device is usable only once bound to "
                "vfio-pci for its VM: request the full GPU (gpu.nvidia.com) with admin access "
                "instead, or drop adminAccess"
            )
        config = _config_for(result, kind=kind, decoded=decoded)
        shares.check_share_config(result, config, claim=f"{claim.namespace}/{claim.name}")
        planned.append(_Planned(
            result=result,
            config=config,
            gpu=found if isinstance(found, devices.GpuInfo) else None,
            mig=found if isinstance(found, devices.MigDeviceInfo) else None,
            vfio=found if isinstance(found, devices.VfioDeviceInfo) else None,
        ))
    shares.check_one_config_per_device(
        [(p.result, p.config) for p in planned], claim=f"{claim.namespace}/{claim.name}"
    )
    return tuple(planned)


_Device = devices.GpuInfo | devices.MigDeviceInfo | devices.VfioDeviceInfo


def _fabric_plan(
    claim: models.ResourceClaim,
    planned: Sequence[_Planned],
    *,
    inventory: devices.GpuInventory,
    gates: models.FeatureGates,
    partitions: Sequence[fm_partitions.Partition] | None,
) -> tuple[int, ...]:
    """The partitions to activate: the whole GPUs the claim changes (a VFIO function's GPU by
    its parent minor), as `gpu.fabric_partitioning` decides."""
    if partitions is None or not gates.enabled(feature_gates.FABRIC_MANAGER_PARTITIONING):
        return ()
    module_of = {g.minor: g.module_id for g in inventory.gpus}
    gpus: dict[str, fabric_partitioning.ClaimGpu] = {}
    topologies: set[configs.FabricTopologyConfig] = set()
    for p in planned:
        if p.result.admin_access:
            continue
        if isinstance(p.config, configs.GpuConfig) and p.config.fabric_topology is not None:
            topologies.add(p.config.fabric_topology)
        if p.gpu is not None:
            gpus[p.gpu.name] = fabric_partitioning.ClaimGpu(
                device=p.gpu.name, module_id=p.gpu.module_id
            )
        elif p.vfio is not None:
            parent = p.vfio.parent_minor
            gpus[p.vfio.name] = fabric_partitioning.ClaimGpu(
                device=p.vfio.name, module_id=module_of.get(parent) if parent is not None else None
            )
    if len(topologies) > 1:
        raise errors.PermanentError(
            f"claim {claim.namespace}/{claim.name}: its GpuConfigs give "
            f"{len(topologies)} different fabricTopologyConfigs, but the claim's GPUs form one "
            "Fabric Manager partition; give the claim one fabricTopologyConfig (in a config "
            "without `requests`, or the same one in each)"
        )
    return fabric_partitioning.plan_fabric_partitions(
        tuple(gpus[name] for name in sorted(gpus)), partitions=partitions,
        claim=f"{claim.namespace}/{claim.name}",
        topology=next(iter(topologies), None),
    )


def _partition(name: str, inventory: devices.GpuInventory) -> devices.MigPlacement | None:
    """The placement of `name` where it is a MIG partition this node publishes (dynamic MIG)."""
    placement = devices.MigPlacement.from_name(name)
    if placement is None:
        return None
    gpu = next((g for g in inventory.gpus if g.minor == placement.parent_minor), None)
    if gpu is None or not partitions.is_partitionable(gpu):
        return None
    return placement if partitions.find_mig(gpu, name) is not None else None


def _inventory_by_name(inventory: devices.GpuInventory) -> dict[str, _Device]:
    found: dict[str, _Device] = {}
    listed: tuple[_Device, ...] = (*inventory.gpus, *inventory.migs, *inventory.vfios)
    for device in listed:
        found.setdefault(device.name, device)
    return found


def _kind_of(device: _Device) -> str:
    if isinstance(device, devices.GpuInfo):
        return devices.GPU_TYPE
    return devices.MIG_TYPE if isinstance(device, devices.MigDeviceInfo) else devices.VFIO_TYPE


def _listing(by_name: Mapping[str, _Device], limit: int = 8) -> str:
    if not by_name:
        return "no gpu.nvidia.com devices"
    shown = sorted(by_name)[:limit]
    more = len(by_name) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


# ---------------------------------------------------------------- configs


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Decoded:
    requests: tuple[str, ...]
    config: configs.DeviceConfig


def _decoded_configs(
    claim: models.ResourceClaim, *, gates: models.FeatureGates
) -> tuple[_Decoded, ...]:
    """The claim's opaque configs for us, lowest precedence first: class, then claim configs.

    Every one is decoded strictly, so an invalid entry is reported even when a later one
    overrides it (as upstream decodes them all before choosing).
    """
    ours = [c for c in claim.configs if c.driver == DRIVER_NAME]
    # NB: sorted() is stable, so entries keep their order within each source.
    ours.sort(key=lambda c: 0 if c.source is models.ConfigSource.CLASS else 1)
    return tuple(
        _Decoded(
            requests=c.requests,
            config=configs.decode_device_config(c.parameters, gates=gates),
        )
        for c in ours
    )


def _config_for(
    result: models.DeviceResult, *, kind: str, decoded: Sequence[_Decoded]
) -> configs.DeviceConfig:
    """The config that applies to one result, as upstream chooses it.

    From the highest precedence down: a config naming the request applies (and must fit
    the device's type, else the claim is refused); a config naming no request applies when
    it is of the device's type; otherwise the type's default.
    """
    for candidate in reversed(decoded):
        if _names_request(candidate.requests, result.request):
            configs.check_applies(candidate.config, device_type=kind, request=result.request)
            return candidate.config
        if not candidate.requests and configs.applies_to(candidate.config, device_type=kind):
            return candidate.config
    return configs.default_config(kind)


def _names_request(requests: Sequence[str], request: str) -> bool:
    # A config naming a request with subrequests (firstAvailable) applies to the one chosen:
    # results name it `<request>/<subrequest>`.
    return request in requests or request.partition("/")[0] in requests


# ---------------------------------------------------------------- conflicts


def _check_conflicts(
    claim: models.ResourceClaim, planned: Sequence[_Planned], *, checkpoint: records.Checkpoint
) -> None:
    """Refuse a device another holding claim keeps from this one (`gpu.overlap`'s rules)."""
    wanted = [p.held() for p in planned]
    for uid, entry in sorted(checkpoint.entries.items()):
        if uid == claim.uid or entry.state not in checkpoints.HOLDING_STATES:
            continue
        for theirs in entry.record.held:
            for mine in wanted:
                found = overlap.conflict(mine, theirs)
                if found is not None:
                    holder = (
                        f"claim {entry.namespace}/{entry.name}" if entry.name
                        else f"claim {entry.claim_uid} (recovered from its CDI spec)"
                    )
                    raise errors.PermanentError(overlap.message(
                        overlap.Overlap(mine=mine, theirs=theirs, conflict=found), holder=holder
                    ))


# ---------------------------------------------------------------- MPS


def _mps_daemons(
    claim: models.ResourceClaim,
    planned: Sequence[_Planned],
    *,
    gates: models.FeatureGates,
    mps_root: str | None,
) -> tuple[mps.MpsDaemon, ...]:
    """One control daemon per distinct MPS config among the claim's results (as upstream:
    per config group), none for results with admin access (they never reconfigure a GPU).

    Refused as upstream refuses them: MPS with consumable shares or with DynamicMIG; and
    here also where this plugin has no daemon wiring (`mps_root` None), and multiUser on a
    GPU older than Volta.
    """
    groups: dict[configs.MpsConfig, list[_Planned]] = {}
    for p in planned:
        settings = configs.mps_of(p.config)
        if settings is not None and not p.result.admin_access:
            groups.setdefault(settings, []).append(p)
    if not groups:
        return ()
    who = f"claim {claim.namespace}/{claim.name}"
    if gates.enabled(feature_gates.CONSUMABLE_SHARES):
        raise errors.PermanentError(
            f"{who} asks for MPS sharing, which is not supported while feature gate "
            f"{feature_gates.CONSUMABLE_SHARES} is on (as upstream): share the GPU with "
            "consumable shares or TimeSlicing instead, or turn the gate off"
        )
    if gates.enabled(feature_gates.DYNAMIC_MIG):
        raise errors.PermanentError(
            f"{who} asks for MPS sharing, which is not supported with feature gate "
            f"{feature_gates.DYNAMIC_MIG} (as upstream): use TimeSlicing, or turn the gate off"
        )
    if mps_root is None:
        raise errors.PermanentError(
            f"{who} asks for MPS sharing, but this GPU plugin was started without MPS control "
            "daemons (feature gate MPSSupport off on the plugin?): enable MPSSupport on the "
            "plugin (Helm featureGates.MPSSupport=true) or use TimeSlicing"
        )
    daemons: list[mps.MpsDaemon] = []
    for settings, members in groups.items():
        uuids = tuple(sorted(_uuid_of(p) for p in members))
        gpus = [p.gpu for p in members if p.gpu is not None]
        if settings.multi_user:
            old = [g.name for g in gpus if not _at_least_volta(g.cuda_compute_capability)]
            if old:
                raise errors.PermanentError(
                    f"{who} asks for an MPS daemon in multi-user mode (mpsConfig.multiUser), "
                    f"which needs a Volta or newer GPU; {', '.join(old)} is older: drop "
                    "multiUser, or request a newer GPU"
                )
        daemons.append(mps.MpsDaemon(
            claim_uid=claim.uid,
            daemon_id=mps.daemon_id(claim.uid, uuids),
            device_uuids=uuids,
            gpu_uuids=tuple(sorted(g.uuid for g in gpus)),
            devices=tuple(sorted(p.result.device for p in members)),
            active_thread_percentage=settings.default_active_thread_percentage,
            pinned_limits=pinned_memory.normalize(
                uuids,
                default=settings.default_pinned_device_memory_limit,
                per_device=settings.default_per_device_pinned_memory_limit,
            ),
            multi_user=bool(settings.multi_user),
        ))
    return tuple(sorted(daemons, key=lambda d: d.daemon_id))


def _uuid_of(p: _Planned) -> str:
    if p.gpu is not None:
        return p.gpu.uuid
    assert p.mig is not None  # NB: MPS decodes only from GpuConfig and MigDeviceConfig
    return p.mig.uuid


def _at_least_volta(capability: str) -> bool:
    major = capability.partition(".")[0]
    return not (major.isdigit() and int(major) < 7)


def _mps_record(daemon: mps.MpsDaemon) -> records.MpsRecord:
    return records.MpsRecord(
        daemon_id=daemon.daemon_id, gpu_uuids=daemon.gpu_uuids, devices=daemon.devices
    )


def _mps_steps(daemons: Sequence[mps.MpsDaemon]) -> tuple[actions.GpuAction, ...]:
    """EXCLUSIVE_PROCESS on the daemons' full GPUs, every daemon started, then each awaited
    (they start in parallel on the node; waiting comes last)."""
    if not daemons:
        return ()
    gpus = tuple(sorted({u for d in daemons for u in d.gpu_uuids}))
    exclusive: tuple[actions.GpuAction, ...] = (
        (actions.SetComputeMode(gpu_uuids=gpus, mode=mps.ComputeMode.EXCLUSIVE_PROCESS),)
        if gpus else ()
    )
    return (
        *exclusive,
        *(actions.StartMpsDaemon(daemon=d) for d in daemons),
        *(actions.AwaitMpsDaemon(daemon_id=d.daemon_id) for d in daemons),
    )


def _mps_edits(
    daemons: Sequence[mps.MpsDaemon] | Sequence[records.MpsRecord], *, mps_root: str | None
) -> dict[str, models.JSONObject]:
    """The CDI edits of each slice device served by a daemon (by device name)."""
    if mps_root is None:
        return {}
    edits: dict[str, models.JSONObject] = {}
    for daemon in daemons:
        dirs = mps.daemon_dirs(mps_root, daemon.daemon_id)
        for device in daemon.devices:
            edits[device] = mps.claim_edits(dirs)
    return edits


def _mps_undo(
    record: records.GpuClaimRecord, *, inventory: devices.GpuInventory
) -> tuple[actions.GpuAction, ...]:
    """Stop every daemon of the record, then DEFAULT compute mode on its GPUs (looked up by
    device name where a record rebuilt from a CDI spec does not know their UUIDs)."""
    if not record.mps:
        return ()
    by_name = {g.name: g.uuid for g in inventory.gpus}
    gpus: set[str] = set()
    for daemon in record.mps:
        gpus.update(daemon.gpu_uuids or (by_name[d] for d in daemon.devices if d in by_name))
    stops = tuple(actions.StopMpsDaemon(daemon_id=d.daemon_id) for d in record.mps)
    if not gpus:
        return stops
    return (
        *stops,
        actions.SetComputeMode(gpu_uuids=tuple(sorted(gpus)), mode=mps.ComputeMode.DEFAULT),
    )


# ---------------------------------------------------------------- GPU actions and CDI


def _gpu_steps(
    planned: Sequence[_Planned], *, gates: models.FeatureGates
) -> tuple[tuple[actions.GpuAction, ...], tuple[str, ...]]:
    """VFIO binds (sorted by PCI address), then one time-slice per interval (sorted UUIDs).

    As upstream: the interval is set only with gate TimeSlicingSettings on, and only on full
    GPUs (a MIG device has no time-slice of its own); never for a result with admin access.
    """
    binds = sorted({p.vfio.pci_bus_id for p in planned if p.vfio is not None})
    by_interval: dict[configs.TimeSliceInterval, set[str]] = {}
    if gates.enabled(feature_gates.TIME_SLICING_SETTINGS):
        for p in planned:
            interval = _time_slice(p.config)
            # NB: admin access observes a GPU others may use; it never reconfigures it.
            if p.gpu is not None and interval is not None and not p.result.admin_access:
                by_interval.setdefault(interval, set()).add(p.gpu.uuid)
    slices = [
        actions.SetTimeSlice(gpu_uuids=tuple(sorted(uuids)), interval=interval)
        for interval, uuids in sorted(by_interval.items())
    ]
    sliced = tuple(sorted({u for uuids in by_interval.values() for u in uuids}))
    return (*(actions.BindVfio(pci_bus_id=b) for b in binds), *slices), sliced


def _time_slice(config: configs.DeviceConfig) -> configs.TimeSliceInterval | None:
    sharing = config.sharing if isinstance(config, configs.GpuConfig) else None
    if sharing is None or sharing.strategy is not configs.SharingStrategy.TIME_SLICING:
        return None
    slicing = sharing.time_slicing or configs.TimeSlicing()
    return slicing.interval


def _spec(
    claim_uid: names.ClaimUID,
    planned: Sequence[_Planned],
    *,
    files: devices.DriverFiles,
    vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None,
    mps_edits: Mapping[str, models.JSONObject],
) -> tuple[models.WriteCDISpec | actions.WriteMigCDISpec, str]:
    """The spec step: the spec itself, or (a MIG device to create) the devices to render once
    it exists. Raises PermanentError where a device cannot be given to a container."""
    vfio_api = next((
        _api_node(p.vfio, p.config) for p in planned
        if p.vfio is not None and isinstance(p.config, configs.VfioDeviceConfig)
        and p.config.enable_api_device
    ), "")
    existing = [p.gpu or p.mig or p.vfio for p in planned if p.dynamic is None]
    by_iommufd = _iommufd_functions(planned, vfio_nodes=vfio_nodes)
    if all(p.dynamic is None for p in planned) and not by_iommufd:
        spec = _spec_of(
            claim_uid, existing, files=files, vfio_nodes=vfio_nodes, vfio_api=vfio_api,
            mps_edits=mps_edits,
        )
        return models.WriteCDISpec(claim_uid=claim_uid, spec=spec), vfio_api
    if files.caps_major is None and any(p.dynamic is not None for p in planned):
        raise errors.PermanentError(
            f"MIG device {next(p.result.device for p in planned if p.dynamic is not None)} "
            "cannot be prepared: this node did not show the nvidia-caps major (/proc/devices); "
            "check that the driver root and /proc are mounted into the GPU plugin, then restart it"
        )
    rendered = dict(_cdi_devices(
        claim_uid, existing, files=files, vfio_nodes=vfio_nodes, mps_edits=mps_edits
    ))
    items: dict[str, models.JSONObject | devices.MigPlacement | actions.IommufdFunction] = {}
    for p in planned:
        # NB: one CDI device per device, however many shares of it the claim holds.
        items.setdefault(
            p.result.device,
            p.dynamic or by_iommufd.get(p.result.device) or rendered[p.result.device],
        )
    return actions.WriteMigCDISpec(
        claim_uid=claim_uid, cdi_devices=tuple(items.values()), files=files, vfio_api=vfio_api,
        driver_files=any(p.vfio is None for p in planned),
    ), vfio_api


def _iommufd_functions(
    planned: Sequence[_Planned], *, vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None
) -> dict[str, actions.IommufdFunction]:
    """By name, the functions given by their iommufd node (`PreferIommuFD` on a host with
    iommufd), as upstream; rendered after the bind, the node existing only then. Where
    discovery shows no vfio nodes at all (None), none: the group path serves, as before."""
    if vfio_nodes is None:
        return {}
    return {
        p.vfio.name: actions.IommufdFunction(name=p.vfio.name, pci_bus_id=p.vfio.pci_bus_id)
        for p in planned
        if p.vfio is not None and p.vfio.iommu_fd_enabled
        and isinstance(p.config, configs.VfioDeviceConfig)
        and p.config.iommu_backend is configs.IommuBackendPolicy.PREFER_IOMMU_FD
    }


def _api_node(vfio: devices.VfioDeviceInfo, config: configs.VfioDeviceConfig) -> str:
    """The IOMMU API device: /dev/iommu where iommufd is preferred and on, else /dev/vfio/vfio."""
    iommufd = config.iommu_backend is configs.IommuBackendPolicy.PREFER_IOMMU_FD
    return gpu_cdi.IOMMU_API_NODE if iommufd and vfio.iommu_fd_enabled else gpu_cdi.VFIO_API_NODE


def _spec_of(
    claim_uid: str,
    found: Sequence[_Device | None],
    *,
    files: devices.DriverFiles,
    vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None,
    vfio_api: str,
    mps_edits: Mapping[str, models.JSONObject] | None = None,
) -> models.JSONObject:
    listed = _cdi_devices(
        claim_uid, found, files=files, vfio_nodes=vfio_nodes, mps_edits=mps_edits
    )
    # NB: only a claim of passthrough functions alone gets no driver files.
    driver_files = any(not isinstance(d, devices.VfioDeviceInfo) for d in found if d is not None)
    edits = gpu_cdi.common_edits(files, driver_files=driver_files, vfio_api=vfio_api)
    return gpu_cdi.claim_spec(devices_json=[device for _, device in listed], edits=edits)


def _cdi_devices(
    claim_uid: str,
    found: Sequence[_Device | None],
    *,
    files: devices.DriverFiles,
    vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None,
    mps_edits: Mapping[str, models.JSONObject] | None,
) -> list[tuple[str, models.JSONObject]]:
    """(slice device name, CDI device) of each device, in order, once per device."""
    listed: list[tuple[str, models.JSONObject]] = []
    # NB: one CDI device per device, however many shares of it the claim holds.
    unique = {device.name: device for device in found if device is not None}
    for device in unique.values():
        if isinstance(device, devices.GpuInfo):
            rendered = gpu_cdi.gpu_device(claim_uid, device, files=files)
        elif isinstance(device, devices.MigDeviceInfo):
            rendered = gpu_cdi.mig_device(claim_uid, device, files=files)
        else:
            nodes = None if vfio_nodes is None else vfio_nodes.get(device.pci_bus_id)
            listed.append((device.name, gpu_cdi.vfio_device(claim_uid, device, nodes=nodes)))
            continue
        listed.append((device.name, _with_edits(rendered, (mps_edits or {}).get(device.name))))
    return listed


def _with_edits(
    device: models.JSONObject, extra: models.JSONObject | None
) -> models.JSONObject:
    """A CDI device with `extra` containerEdits (env, mounts) added beside its own."""
    if not extra:
        return device
    edits = dict(device.get("containerEdits") or {})
    for key, values in extra.items():
        edits[key] = [*edits.get(key, []), *values]
    return {**device, "containerEdits": edits}


# ---------------------------------------------------------------- unprepare


def plan_gpu_unprepare(
    ref: models.ClaimRef,
    *,
    checkpoint: records.Checkpoint,
    inventory: devices.GpuInventory,
    now: float,
) -> GpuClaimOutcome:
    """Undo what the claim's checkpoint entry says was done.

    An unknown claim succeeds with only the (idempotent) deletion of its CDI spec; a
    tombstone is a no-op. The entry is dropped before the spec is deleted, as in the
    ComputeDomain half: a kill in between leaves a spec no entry holds (removed at start-up),
    never a completed entry whose answer has no file. A claim that bound vfio functions, set
    time-slices, started MPS daemons or created MIG devices is undone before that: daemons
    stopped and their GPUs back to DEFAULT compute mode, functions given back to nvidia, MIG
    devices destroyed, time-slices reset to Default (on GPUs no other claim still holds). The
    entry is the only record of what to undo, so a kill part-way through the undo leaves it,
    and its spec, for the kubelet's retried unprepare (every step is idempotent).
    """
    entry = checkpoint.entries.get(ref.uid)
    if entry is None:
        return GpuClaimOutcome(
            steps=(models.DeleteCDISpec(claim_uid=ref.uid),), checkpoint=checkpoint
        )
    if entry.state is models.ClaimState.PREPARE_ABORTED:
        return GpuClaimOutcome(steps=(), checkpoint=checkpoint)
    if entry.state is models.ClaimState.PREPARE_STARTED:
        tombstone = dataclasses.replace(
            entry, state=models.ClaimState.PREPARE_ABORTED, devices=(), updated_at=now,
            record=records.GpuClaimRecord(),
        )
        after = checkpoints.with_entry(checkpoint, tombstone)
    else:
        after = checkpoints.without_entry(checkpoint, ref.uid)
    undo = _undo_steps(entry, after=after, inventory=inventory)
    write = models.WriteCheckpoint(checkpoint=after, changed=(ref.uid,))
    delete = models.DeleteCDISpec(claim_uid=ref.uid)
    steps: tuple[Step, ...] = (*undo, write, delete)
    return GpuClaimOutcome(steps=steps, checkpoint=after)


def plan_gpu_undo(
    entry: records.Entry, *, after: records.Checkpoint, inventory: devices.GpuInventory
) -> tuple[actions.GpuAction, ...]:
    """The GPU actions that undo what `entry` records (MPS daemons stopped and compute mode
    restored, vfio functions given back, MIG devices it created destroyed, time-slices reset
    where no claim in `after` holds the GPU): unprepare's undo, for the stale-claim sweep to
    run before it drops the entry."""
    return _undo_steps(entry, after=after, inventory=inventory)


def _undo_steps(
    entry: records.Entry,
    *,
    after: records.Checkpoint,
    inventory: devices.GpuInventory,
) -> tuple[actions.GpuAction, ...]:
    record = entry.record
    by_name = {v.name: v for v in inventory.vfios}
    unbinds: set[str] = set()
    for held in record.held:
        if held.kind != devices.VFIO_TYPE:
            continue
        bus_id = held.pci_bus_id or (
            by_name[held.name].pci_bus_id if held.name in by_name else ""
        )
        if bus_id:
            unbinds.add(bus_id)
    steps: list[actions.GpuAction] = list(_mps_undo(record, inventory=inventory))
    steps.extend(actions.UnbindVfio(pci_bus_id=b) for b in sorted(unbinds))
    steps.extend(actions.DestroyMigDevice(placement=m) for m in sorted(record.dynamic_migs))
    steps.extend(_time_slice_resets(record.time_sliced, claim_uid=entry.claim_uid, after=after))
    # NB: last, as upstream: a passed-through GPU is back on nvidia before its partition goes.
    steps.extend(
        actions.DeactivateFabricPartition(partition_id=p)
        for p in fabric_partitioning.to_release(
            record.fabric_partitions, claim_uid=entry.claim_uid, after=after
        )
    )
    return tuple(steps)


def _time_slice_resets(
    uuids: Sequence[str], *, claim_uid: names.ClaimUID, after: records.Checkpoint
) -> tuple[actions.SetTimeSlice, ...]:
    """Default again on the GPUs of `uuids` that no other claim in `after` still holds (a
    shared GPU's time-slice is the remaining holders' as much as this claim's)."""
    still_held = {
        h.uuid
        for uid, other in after.entries.items()
        if uid != claim_uid and other.state in checkpoints.HOLDING_STATES
        for h in other.record.held
        if h.uuid
    }
    reset = tuple(sorted({u for u in uuids if u not in still_held}))
    if not reset:
        return ()
    return (actions.SetTimeSlice(gpu_uuids=reset, interval=configs.TimeSliceInterval.DEFAULT),)


def plan_gpu_rollback(
    claim_uid: names.ClaimUID, *, done: Sequence[object], rollback_to: records.Checkpoint
) -> tuple[actions.GpuAction, ...]:
    """The steps that undo the GPU steps an abandoned prepare of `claim_uid` already ran
    (`done`, in the order run), before the checkpoint goes back to `rollback_to`.

    The same rule as unprepare's undo: vfio functions it bound are given back (never shared),
    and time-slices it set are reset to Default only on GPUs no claim in `rollback_to` holds;
    MPS daemons it started are stopped and GPUs it put in EXCLUSIVE_PROCESS go back to
    DEFAULT; MIG devices it created are destroyed; Fabric Manager partitions it activated are
    deactivated, last, unless a claim in `rollback_to` records them. Reverse order of `done`;
    deterministic.
    """
    undone: list[actions.GpuAction] = []
    sliced: list[str] = []
    activated: list[int] = []
    for step in reversed(done):
        if isinstance(step, actions.ActivateFabricPartition):
            activated.append(step.partition_id)
        elif isinstance(step, actions.BindVfio):
            undone.append(actions.UnbindVfio(pci_bus_id=step.pci_bus_id))
        elif isinstance(step, actions.CreateMigDevice):
            undone.append(actions.DestroyMigDevice(placement=step.placement))
        elif isinstance(step, actions.SetTimeSlice):
            sliced.extend(step.gpu_uuids)
        elif isinstance(step, actions.StartMpsDaemon):
            undone.append(actions.StopMpsDaemon(daemon_id=step.daemon.daemon_id))
        elif (
            isinstance(step, actions.SetComputeMode)
            and step.mode is mps.ComputeMode.EXCLUSIVE_PROCESS
        ):
            undone.append(
                actions.SetComputeMode(gpu_uuids=step.gpu_uuids, mode=mps.ComputeMode.DEFAULT)
            )
    released = fabric_partitioning.to_release(
        activated, claim_uid=claim_uid, after=rollback_to
    )
    return (
        *undone, *_time_slice_resets(sliced, claim_uid=claim_uid, after=rollback_to),
        *(actions.DeactivateFabricPartition(partition_id=p) for p in released),
    )


# ---------------------------------------------------------------- recovery


def plan_gpu_restore_spec(
    entry: records.Entry,
    *,
    inventory: devices.GpuInventory,
    files: devices.DriverFiles,
    vfio_nodes: Mapping[str, Sequence[devices.DeviceNode]] | None = None,
    mps_root: str | None = None,
) -> models.WriteCDISpec | None:
    """The CDI spec a completed entry proves, to write back if its file was lost.

    Deterministic: the bytes prepare wrote, given the same inventory and driver files.
    None when the entry is not completed, holds no device, or names a device no longer on
    the node (or one whose spec cannot be built any more): that claim must be unprepared.
    """
    if entry.state is not models.ClaimState.PREPARE_COMPLETED:
        return None
    record = entry.record
    if not record.held:
        return None
    by_name = _inventory_by_name(inventory)
    found = [by_name.get(h.name) for h in record.held]
    if any(device is None for device in found):
        return None
    try:
        spec = _spec_of(
            entry.claim_uid, found, files=files, vfio_nodes=vfio_nodes,
            vfio_api=record.vfio_api, mps_edits=_mps_edits(record.mps, mps_root=mps_root),
        )
    except errors.PermanentError:
        return None
    return models.WriteCDISpec(claim_uid=entry.claim_uid, spec=spec)


def gpu_checkpoint_from_cdi(
    specs: Mapping[names.ClaimUID, Mapping[str, Any]],
    *,
    boot_id: str,
    now: float = 0.0,
    dynamic_mig: bool = False,
    fabric_partitions: Sequence[fm_partitions.Partition] | None = None,
    module_ids: Mapping[int, int] | None = None,
) -> records.Checkpoint:
    """Entries provable from the GPU claims' CDI specs after the checkpoint was lost.

    Each spec proves a PrepareCompleted claim holding the devices it names (and whether it
    gave the vfio API device). What a spec cannot prove stays empty or takes the safe
    reading: namespace, name and allocation are unknown (a repeated prepare is planned
    afresh), no device is shareable (other claims wait until the kubelet unprepares it), no
    time-slice is known to have been set (none is reset). A VFIO function's address, and the
    GPUs of an MPS daemon (proved by a device's pipe mount), are looked up in the inventory
    at unprepare. With `dynamic_mig` (gate DynamicMIG: every MIG device was created at
    prepare), the MIG devices a spec names are recorded as created, so unprepare destroys them.
    With `fabric_partitions` (Fabric Manager partitioning on), the partition the held GPUs
    form (their module ids by minor in `module_ids`) is recorded as the claim's, so the
    start-up clean-up leaves it active and unprepare deactivates it.
    """
    entries: dict[names.ClaimUID, records.Entry] = {}
    for uid, spec in sorted(specs.items()):
        device_names = [
            name for name in (
                gpu_cdi.slice_device_of(uid, cdi_name) for cdi_name in gpu_cdi.spec_devices(spec)
            ) if name is not None
        ]
        held = tuple(records.held_from_name(name) for name in device_names)
        prepared = tuple(
            models.PreparedDevice(
                request_names=(), pool_name="", device_name=name,
                cdi_device_ids=(gpu_cdi.qualified_name(uid, name),),
            )
            for name in device_names
        )
        entries[uid] = models.CheckpointEntry(
            claim_uid=uid, namespace="", name="", state=models.ClaimState.PREPARE_COMPLETED,
            record=records.GpuClaimRecord(
                held=held, vfio_api=_gives_vfio_api(spec), mps=_mps_of_spec(uid, spec),
                dynamic_migs=tuple(sorted(
                    p for p in (devices.MigPlacement.from_name(h.name) for h in held)
                    if p is not None
                )) if dynamic_mig else (),
                fabric_partitions=fabric_partitioning.inferred(
                    held, module_ids=module_ids or {}, partitions=fabric_partitions
                ) if fabric_partitions is not None else (),
            ),
            devices=prepared, updated_at=now,
        )
    return models.Checkpoint(boot_id=boot_id, codec=records.CODEC, entries=entries)


def _mps_of_spec(uid: names.ClaimUID, spec: Mapping[str, Any]) -> tuple[records.MpsRecord, ...]:
    """The daemons a spec's devices mount the pipe directory of (their GPUs not known)."""
    served: dict[str, list[str]] = {}
    listed = spec.get("devices")
    for item in listed if isinstance(listed, list) else ():
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        edits = item.get("containerEdits")
        found = mps.daemon_id_of_edits(dict(edits)) if isinstance(edits, Mapping) else None
        device = gpu_cdi.slice_device_of(uid, item["name"])
        if found is not None and device is not None:
            served.setdefault(found, []).append(device)
    return tuple(
        records.MpsRecord(daemon_id=d, devices=tuple(sorted(names_)))
        for d, names_ in sorted(served.items())
    )


def _gives_vfio_api(spec: Mapping[str, Any]) -> str:
    edits = spec.get("containerEdits")
    nodes = edits.get("deviceNodes") if isinstance(edits, Mapping) else None
    paths = {
        n.get("path") for n in (nodes if isinstance(nodes, list) else ()) if isinstance(n, Mapping)
    }
    return next((p for p in gpu_cdi.API_NODES if p in paths), "")
