"""The GPU half's device logic, plugged into the shared claim driver (`apps.pluginkit`).

`GpuHalf` plans with `core.gpu.preparing` against the node's discovered devices and the
driver's host files. Its own device actions (time-slices, vfio binding, compute modes, MPS
control daemons, dynamic MIG devices) are carried out by `core.executing.execute_gpu_actions`
through their ports. `new_driver` builds the claim driver with it.

Dynamic MIG (a `MigPartitioner` wired): at start-up, before serving, every MIG device no
completed claim holds is destroyed (`core.gpu.dynamic_mig`); the half remembers the devices
its prepares created, so their specs are written from them and later plans see them before
the next discovery does.

Fabric Manager (a `FabricManager` and its partitions wired, gate FabricManagerPartitioning):
prepares activate their GPUs' partition and unprepares deactivate it
(`core.gpu.fabric_partitioning`); at start-up, before serving, every active partition no
checkpointed claim records is deactivated (a plugin killed between an activation and the
record that owns it, or a lost record).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from apps.gpuplugin import logged_ports
from apps.pluginkit import claim_half
from apps.pluginkit import driver as claim_driver
from apps.pluginkit import metrics as plugin_metrics
from core import device_status, executing, models, names, ports, upstream_checkpoint
from core.gpu import actions, devices, dynamic_mig, fabric_partitioning, fm_partitions
from core.gpu import checkpoint_records as gpu_records
from core.gpu import device_status as gpu_device_status
from core.gpu import preparing as gpu_preparing
from core.gpu import upstream_import as gpu_upstream_import

log = logging.getLogger(__name__)

# The vfio device nodes of each passthrough-ready function, by PCI address.
VfioNodes = Callable[[], Mapping[str, Sequence[devices.DeviceNode]]]

# The claim driver of `gpu.nvidia.com` claims (it reads nothing from the API before planning).
GpuPluginDriver = claim_driver.ClaimDriver[
    gpu_records.GpuClaimRecord, models.NodeFacts, None, actions.GpuAction
]


def new_driver(
    *,
    ports: claim_driver.PluginPorts,
    node: models.NodeFacts,
    gates: models.FeatureGates,
    inventory: Callable[[], devices.GpuInventory],
    files: Callable[[], devices.DriverFiles],
    time_slicer: ports.TimeSlicer | None = None,
    vfio: ports.VfioBinder | None = None,
    vfio_nodes: VfioNodes | None = None,
    clock: claim_driver.Clock = time.time,
    metrics: plugin_metrics.PluginMetrics | None = None,
    retry_budget_s: float = 30.0,
    claim_status: bool = False,
    compute_mode: ports.ComputeModeSetter | None = None,
    mps_daemons: ports.MpsDaemons | None = None,
    mps_root: str | None = None,
    mig: ports.MigPartitioner | None = None,
    fabric: ports.FabricManager | None = None,
    fabric_partitions: Sequence[fm_partitions.Partition] | None = None,
    iommufd: ports.IommufdNodes | None = None,
) -> GpuPluginDriver:
    """The claim driver that prepares and unprepares `gpu.nvidia.com` claims on one node.

    `mps_daemons` and `mps_root` (the host directory of their files) wire MPS; without them
    MPS claims are refused with the reason. With `claim_status`, prepares write their
    devices' entries of the claims' `status.devices` (unprepares clear them). `mig` (gate
    DynamicMIG) creates and destroys MIG devices; its specs go to the plugin's CDI root.
    `fabric` with `fabric_partitions` (its partitions as read at start; gate
    FabricManagerPartitioning on a node with an NVSwitch fabric) activates each claim's
    partition at prepare and deactivates it at unprepare.
    `iommufd` finds a bound function's iommufd node (VfioDeviceConfig `PreferIommuFD`).
    """
    half = GpuHalf(
        gates=gates, inventory=inventory, files=files,
        time_slicer=(
            logged_ports.LoggedTimeSlicer(time_slicer, node_name=node.node_name)
            if time_slicer is not None else None
        ),
        vfio=(
            logged_ports.LoggedVfioBinder(vfio, node_name=node.node_name)
            if vfio is not None else None
        ),
        vfio_nodes=vfio_nodes or (lambda: {}),
        compute_mode=compute_mode,
        mps_daemons=mps_daemons,
        mps_root=mps_root if mps_daemons is not None else None,
        mig=mig,
        cdi=ports.cdi,
        fabric=fabric if fabric_partitions is not None else None,
        fabric_partitions=fabric_partitions if fabric is not None else None,
        iommufd=iommufd,
    )
    return claim_driver.ClaimDriver(
        half=half, ports=ports, node=node, clock=clock, metrics=metrics,
        retry_budget_s=retry_budget_s,
        driver_name=names.GPU_DRIVER_NAME if claim_status else "",
    )


class GpuHalf:
    """`claim_half.ClaimHalf[GpuClaimRecord, None, GpuAction]` for `gpu.nvidia.com` claims."""

    # NB: a spec that cannot be read proves nothing about which GPUs it held; its claim
    # is cleaned by the kubelet's unprepare (an unknown claim only loses its file).
    unreadable_spec_action = "kept_until_unprepared"
    codec = gpu_records.CODEC

    def __init__(
        self,
        *,
        gates: models.FeatureGates,
        inventory: Callable[[], devices.GpuInventory],
        files: Callable[[], devices.DriverFiles],
        time_slicer: ports.TimeSlicer | None,
        vfio: ports.VfioBinder | None,
        vfio_nodes: VfioNodes,
        compute_mode: ports.ComputeModeSetter | None = None,
        mps_daemons: ports.MpsDaemons | None = None,
        mps_root: str | None = None,
        mig: ports.MigPartitioner | None = None,
        cdi: ports.CDIStore | None = None,
        fabric: ports.FabricManager | None = None,
        fabric_partitions: Sequence[fm_partitions.Partition] | None = None,
        iommufd: ports.IommufdNodes | None = None,
    ) -> None:
        self._gates = gates
        self._iommufd = iommufd
        self._discovered = inventory
        self._files = files
        self._time_slicer = time_slicer
        self._vfio = vfio
        self._vfio_nodes = vfio_nodes
        self._compute_mode = compute_mode
        self._mps_daemons = mps_daemons
        self._mps_root = mps_root
        self._mig = mig
        self._cdi = cdi
        self._fabric = fabric
        # NB: which GPUs form a partition is fixed; whether one is active is read when needed.
        self._fabric_partitions = (
            tuple(dataclasses.replace(p, active=False) for p in fabric_partitions)
            if fabric_partitions is not None else None
        )
        # MIG devices this process created, by placement (dynamic MIG).
        self._created: dict[devices.MigPlacement, devices.MigDeviceInfo] = {}
        self._created_lock = threading.Lock()

    def _inventory(self) -> devices.GpuInventory:
        """The last discovery, with the MIG devices created since (destroyed ones dropped)."""
        found = self._discovered()
        with self._created_lock:
            created = dict(self._created)
        known = {m.name for m in found.migs}
        extra = tuple(m for m in created.values() if m.name not in known)
        return dataclasses.replace(found, migs=(*found.migs, *extra)) if extra else found

    # ------------------------------------------------------------ its checkpoint

    def empty_checkpoint(self, *, boot_id: str) -> gpu_records.Checkpoint:
        """A GPU-plugin checkpoint with no claim."""
        return gpu_preparing.empty_gpu_checkpoint(boot_id=boot_id)

    def rebuild_from_cdi(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        *,
        unreadable: tuple[names.ClaimUID, ...],
        boot_id: str,
        now: float,
    ) -> gpu_records.Checkpoint:
        """The GPU claims the readable specs prove; unreadable ones get no entry (with dynamic
        MIG, their MIG devices recorded as created)."""
        return gpu_preparing.gpu_checkpoint_from_cdi(
            specs, boot_id=boot_id, now=now, dynamic_mig=self._mig is not None,
            fabric_partitions=self._fabric_partitions,
            module_ids=self._module_ids(),
        )

    def adopt_upstream(
        self, upstream: upstream_checkpoint.UpstreamCheckpoint, *, boot_id: str, now: float
    ) -> upstream_checkpoint.Adoption[gpu_records.GpuClaimRecord]:
        """Upstream's GPU claims as entries of ours (VFIO addresses from discovery now; with
        Fabric Manager, each claim's partition inferred from its GPUs)."""
        adopted = gpu_upstream_import.adopt(
            upstream, inventory=self._inventory(), boot_id=boot_id, now=now
        )
        if self._fabric_partitions is None:
            return adopted
        return dataclasses.replace(adopted, checkpoint=fabric_partitioning.with_inferred(
            adopted.checkpoint, module_ids=self._module_ids(),
            partitions=self._fabric_partitions,
        ))

    def _module_ids(self) -> dict[int, int]:
        return {g.minor: g.module_id for g in self._discovered().gpus if g.module_id}

    def plan_restore_spec(
        self, entry: gpu_records.Entry, *, node: models.NodeFacts
    ) -> models.WriteCDISpec | None:
        """The spec a completed entry proves, from the devices discovered now."""
        return gpu_preparing.plan_gpu_restore_spec(
            entry, inventory=self._inventory(), files=self._files(),
            vfio_nodes=self._vfio_nodes(), mps_root=self._mps_root,
        )

    def freed_by(self, entry: gpu_records.Entry) -> str:
        """The devices the entry held."""
        names_ = ",".join(d.device_name for d in entry.devices[:8]) or "none"
        return f"device(s) {names_} on this node are free again"

    # ------------------------------------------------------------ planning a claim

    def observe(self, claim: models.ResourceClaim, *, node: models.NodeFacts) -> None:
        """Nothing: the GPU planner needs no API read."""
        return None

    def plan_prepare(
        self,
        claim: models.ResourceClaim,
        *,
        checkpoint: gpu_records.Checkpoint,
        observed: None,
        node: models.NodeFacts,
        now: float,
    ) -> gpu_preparing.GpuClaimOutcome:
        """Plan against the devices and driver files discovered now (the pool is the node)."""
        return gpu_preparing.plan_gpu_prepare(
            claim,
            checkpoint=checkpoint,
            inventory=self._inventory(),
            files=self._files(),
            gates=self._gates,
            now=now,
            pool=node.node_name,
            vfio_nodes=self._vfio_nodes(),
            mps_root=self._mps_root,
            fabric_partitions=self._fabric_partitions,
        )

    def check_before_steps(
        self, outcome: claim_half.PlannedClaim[gpu_records.GpuClaimRecord, actions.GpuAction]
    ) -> None:
        """Nothing to wait for: the planner already checked the devices."""
        return None

    def plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: gpu_records.Checkpoint, now: float
    ) -> gpu_preparing.GpuClaimOutcome:
        """Undo the claim's GPU changes (MPS daemons, vfio functions, time-slices), its entry."""
        return gpu_preparing.plan_gpu_unprepare(
            ref, checkpoint=checkpoint, inventory=self._inventory(), now=now
        )

    def api_steps_doing(self, *, node: models.NodeFacts) -> str:
        """Generic wording: a GPU plan has no API write of its own."""
        return f"writing to the API server for node {node.node_name}"

    def device_status_data(
        self, entry: gpu_records.Entry, *, node: models.NodeFacts
    ) -> Mapping[str, device_status.DeviceData]:
        """Each held device's UUID and PCI address (a MIG device's parent's), from discovery."""
        return gpu_device_status.device_data(entry.record, inventory=self._inventory())

    # ------------------------------------------------------------ its device actions

    def apply(self, action: actions.GpuAction) -> None:
        """Carry out a time-slice, vfio, compute-mode, MPS daemon or MIG action through its
        port."""
        with self._created_lock:
            executing.execute_gpu_actions(
                (action,), time_slicer=self._time_slicer, vfio=self._vfio,
                compute_mode=self._compute_mode, mps_daemons=self._mps_daemons,
                mig=self._mig, cdi=self._cdi, created=self._created, fabric=self._fabric,
                iommufd=self._iommufd,
            )

    def plan_rollback(
        self,
        done: Sequence[gpu_records.PluginAction | actions.GpuAction],
        *,
        claim_uid: names.ClaimUID,
        rollback_to: gpu_records.Checkpoint,
    ) -> tuple[actions.GpuAction, ...]:
        """Unbind what the prepare bound; reset time-slices no claim in `rollback_to` holds;
        stop MPS daemons it started and restore the compute mode it changed."""
        return gpu_preparing.plan_gpu_rollback(claim_uid, done=done, rollback_to=rollback_to)

    def plan_stale_undo(
        self, entry: gpu_records.Entry, *, after: gpu_records.Checkpoint
    ) -> tuple[actions.GpuAction, ...]:
        """What unprepare would undo for the entry: MPS daemons, vfio binds, time-slices."""
        return gpu_preparing.plan_gpu_undo(entry, after=after, inventory=self._inventory())

    # ------------------------------------------------------------ follow-ups (none)

    def after_recover(self, current: gpu_records.Checkpoint, *, node: models.NodeFacts) -> None:
        """Before serving: deactivate every Fabric Manager partition no claim records; with
        dynamic MIG, destroy every MIG device no completed claim holds.

        A deactivate or destroy that fails stops the start (the plugin restarts and tries
        again): serving beside a partition or device nobody will free would keep its GPUs
        from every other partition, or its memory slices taken, for good.
        """
        self._release_orphan_partitions(current, node=node)
        if self._mig is None:
            return
        unknown = dynamic_mig.unknown_mig_devices(self._discovered(), current)
        for placement in unknown:
            self._mig.destroy_mig_device(placement)
            log.info(
                "event=mig_device_torn_down node=%s gpu_minor=%d gi_profile_id=%d "
                "placement_start=%d reason=no_completed_claim",
                node.node_name, placement.parent_minor, placement.gi_profile_id,
                placement.placement_start,
            )
        log.info(
            "event=dynamic_mig_ready node=%s destroyed=%d kept=%d", node.node_name,
            len(unknown), len(self._discovered().migs) - len(unknown),
        )

    def _release_orphan_partitions(
        self, current: gpu_records.Checkpoint, *, node: models.NodeFacts
    ) -> None:
        if self._fabric is None:
            return
        orphans = fabric_partitioning.orphans(self._fabric.partitions(), checkpoint=current)
        for partition_id in orphans:
            self._fabric.deactivate(partition_id)
            log.info(
                "event=fm_partition_orphan_deactivated node=%s partition=%d "
                "reason=no_claim_records_it", node.node_name, partition_id,
            )
        owned = fabric_partitioning.owned(current)
        log.info(
            "event=fm_partitions_ready node=%s deactivated=%d owned=%s", node.node_name,
            len(orphans), ",".join(str(p) for p in sorted(owned)) or "-",
        )

    def after_unprepare(
        self, entry: gpu_records.Entry, *, after: gpu_records.Checkpoint, node: models.NodeFacts
    ) -> None:
        """Nothing to release: the unprepare's steps undid everything."""
        return None
