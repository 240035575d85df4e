"""The driver's vocabulary: frozen, typed values that every planner takes and returns.

Kubernetes JSON stops at the decoders (`core.decoding`) and the object builders
(`core.computedomain.objects`); between them only these dataclasses flow.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from core import names

JSONObject = dict[str, Any]


class IMEXMode(enum.StrEnum):
    """Who runs `nvidia-imex`: the driver (one DaemonSet per CD) or the host (systemd)."""

    DRIVER_MANAGED = "driverManaged"
    HOST_MANAGED = "hostManaged"


class Isolation(enum.StrEnum):
    """How ComputeDomains sharing one fabric are kept apart."""

    DOMAIN = "domain"
    CHANNEL = "channel"
    NONE = "none"


class AllocationMode(enum.StrEnum):
    SINGLE = "Single"
    ALL = "All"


class DomainStatus(enum.StrEnum):
    READY = "Ready"
    NOT_READY = "NotReady"


# ---------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True, kw_only=True)
class FeatureGates:
    """Resolved feature gates: every known gate with its effective value."""

    values: Mapping[str, bool]

    def enabled(self, gate: str) -> bool:
        return self.values.get(gate, False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverConfig:
    """Everything install-wide that planners need: the validated mode matrix and gates."""

    mode: IMEXMode
    isolation: Isolation
    gates: FeatureGates
    namespace: str = "nvidia-dra-driver"
    # Host IMEX readiness probe (hostManaged, optional).
    host_imex_check: bool = False
    # Image of the per-CD IMEX daemon pods (driver-managed only).
    daemon_image: str = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
    # ServiceAccount of the IMEX daemon pods (driver-managed; the chart creates it). "" = default.
    daemon_service_account: str = ""
    # Channel isolation: IDs 1..max_channels-1 are assigned (chart imex.channels.max).
    max_channels: int = 2048
    # Channel isolation: slot devices each node publishes (chart imex.channels.slotsPerNode).
    channel_slots: int = 8

    @property
    def channel_isolation(self) -> bool:
        """hostManaged + isolation channel: one IMEX channel per ComputeDomain."""
        return self.mode is IMEXMode.HOST_MANAGED and self.isolation is Isolation.CHANNEL

    @property
    def host_managed(self) -> bool:
        return self.mode is IMEXMode.HOST_MANAGED


# ---------------------------------------------------------------- ComputeDomain


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectMeta:
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    deletion_timestamp: str | None = None
    finalizers: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelSpec:
    resource_claim_template_name: str
    allocation_mode: AllocationMode = AllocationMode.SINGLE


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainSpec:
    channel: ChannelSpec
    num_nodes: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainNode:
    name: str
    ip_address: str
    clique_id: str
    index: int = 0
    status: DomainStatus = DomainStatus.NOT_READY


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainStatus:
    status: DomainStatus = DomainStatus.NOT_READY
    nodes: tuple[ComputeDomainNode, ...] = ()
    # Channel isolation: the IMEX channel the controller assigned (`status.channelID`).
    channel_id: int | None = None
    # Channel isolation: why this CD may not use its channel for new prepares (the message of
    # its `ChannelUnique=False` condition: a later duplicate whose claims already carry it);
    # "" when it may. Read from status.conditions, never written with the status (not compared).
    channel_conflict: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomain:
    meta: ObjectMeta
    spec: ComputeDomainSpec
    status: ComputeDomainStatus | None = None

    @property
    def uid(self) -> names.ComputeDomainUID:
        return names.ComputeDomainUID(self.meta.uid)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliqueDaemon:
    node_name: str
    ip_address: str
    clique_id: str
    index: int = 0
    status: DomainStatus = DomainStatus.NOT_READY


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeDomainClique:
    """`<cdUID>.<cliqueID>` in the driver namespace; daemons are top-level (not in status)."""

    meta: ObjectMeta
    daemons: tuple[CliqueDaemon, ...] = ()


# ---------------------------------------------------------------- opaque configs


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelConfig:
    """`ComputeDomainChannelConfig`. allocation_mode is kept raw: validity depends on the mode."""

    domain_id: str
    allocation_mode: str = ""
    # Channel isolation: the channel of the ComputeDomain the RCT was made for (`channelID`).
    channel_id: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaemonConfig:
    """`ComputeDomainDaemonConfig`."""

    domain_id: str


OpaqueConfig = ChannelConfig | DaemonConfig


# ---------------------------------------------------------------- claims


class ConfigSource(enum.StrEnum):
    """Where an opaque config came from; class configs apply before claim configs."""

    CLASS = "FromClass"
    CLAIM = "FromClaim"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RawOpaqueConfig:
    """One `status.allocation.devices.config[]` entry, parameters still JSON."""

    source: ConfigSource
    requests: tuple[str, ...]
    driver: str
    parameters: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceResult:
    """One `status.allocation.devices.results[]` entry."""

    request: str
    driver: str
    pool: str
    device: str
    # `adminAccess: true`: monitoring or debugging access beside whoever else holds the
    # device (the namespace must allow it, the API server checks); never exclusive.
    admin_access: bool = False
    # `shareID`: set by the scheduler on each allocation of a device that allows several
    # (consumable capacity, KEP-5075); one claim may hold several shares of one device.
    share_id: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimConsumer:
    """One entry of a claim's `status.reservedFor`: who may use the claim right now."""

    resource: str
    name: str
    uid: str
    api_group: str = ""

    @property
    def is_pod(self) -> bool:
        return self.api_group == "" and self.resource == "pods"


