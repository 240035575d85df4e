"""Ports: the few operations core-side orchestration needs from the outside world.

Adapters implement these Protocols (`adapters.kube` and `adapters.memory` the cluster,
`adapters.fs` the node's files, `adapters.nvml` the GPUs). All speak core values or
Kubernetes JSON objects (the JSON edge), never library types. All are synchronous.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from core import device_health, device_metadata, models, names, runtime_cdi
from core.gpu import configs as gpu_configs
from core.gpu import devices as gpu_devices
from core.gpu import fm_partitions
from core.gpu import health as gpu_health
from core.gpu import mps as gpu_mps

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


class WatchEventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    # Only a resourceVersion (`obj.metadata.resourceVersion`): the stream is alive and the
    # watch has seen everything up to it. Informers advance their resume point and go on.
    BOOKMARK = "BOOKMARK"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchEvent:
    type: WatchEventType
    obj: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListResult:
    items: tuple[Mapping[str, Any], ...]
    resource_version: str


# A label selector the API server evaluates: `key: value` requires that value (`key=value`),
# `key: None` only that the label exists (`key`). Every entry must hold.
LabelSelector = Mapping[str, str | None]


class Cluster(Protocol):
    """Kubernetes API operations on JSON objects, addressed by `kind` (see `core.kinds`).

    Errors: `errors.NotFoundError` (404), `errors.AlreadyExistsError` (409 on create),
    `errors.ConflictError` (409 stale resourceVersion), `errors.GoneError` (410 on watch).
    """

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        """Return the object or raise NotFoundError."""
        ...

    def list(
        self, kind: str, *, namespace: str = "", label_selector: LabelSelector | None = None
    ) -> ListResult:
        """All objects of a kind (in a namespace when given, matching `label_selector` when
        given), with the list resourceVersion."""
        ...

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: LabelSelector | None = None,
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version`; ends after `timeout_s`. Raises GoneError if expired.

        With `label_selector`, as the API server: only objects that match; one that stops
        matching comes as DELETED, one that starts matching as ADDED.
        """
        ...

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """Create and return the stored object (with uid, resourceVersion)."""
        ...

    def patch(
        self,
        kind: str,
        *,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str = "",
        resource_version: str = "",
    ) -> Mapping[str, Any]:
        """JSON merge patch; with `resource_version`, ConflictError if the object moved on."""
        ...

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        """Request deletion (finalizers may keep it). NotFoundError if absent."""
        ...

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        """Record a Kubernetes Event about `involved` (best effort)."""
        ...


@runtime_checkable
class ServerVersion(Protocol):
    """The API server's version (GET /version), for what the shape of objects depends on."""

    def server_version(self) -> str:
        """Its `gitVersion` ("v1.35.2"); errors.ClusterError when it cannot be read."""
        ...


class CheckpointStore(Protocol):
    """Raw bytes of the node's checkpoint file; the codec is `core.checkpoint`."""

    def read(self) -> bytes | None:
        """Current bytes, or None when no checkpoint exists yet."""
        ...

    def write(self, data: bytes) -> None:
        """Replace atomically and durably (temp + fsync + rename + dir fsync)."""
        ...

    def quarantine(self, *, suffix: str) -> str:
        """Move the current file aside (never delete it); return where it went."""
        ...

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Node-wide exclusive lock around a read-modify-write."""
        ...


class PredecessorCheckpoint(Protocol):
    """`<plugin dir>/checkpoint.json`: where our releases before the takeover support and
    upstream's plugins keep their checkpoint (ours now has its own name). Classified by
    `core.upstream_checkpoint.origin`; never written."""

    def read(self) -> bytes | None:
        """Its bytes, or None when there is none."""
        ...

    def hand_over(self) -> None:
        """Our own earlier release's file: rename it (journal first, then snapshot) to the
        current checkpoint's names. Only while the current checkpoint does not exist."""
        ...


class CheckpointJournal(CheckpointStore, Protocol):
    """The checkpoint as a snapshot (`read`/`write`) plus a journal of records appended since.

    Codecs: `core.checkpoint.encode`/`decode` (snapshot), `encode_records`/`replay` (journal).
    """

    def read_journal(self) -> bytes:
        """The journal's bytes (b"" when there is none)."""
        ...

    def append(self, records: bytes, *, sync: bool = True) -> None:
        """Append record lines; durably (one fdatasync) unless `sync` is False."""
        ...

    def truncate_journal(self, length: int = 0) -> None:
        """Cut the journal to `length` bytes durably (0 after a compaction)."""
        ...

    def stamps(self) -> object:
        """A cheap value that changes whenever the snapshot or journal is written."""
        ...


