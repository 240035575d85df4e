"""The GPU half's device logic on the shared claim driver (`apps.pluginkit`).

`GpuPluginDriver` plans with `core.gpu.preparing` against the node's discovered devices
and the driver's host files, and carries out the GPU steps (time-slices, vfio binding)
through their ports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit.driver import ClaimDriver, Clock, PluginPorts
from core import models, names, ports
from core.gpu import actions, devices
from core.gpu import checkpoint_records as records
from core.gpu import preparing as gpu_preparing

log = logging.getLogger(__name__)

# The vfio device nodes of each passthrough-ready function, by PCI address.
VfioNodes = Callable[[], Mapping[str, Sequence[devices.DeviceNode]]]


class GpuPluginDriver(ClaimDriver[records.GpuClaimRecord]):
    """Prepares and unprepares `gpu.nvidia.com` claims on one node."""

    def __init__(
        self,
        *,
        ports: PluginPorts,
        node: models.NodeFacts,
        gates: models.FeatureGates,
        inventory: Callable[[], devices.GpuInventory],
        files: Callable[[], devices.DriverFiles],
        time_slicer: ports.TimeSlicer | None = None,
        vfio: ports.VfioBinder | None = None,
        vfio_nodes: VfioNodes | None = None,
        clock: Clock = time.time,
        metrics: plugin_metrics.PluginMetrics | None = None,
        retry_budget_s: float = 30.0,
    ) -> None:
        super().__init__(
            ports=ports, codec=records.CODEC, node=node, clock=clock, metrics=metrics,
            retry_budget_s=retry_budget_s,
        )
        self._gates = gates
        self._inventory = inventory
        self._files = files
        self._time_slicer = time_slicer
        self._vfio = vfio
        self._vfio_nodes = vfio_nodes or (lambda: {})

    def _empty_checkpoint(self) -> records.Checkpoint:
        return gpu_preparing.empty_gpu_checkpoint(boot_id=self._node.boot_id)

    def _rebuild(
        self,
        specs: Mapping[names.ClaimUID, Mapping[str, object]],
        unreadable: tuple[names.ClaimUID, ...],
    ) -> records.Checkpoint:
        # NB: a spec that cannot be read proves nothing about which GPUs it held; its claim
        # is cleaned by the kubelet's unprepare (an unknown claim only loses its file).
        return gpu_preparing.gpu_checkpoint_from_cdi(
            specs, boot_id=self._node.boot_id, now=self._clock()
        )

    def _plan_prepare(
        self, claim: models.ResourceClaim, *, checkpoint: records.Checkpoint, observed: object
    ) -> gpu_preparing.GpuClaimOutcome:
        return gpu_preparing.plan_gpu_prepare(
            claim,
            checkpoint=checkpoint,
            inventory=self._inventory(),
            files=self._files(),
            gates=self._gates,
            now=self._clock(),
            pool=self._node.node_name,
            vfio_nodes=self._vfio_nodes(),
        )

    def _plan_unprepare(
        self, ref: models.ClaimRef, *, checkpoint: records.Checkpoint
    ) -> gpu_preparing.GpuClaimOutcome:
        return gpu_preparing.plan_gpu_unprepare(
            ref, checkpoint=checkpoint, inventory=self._inventory(), now=self._clock()
        )

    def _plan_restore_spec(self, entry: records.Entry) -> models.WriteCDISpec | None:
        return gpu_preparing.plan_gpu_restore_spec(
            entry, inventory=self._inventory(), files=self._files(),
            vfio_nodes=self._vfio_nodes(),
        )

    def _undo_device_steps(
        self, done: tuple[object, ...], *, claim_uid: names.ClaimUID,
        rollback_to: records.Checkpoint,
    ) -> tuple[object, ...]:
        return gpu_preparing.plan_gpu_rollback(claim_uid, done=done, rollback_to=rollback_to)

    def _execute_device_step(self, step: object) -> None:
        if isinstance(step, actions.SetTimeSlice):
            if self._time_slicer is None:
                raise TypeError("a time-slice step was planned but no time slicer is wired")
            self._time_slicer.set_time_slice(step.gpu_uuids, step.interval)
            log.info(
                "event=time_slice_set node=%s gpus=%s interval=%s",
                self._node.node_name, ",".join(step.gpu_uuids), step.interval.value,
            )
        elif isinstance(step, actions.BindVfio | actions.UnbindVfio):
            if self._vfio is None:
                raise TypeError("a vfio step was planned but no vfio binder is wired")
            if isinstance(step, actions.BindVfio):
                self._vfio.bind_vfio(step.pci_bus_id)
            else:
                self._vfio.unbind_vfio(step.pci_bus_id)
            log.info(
                "event=%s node=%s pci_bus_id=%s",
                "vfio_bound" if isinstance(step, actions.BindVfio) else "vfio_unbound",
                self._node.node_name, step.pci_bus_id,
            )
        else:
            super()._execute_device_step(step)