@dataclasses.dataclass(kw_only=True, frozen=True)
class PodPlacement:
    """Where a pod named in `reservedFor` runs now: `node_name` "" when it is gone or unbound."""

    uid: str
    node_name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceClaim:
    """The view of a ResourceClaim that the plugin needs to prepare it."""

    uid: names.ClaimUID
    namespace: str
    name: str
    allocated: bool
    results: tuple[DeviceResult, ...] = ()
    configs: tuple[RawOpaqueConfig, ...] = ()
    reserved_for: tuple[ClaimConsumer, ...] = ()
    # The pod's name for a claim made from a ResourceClaimTemplate (annotation
    # `resource.kubernetes.io/pod-claim-name`, set by the resource claim controller); "" else.
    pod_claim_name: str = ""


# ---------------------------------------------------------------- node


class FabricState(enum.IntEnum):
    """NVML `nvmlGpuFabricState_t`."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class FabricRecord:
    """What NVML reports of one GPU's NVLink fabric membership."""

    gpu_uuid: str
    state: FabricState
    cluster_uuid: bytes = b"\x00" * 16
    clique_id: int = 0
    status_ok: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeFacts:
    """What every kubelet plugin knows of its node: its name and the boot it runs in (a
    reboot drops prepared state). The ComputeDomain half's planners take
    `computedomain.node_facts.ImexNodeFacts`, which adds the node's IMEX facts."""

    node_name: names.NodeName
    boot_id: str


