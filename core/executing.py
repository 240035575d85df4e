"""The executor: the one core module that calls ports, carrying out planned actions in order.

Planners decide; this module only does. It takes the port as an argument and imports only
core, so the controller runs the same plans on the real API server and on the embedded
cluster, and tests run them against fakes.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TypeVar

from core import errors, models, ports
from core.gpu import actions as gpu_actions
from core.gpu import devices as gpu_devices
from core.gpu import dynamic_mig

# A half's own device action (`core.gpu.actions.GpuAction`; `typing.Never` for none).
ActionT = TypeVar("ActionT")


# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


def execute_cluster_actions(
    cluster: ports.Cluster, actions: Sequence[models.ClusterAction]
) -> None:
    """Apply `actions` in the given order, idempotently.

    Creating an object that already exists and deleting one that is already gone count as
    done, so re-running a partly applied plan is safe. Every other error (a conflict on a
    patch with a resourceVersion, a missing object to patch, an API failure) stops execution
    and propagates: the caller re-observes and re-plans.

    A plan's preconditioned patches of one object were all planned from the same
    resourceVersion: after one of them succeeds, the next is sent with the version it answered
    (the change since the plan is the plan's own). Only along an unbroken chain of
    preconditioned patches: after an unconditional one, the planned version is sent as is.
    """
    # (kind, namespace, name) -> version our last preconditioned patch of it answered.
    chained: dict[tuple[str, str, str], str] = {}
    unchained: set[tuple[str, str, str]] = set()
    for action in actions:
        match action:
            case models.CreateObject(kind=kind, obj=obj):
                with contextlib.suppress(errors.AlreadyExistsError):
                    cluster.create(kind, obj)
            case models.PatchObject():
                key = (action.kind, action.namespace, action.name)
                version = action.resource_version
                if version and key in chained:
                    version = chained[key]
                answer = cluster.patch(
                    action.kind,
                    namespace=action.namespace,
                    name=action.name,
                    patch=action.patch,
                    subresource=action.subresource,
                    resource_version=version,
                )
                meta = answer.get("metadata") if isinstance(answer, Mapping) else None
                answered = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
                if action.resource_version and key not in unchained and answered:
                    chained[key] = str(answered)
                else:
                    chained.pop(key, None)
                    unchained.add(key)
            case models.DeleteObject(kind=kind, namespace=namespace, name=name):
                with contextlib.suppress(errors.NotFoundError):
                    cluster.delete(kind, namespace=namespace, name=name)
            case models.EmitEvent():
                cluster.emit_event(
                    involved=action.involved,
                    reason=action.reason,
                    message=action.message,
                    warning=action.warning,
                )


def execute_claim_steps(
    steps: Sequence[models.PluginAction[RecordT] | ActionT],
    *,
    checkpoint: ports.CheckpointRecorder[RecordT],
    cdi: ports.CDIStore,
    cluster: ports.Cluster,
    devices: ports.DeviceActuator[ActionT],
) -> None:
    """Run a prepare/unprepare plan's steps in order: checkpoint, CDI, API, and the half's own.

    Each step is durable before the next starts, so a crash leaves the checkpoint saying
    at most "started" for work that may be half done, never "completed" for work not done.
    A step that is not a shared plugin step is the half's (`ActionT`): `devices` runs it.
    """
    for step in steps:
        match step:
            case models.WriteCheckpoint():
                checkpoint.record(step)
            case models.WriteCDISpec(claim_uid=uid, spec=spec):
                cdi.write(uid, spec)
            case models.DeleteCDISpec(claim_uid=uid):
                cdi.delete(uid)
            case models.PatchObject() | models.EmitEvent():
                execute_cluster_actions(cluster, (step,))
            case _:
                devices.apply(step)


def execute_gpu_actions(
    actions: Sequence[gpu_actions.GpuAction],
    *,
    time_slicer: ports.TimeSlicer | None,
    vfio: ports.VfioBinder | None,
    compute_mode: ports.ComputeModeSetter | None = None,
    mps_daemons: ports.MpsDaemons | None = None,
    mig: ports.MigPartitioner | None = None,
    cdi: ports.CDIStore | None = None,
    created: MutableMapping[gpu_devices.MigPlacement, gpu_devices.MigDeviceInfo] | None = None,
    fabric: ports.FabricManager | None = None,
    iommufd: ports.IommufdNodes | None = None,
) -> None:
    """Carry out the GPU half's device actions in order through their ports.

    Dynamic MIG: `created` is the caller's record of the MIG devices created so far (by
    placement; it outlives one call, as the driver runs a plan one step at a time): a create
    adds to it, a destroy removes from it, and `WriteMigCDISpec` renders its devices from it
    and writes the spec through `cdi` (with the iommufd nodes of bound functions, `iommufd`).

    A port left unwired (None) for an action the planner asked for is a wiring bug: TypeError.
    """
    for action in actions:
        match action:
            case gpu_actions.SetTimeSlice(gpu_uuids=uuids, interval=interval):
                if time_slicer is None:
                    raise TypeError("a time-slice step was planned but no time slicer is wired")
                time_slicer.set_time_slice(uuids, interval)
            case gpu_actions.BindVfio(pci_bus_id=bus_id):
                if vfio is None:
                    raise TypeError("a vfio step was planned but no vfio binder is wired")
                vfio.bind_vfio(bus_id)
            case gpu_actions.UnbindVfio(pci_bus_id=bus_id):
                if vfio is None:
                    raise TypeError("a vfio step was planned but no vfio binder is wired")
                vfio.unbind_vfio(bus_id)
            case gpu_actions.SetComputeMode(gpu_uuids=uuids, mode=mode):
                if compute_mode is None:
                    raise TypeError("a compute-mode step was planned but no setter is wired")
                compute_mode.set_compute_mode(uuids, mode)
            case gpu_actions.StartMpsDaemon(daemon=daemon):
                _daemons(mps_daemons).start(daemon)
            case gpu_actions.AwaitMpsDaemon(daemon_id=daemon_id):
                _daemons(mps_daemons).await_ready(daemon_id)
            case gpu_actions.StopMpsDaemon(daemon_id=daemon_id):
                _daemons(mps_daemons).stop(daemon_id)
            case gpu_actions.CreateMigDevice(placement=placement):
                partitioner, made = _mig(mig, created)
                # NB: a device an earlier try of this claim left there goes first (the planner
                # refused the placement if another claim holds it), so a retry can create it.
                partitioner.destroy_mig_device(placement)
                made[placement] = partitioner.create_mig_device(placement)
            case gpu_actions.DestroyMigDevice(placement=placement):
                partitioner, made = _mig(mig, created)
                partitioner.destroy_mig_device(placement)
                made.pop(placement, None)
            case gpu_actions.WriteMigCDISpec(claim_uid=uid):
                if cdi is None or created is None:
                    raise TypeError("a MIG CDI spec step was planned but no CDI store is wired")
                cdi.write(uid, dynamic_mig.created_spec(
                    action, created,
                    iommufd_nodes=iommufd.iommufd_nodes if iommufd is not None else None,
                ))
            case gpu_actions.ActivateFabricPartition(partition_id=partition_id):
                _fabric(fabric).activate(partition_id)
            case gpu_actions.DeactivateFabricPartition(partition_id=partition_id):
                _fabric(fabric).deactivate(partition_id)
            case _:
                typing.assert_never(action)


def _daemons(mps_daemons: ports.MpsDaemons | None) -> ports.MpsDaemons:
    if mps_daemons is None:
        raise TypeError("an MPS daemon step was planned but no MPS daemons port is wired")
    return mps_daemons


def _fabric(fabric: ports.FabricManager | None) -> ports.FabricManager:
    if fabric is None:
        raise TypeError("a Fabric Manager step was planned but no Fabric Manager is wired")
    return fabric


def _mig(
    mig: ports.MigPartitioner | None,
    created: MutableMapping[gpu_devices.MigPlacement, gpu_devices.MigDeviceInfo] | None,
) -> tuple[
    ports.MigPartitioner, MutableMapping[gpu_devices.MigPlacement, gpu_devices.MigDeviceInfo]
]:
    if mig is None or created is None:
        raise TypeError("a MIG device step was planned but no MIG partitioner is wired")
    return mig, created