class CheckpointRecorder(Protocol[RecordT]):
    """Makes a planned checkpoint write durable (or keeps it in memory while it cannot be).

    The kubelet plugin's checkpoint keeper implements it over a `CheckpointJournal`.
    """

    def record(self, step: models.WriteCheckpoint[RecordT]) -> None:
        """Persist `step.checkpoint`; raises OSError when the write fails."""
        ...


# The device actions one half plans beside the shared plugin steps.
DeviceActionT_contra = TypeVar("DeviceActionT_contra", contravariant=True)


class DeviceActuator(Protocol[DeviceActionT_contra]):
    """Carries out a half's own device actions (GPU time-slices, vfio binding), one at a time.

    `executing.execute_claim_steps` hands it every step that is not a shared plugin step.
    """

    def apply(self, action: DeviceActionT_contra) -> None:
        """Carry out `action` (idempotent); raises what its port raises."""
        ...


class CDIStore(Protocol):
    """One CDI spec file per claim in the CDI root."""

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        """Write atomically; replaces an existing spec of that claim."""
        ...

    def delete(self, claim_uid: names.ClaimUID) -> None:
        """Remove the claim's spec; idempotent."""
        ...

    def claim_uids(self) -> frozenset[names.ClaimUID]:
        """Claims that have a spec file on disk (used to rebuild a lost checkpoint)."""
        ...

    def read(self, claim_uid: names.ClaimUID) -> Mapping[str, Any] | None:
        """The spec of that claim, or None."""
        ...


class DeviceInventory(Protocol):
    """The node's GPUs as NVML sees them (real or simulated)."""

    def fabric_records(self) -> tuple[models.FabricRecord, ...]:
        """One record per GPU; an empty tuple on a node without GPUs."""
        ...

    def driver_version(self) -> str:
        """The NVIDIA driver's version as NVML reports it (e.g. "580.65.06")."""
        ...


class GpuDiscovery(Protocol):
    """The node's GPUs, MIG devices and VFIO functions (real NVML + sysfs, or simulated)."""

    def gpu_inventory(self) -> gpu_devices.GpuInventory:
        """What the node has now; raises errors.DriverError when discovery fails."""
        ...


class DriverFilesLocator(Protocol):
    """The NVIDIA driver's device nodes and user-space files under the driver root."""

    def driver_files(self) -> gpu_devices.DriverFiles:
        """What a GPU container needs mounted; raises errors.DriverError naming what is missing."""
        ...


class MigPartitioner(Protocol):
    """Creates and destroys MIG devices on the node's GPUs (dynamic MIG, gate DynamicMIG)."""

    def create_mig_device(
        self, placement: gpu_devices.MigPlacement
    ) -> gpu_devices.MigDeviceInfo:
        """Create a GPU instance at `placement` and one compute instance filling it.

        Enables MIG mode first where the GPU can without a reset. Raises
        `errors.PermanentError` where it cannot be created (unknown profile or placement,
        memory slices or engines taken, MIG mode off and needing a reset).
        """
        ...

    def destroy_mig_device(self, placement: gpu_devices.MigPlacement) -> bool:
        """Destroy the MIG device at `placement` (compute instances, then the GPU instance).

        False when there is none (idempotent). Leaves MIG mode once the GPU holds no MIG
        device, where that needs no reset.
        """
        ...


class FabricManager(Protocol):
    """NVIDIA Fabric Manager on an NVSwitch node (gate FabricManagerPartitioning): the
    partitions it supports and their activation, which programs the NVSwitches so the
    partition's GPUs reach each other over NVLink."""

    def partitions(self) -> tuple[fm_partitions.Partition, ...]:
        """Every partition Fabric Manager supports, with whether it is active now.

        Raises `errors.RetryableError` when Fabric Manager cannot be reached.
        """
        ...

    def activate(self, partition_id: int) -> None:
        """Activate the partition (idempotent: an active one is left as it is).

        Raises `errors.PermanentError` for an unknown id or one sharing GPUs with another
        active partition, `errors.RetryableError` when Fabric Manager cannot be reached.
        """
        ...

    def deactivate(self, partition_id: int) -> None:
        """Deactivate the partition (idempotent: an inactive one is left as it is).

        Raises `errors.PermanentError` for an unknown id, `errors.RetryableError` when
        Fabric Manager cannot be reached.
        """
        ...


class TimeSlicer(Protocol):
    """Applies a compute time-slice to GPUs through the driver's own tool (nvidia-smi)."""

    def set_time_slice(
        self, gpu_uuids: tuple[str, ...], interval: gpu_configs.TimeSliceInterval
    ) -> None:
        """Set the interval on each GPU; raises errors.RetryableError when the tool fails."""
        ...