# ---------------------------------------------------------------- checkpoint


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    PREPARE_ABORTED = "PrepareAborted"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreparedDevice:
    """One device of a kubelet prepare response, as recorded in the checkpoint."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    # The allocation result's `shareID`, echoed to the kubelet (DRA v1 `share_id`); "" none.
    share_id: str = ""


# A half's own record of one prepared claim (what it must remember beyond the shared fields):
# `computedomain.checkpoint_records.ComputeDomainClaimRecord`,
# `gpu.checkpoint_records.GpuClaimRecord`.
P = TypeVar("P")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointEntry(Generic[P]):
    """One claim's prepare record: the fields both halves share and the half's own `record`.

    `extra` keeps fields a newer writer added (downgrade safety).
    """

    claim_uid: names.ClaimUID
    namespace: str
    name: str
    state: ClaimState
    record: P
    devices: tuple[PreparedDevice, ...] = ()
    # Epoch seconds of the last change, passed in by the caller (no clocks in core).
    updated_at: float = 0.0
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class RecordCodec(Protocol[P]):
    """How one half's records are written into, and read from, checkpoint entries.

    `core.checkpoint` stays free of either half's fields: it calls these for the part of an
    entry that belongs to the half. Decoders raise ValueError (or TypeError) on a bad shape.
    """

    @property
    def key(self) -> str:
        """The entry member that holds the record (format version 2)."""

    @property
    def legacy_fields(self) -> frozenset[str]:
        """Entry members of format version 1 that `decode_legacy` reads."""

    def encode(self, record: P) -> dict[str, Any]:
        """The record as JSON (plain dicts, lists, strings, numbers, booleans)."""

    def decode(self, raw: Any) -> P:
        """The record from what `encode` wrote."""

    def decode_legacy(self, entry: Mapping[str, Any]) -> P:
        """The record from a format-version-1 entry (the whole entry object)."""

    def encode_legacy(self, record: P) -> dict[str, Any]:
        """The entry members format version 1 wrote for the record (for a downgrade)."""

    def legacy_header(self, records: Sequence[P]) -> Mapping[str, Any]:
        """The header members format version 1 requires beside `bootID` and `entries`, for
        a checkpoint holding `records` (in entry order)."""

    def tallies(self, record: P) -> tuple[Hashable, ...]:
        """Keys counted in the checkpoint's index while an entry with this record holds
        its devices (PrepareStarted/PrepareCompleted): the half's O(1) conflict checks."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Checkpoint(Generic[P]):
    """The plugin's durable state on one node (DESIGN §5), of one half (`codec`)."""

    boot_id: str
    codec: RecordCodec[P] = dataclasses.field(compare=False, repr=False)
    entries: Mapping[names.ClaimUID, CheckpointEntry[P]] = dataclasses.field(
        default_factory=dict
    )
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The format version the file this was read from had (`checkpoint.VERSION` when built
    # here): an older one is rewritten before anything is appended to its journal.
    format_version: int = dataclasses.field(default=2, compare=False)
    # Whether the snapshot this was read from says a journal follows it (see
    # `checkpoint.JOURNALED_FIELD`); False for anything built here.
    journal_expected: bool = dataclasses.field(default=False, compare=False, repr=False)
    # Summaries of `entries` kept up to date by the transitions in `core.checkpoint`, so the
    # planner's checks cost O(1) at any node size. Valid only while `index.entries is
    # entries` (a `dataclasses.replace` with new entries makes it stale; readers rebuild).
    index: CheckpointIndex[P] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointIndex(Generic[P]):
    """Counts over the entries."""

    # The mapping these counts describe (identity, not equality, is what makes them valid).
    entries: Mapping[names.ClaimUID, CheckpointEntry[P]]
    # The half's keys (`RecordCodec.tallies`) -> holding entries (PrepareStarted/Completed).
    tallies: Mapping[Hashable, int]
    # Claims with a PrepareAborted tombstone.
    tombstones: frozenset[names.ClaimUID]
    # Devices of PrepareCompleted entries (the prepared-devices gauge).
    prepared_devices: int


# ---------------------------------------------------------------- plugin actions


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteCheckpoint(Generic[P]):
    checkpoint: Checkpoint[P]
    # The claims whose entries this write changes, when the planner knows them (the store
    # then logs only those); None: compare with the stored state (O(claims)).
    # A hint about how to write, not part of what is written: equality ignores it.
    changed: tuple[names.ClaimUID, ...] | None = dataclasses.field(default=None, compare=False)
    # False for a write no answer to the kubelet rests on (a prepare's PrepareStarted): it is
    # flushed with the next durable write of the same journal instead of paying its own sync.
    durable: bool = dataclasses.field(default=True, compare=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteCDISpec:
    claim_uid: names.ClaimUID
    spec: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteCDISpec:
    claim_uid: names.ClaimUID




@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimOutcome(Generic[P]):
    """What prepare/unprepare of one claim decided: steps to run in order, then the answer.

    Exactly one of `devices` and `error` is meaningful: `error is None` means success.
    `checkpoint` is the state after all steps ran (feed it to the next claim's planner).
    """

    steps: tuple[PluginAction[P], ...]
    checkpoint: Checkpoint[P]
    devices: tuple[PreparedDevice, ...] = ()
    error: Exception | None = None


# ---------------------------------------------------------------- cluster actions


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectRef:
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateObject:
    kind: str
    obj: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchObject:
    """A JSON merge patch. `resource_version` set means optimistic concurrency (409 on race)."""

    kind: str
    namespace: str
    name: str
    patch: Mapping[str, Any]
    subresource: str = ""
    resource_version: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteObject:
    kind: str
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmitEvent:
    involved: ObjectRef
    reason: str
    message: str
    warning: bool = True


ClusterAction = CreateObject | PatchObject | DeleteObject | EmitEvent

# Plugin steps: mostly node-local files; PatchObject/EmitEvent for the node label
# (driver-managed) and the pod-facing events of permanent errors.
PluginAction = WriteCheckpoint[P] | WriteCDISpec | DeleteCDISpec | PatchObject | EmitEvent
# The same, for isinstance checks (a parameterized alias cannot be one's second argument).
PLUGIN_ACTION_TYPES: tuple[type, ...] = (
    WriteCheckpoint, WriteCDISpec, DeleteCDISpec, PatchObject, EmitEvent,
)


# ---------------------------------------------------------------- kubelet calls


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources/NodeUnprepareResources."""

    uid: names.ClaimUID
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimResult:
    """Per-claim answer to the kubelet: devices, or an error string (never both)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