class VfioBinder(Protocol):
    """Moves a PCI function between the nvidia driver and vfio-pci (gate PassthroughSupport)."""

    def bind_vfio(self, pci_bus_id: str) -> None:
        """Bind the function to vfio-pci (idempotent)."""
        ...

    def unbind_vfio(self, pci_bus_id: str) -> None:
        """Give the function back to the nvidia driver (idempotent)."""
        ...


class ComputeModeSetter(Protocol):
    """Sets the compute mode of full GPUs through the driver's own tool (nvidia-smi)."""

    def set_compute_mode(self, gpu_uuids: tuple[str, ...], mode: gpu_mps.ComputeMode) -> None:
        """Set `mode` on each GPU (idempotent); errors.RetryableError when the tool fails."""
        ...


class MpsDaemons(Protocol):
    """Runs the MPS control daemons of GPU claims on this node (gate MPSSupport)."""

    def start(self, daemon: gpu_mps.MpsDaemon) -> None:
        """Create its directories and start it, unless it already runs (idempotent)."""
        ...

    def await_ready(self, daemon_id: str) -> None:
        """Return once it is Ready; errors.RetryableError when it is not, within a bound."""
        ...

    def stop(self, daemon_id: str) -> None:
        """Stop it, wait until it is gone, remove its directories (idempotent: a daemon
        never started, or already stopped, is fine)."""
        ...


class NodeFiles(Protocol):
    """Node facts that come from procfs."""

    def proc_devices(self) -> str:
        """Text of /proc/devices."""
        ...

    def boot_id(self) -> str:
        """Contents of /proc/sys/kernel/random/boot_id, stripped."""
        ...


class DeviceHealthSource(Protocol):
    """The current health list of this plugin's published devices (`core.device_health`)."""

    def device_health(self) -> tuple[device_health.DeviceHealth, ...]:
        """The complete list, sorted; empty before anything was published."""
        ...


class GpuHealthEvents(Protocol):
    """The node's GPU health events (NVML's event loop, gate NVMLDeviceHealthCheck), watched
    in the background from `start` until `stop`."""

    def start(self, on_event: Callable[[gpu_health.HealthEvent], None]) -> None:
        """Begin watching; `on_event` is called from a background thread for every event.
        Events the watch cannot see arrive as `UNMONITORED` (for one GPU, or the node when
        the watcher itself failed), never as silence."""
        ...

    def stop(self) -> None:
        """Stop watching and wait for the background work to end (idempotent)."""
        ...


class KubeletCall(Protocol):
    """The kubelet's side of one call while the plugin works on it (a gRPC servicer context).

    NB: the kubelet gives up on a call at its deadline (45 s) or cancels it; work finished
    after that is never seen by the kubelet, so it must not leave durable state behind.
    """

    def is_active(self) -> bool:
        """Whether the kubelet still waits for the answer."""
        ...

    def time_remaining(self) -> float | None:
        """Seconds until the kubelet's deadline, or None when it set none."""
        ...


class KubeletPluginService(Protocol):
    """What the DRA gRPC servicer delegates to (implemented by the kubelet plugin app).

    A claim missing from the returned mapping tells the kubelet to retry it.
    """

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        ...

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        ...


class ContainerRuntime(Protocol):
    """The node's container runtime as the CRI shows it (`adapters.grpc.cri`)."""

    def ask(self) -> runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable:
        """Its name, version and verbose status info; Unreachable when it cannot be asked
        (never raises: a missing runtime socket is a judgment, not a crash)."""
        ...


class DeviceMetadataStore(Protocol):
    """Device metadata files and the CDI specs that mount them (gate DeviceMetadata)."""

    def write(self, planned: tuple[device_metadata.RequestMetadata, ...]) -> None:
        """Write each request's file and spec (replacing what is there); RetryableError."""
        ...

    def remove(self, *, claim_uid: names.ClaimUID, namespace: str, name: str) -> None:
        """Remove a claim's metadata files and specs; idempotent."""
        ...


class KernelModules(Protocol):
    """Kernel modules of the host (vfio-pci, or its variant, before a passthrough bind)."""

    def modules_alias(self) -> str:
        """The text of the host's modules.alias for the running kernel ("" if unreadable)."""
        ...

    def ensure_loaded(self, module: str) -> None:
        """Load `module` unless it is loaded; PermanentError (or Retryable) saying why not."""
        ...


class IommufdNodes(Protocol):
    """The iommufd node of a passthrough function bound to vfio-pci (`adapters.fs.vfio`)."""

    def iommufd_nodes(self, pci_bus_id: str) -> tuple[gpu_devices.DeviceNode, ...]:
        """`/dev/vfio/devices/vfio<N>` of the function; RetryableError while it has none."""
        ...
