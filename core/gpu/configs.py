"""Opaque configs of `gpu.nvidia.com` claims (`resource.nvidia.com/v1beta1`), decoded strictly.

`GpuConfig`, `MigDeviceConfig` and `VfioDeviceConfig`, with the defaulting (upstream's
`Normalize()`) and validation (upstream's `Validate()`) of the upstream driver applied at
decode time, so a decoded value is always the normalized, valid config. Sharing: TimeSlicing
(gate TimeSlicingSettings) and MPS (gate MPSSupport: a control daemon per claim, see
`core.gpu.mps`), whose `mpsConfig` limits are checked as quantities here already.
`fabricTopologyConfig` (the seed's, gate FabricTopologySupport) says which Fabric Manager
partitions a GpuConfig's GPUs form and who activates them (`core.gpu.fabric_topology`).

The prepare planner and the admission webhook both decode through `decode_device_config`, so
a config the webhook admits is one prepare accepts, with the same message when it does not.
Every error is an `errors.DecodeError` (a PermanentError) whose `field` is the path inside
`parameters` and whose message names that path and what would be accepted there.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from core import decoding, errors, models, names
from core import gates as feature_gates
from core.decoding import fail, show_value
from core.gpu import devices, pinned_memory

API_VERSION: Final = "resource.nvidia.com/v1beta1"
# The DRA driver name of the GPU half; opaque configs with this `driver` are ours.
DRIVER_NAME: Final = names.GPU_DRIVER_NAME

KIND_GPU_CONFIG: Final = "GpuConfig"
KIND_MIG_DEVICE_CONFIG: Final = "MigDeviceConfig"
KIND_VFIO_DEVICE_CONFIG: Final = "VfioDeviceConfig"
KINDS: Final = (KIND_GPU_CONFIG, KIND_MIG_DEVICE_CONFIG, KIND_VFIO_DEVICE_CONFIG)
# Kinds of the same API group that belong to the other driver (compute-domain.nvidia.com).
_COMPUTE_DOMAIN_KINDS: Final = ("ComputeDomainChannelConfig", "ComputeDomainDaemonConfig")

# Accepted JSON fields at each level, as upstream's types declare them (strict decoding).
GPU_CONFIG_FIELDS: Final = ("apiVersion", "kind", "sharing", "fabricTopologyConfig")
MIG_DEVICE_CONFIG_FIELDS: Final = ("apiVersion", "kind", "sharing")
VFIO_DEVICE_CONFIG_FIELDS: Final = ("apiVersion", "kind", "iommu")
# NB: upstream's MigDeviceSharing has no timeSlicingConfig: the interval is a property of
# the whole GPU and cannot be set for one MIG device.
GPU_SHARING_FIELDS: Final = ("strategy", "timeSlicingConfig", "mpsConfig")
MIG_SHARING_FIELDS: Final = ("strategy", "mpsConfig")
TIME_SLICING_FIELDS: Final = ("interval",)
MPS_CONFIG_FIELDS: Final = (
    "defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit",
    "defaultPerDevicePinnedMemoryLimit", "multiUser",
)
IOMMU_FIELDS: Final = ("backendPolicy", "enableAPIDevice")
FABRIC_TOPOLOGY_FIELDS: Final = (
    "strategy", "partitionSize", "virtualizationModel", "minBandwidth", "maxLatency",
    "partitionIDs",
)
# The partition sizes a fabricTopologyConfig may ask for (the seed's; HGX boards have 2-, 4-
# and 8-GPU partitions).
PARTITION_SIZES: Final = (2, 4, 8)
_DECIMAL: Final = re.compile(r"[0-9]+")



class SharingStrategy(enum.StrEnum):
    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


class TimeSliceInterval(enum.StrEnum):
    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


class IommuBackendPolicy(enum.StrEnum):
    """How a VFIO device's IOMMU backend is chosen (upstream `iommu.backendPolicy`)."""

    LEGACY_ONLY = "LegacyOnly"
    PREFER_IOMMU_FD = "PreferIommuFD"


class FabricStrategy(enum.StrEnum):
    """How a claim's Fabric Manager partitions are chosen (fabricTopologyConfig.strategy)."""

    AUTO = "Auto"
    MANUAL = "Manual"
    DISABLED = "Disabled"


class VirtualizationModel(enum.StrEnum):
    """Who activates the partitions (fabricTopologyConfig.virtualizationModel); the names are
    Fabric Manager's virtualization models."""

    BARE_METAL = "BareMetal"
    FULL_PASSTHROUGH = "FullPassthrough"
    SHARED_NVSWITCH = "SharedNVSwitch"
    VGPU = "VGPU"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FabricTopologyConfig:
    """The seed's `fabricTopologyConfig` of a GpuConfig (gate FabricTopologySupport).

    Decoded and checked on its own (fields, ranges, which fields go with which strategy);
    whether it fits the GPUs a claim was allocated is `core.gpu.fabric_topology`'s question.
    """

    strategy: FabricStrategy = FabricStrategy.AUTO
    # 2, 4 or 8: the claim's GPU count (Auto) or the size of each listed partition (Manual).
    partition_size: int | None = None
    virtualization_model: VirtualizationModel = VirtualizationModel.BARE_METAL
    # GB/s and ms as given; validated, recorded, not enforced (docs/gpus.md says why).
    min_bandwidth: float | None = None
    max_latency: float | None = None
    # Fabric Manager partition ids (Manual only), in the order given, no duplicates.
    partition_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimeSlicing:
    interval: TimeSliceInterval = TimeSliceInterval.DEFAULT


@dataclasses.dataclass(frozen=True, kw_only=True)
class MpsConfig:
    """Settings of a claim's MPS control daemon (upstream `MpsConfig`); None: the daemon's own.

    Limits are kept as the quantity strings given (validated, at least 1Mi); which device a
    per-device key names is known only once devices are allocated (`pinned_memory.normalize`).
    """

    default_active_thread_percentage: int | None = None
    default_pinned_device_memory_limit: str | None = None
    # (UUID or index, quantity), sorted by key.
    default_per_device_pinned_memory_limit: tuple[tuple[str, str], ...] = ()
    multi_user: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sharing:
    strategy: SharingStrategy
    # Set (defaulted to Default) when a GpuConfig's strategy is TimeSlicing; always None for
    # a MigDeviceConfig (the interval cannot be set per MIG device).
    time_slicing: TimeSlicing | None = None
    # Set (all fields optional) when the strategy is MPS.
    mps: MpsConfig | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuConfig:
    sharing: Sharing | None = None
    fabric_topology: FabricTopologyConfig | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigDeviceConfig:
    sharing: Sharing | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VfioDeviceConfig:
    # The IOMMU backend policy (upstream `iommu.backendPolicy`), defaulted to LegacyOnly:
    # LegacyOnly uses /dev/vfio/<group>; PreferIommuFD uses iommufd where the host has it.
    iommu_backend: IommuBackendPolicy = IommuBackendPolicy.LEGACY_ONLY
    # Whether the IOMMU API device (/dev/vfio/vfio or /dev/iommu, by backend) is added too.
    enable_api_device: bool = False


DeviceConfig = GpuConfig | MigDeviceConfig | VfioDeviceConfig

# Which config kind serves which device type (upstream matchesDeviceType).
_KIND_FOR_TYPE: Final[Mapping[str, str]] = {
    devices.GPU_TYPE: KIND_GPU_CONFIG,
    devices.MIG_TYPE: KIND_MIG_DEVICE_CONFIG,
    devices.VFIO_TYPE: KIND_VFIO_DEVICE_CONFIG,
}


_Member = TypeVar("_Member", bound=enum.StrEnum)


# ---------------------------------------------------------------- public functions


def decode_device_config(
    parameters: Mapping[str, Any], *, gates: models.FeatureGates, strict: bool = True
) -> DeviceConfig:
    """Decode, default and validate the `parameters` of a `gpu.nvidia.com` opaque config.

    strict=True (configs read from claims): an unknown field at any level is an error naming
    its path. strict=False (copies read back from a checkpoint): unknown fields are ignored,
    so a newer writer's additions do not break an older reader; every other rule holds.
    Rules (upstream api/nvidia.com/resource/v1beta1): apiVersion resource.nvidia.com/v1beta1;
    kind GpuConfig, MigDeviceConfig or VfioDeviceConfig; VfioDeviceConfig only with gate
    PassthroughSupport; sharing.strategy TimeSlicing only with gate TimeSlicingSettings, its
    interval defaulted to Default; MPS only with gate MPSSupport, its mpsConfig's thread
    percentage 0-100 and limits quantities of at least 1Mi; iommu defaulted to LegacyOnly and
    enableAPIDevice false; GpuConfig.fabricTopologyConfig only with gate FabricTopologySupport
    (`_fabric_topology` lists its rules). Deterministic; raises only errors.DecodeError, for
    any JSON value.
    """
    if not isinstance(parameters, Mapping):
        fail(
            "parameters",
            "opaque config parameters must be a JSON object, got "
            f"{decoding.json_type_name(parameters)}",
        )
    obj: Mapping[Any, Any] = parameters
    api_version = obj.get("apiVersion")
    if not (isinstance(api_version, str) and api_version == API_VERSION):
        fail(
            "apiVersion",
            f"opaque config apiVersion {show_value(api_version)} is not supported: "
            f"use {API_VERSION}",
        )
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in _COMPUTE_DOMAIN_KINDS:
        fail(
            "kind",
            f"opaque config kind {show_value(kind)} belongs to driver "
            f"compute-domain.nvidia.com, not {DRIVER_NAME}: set opaque.driver to "
            f"compute-domain.nvidia.com, or use {' or '.join(KINDS)}",
        )
    if not (isinstance(kind, str) and kind in KINDS):
        fail(
            "kind",
            f"opaque config kind {show_value(kind)} is not supported by {DRIVER_NAME}: "
            f"use {' or '.join(KINDS)}",
        )

    if kind == KIND_VFIO_DEVICE_CONFIG:
        # NB: upstream decodes it and then never matches it (no VFIO devices are published
        # without the gate); refusing here says why at apply time instead.
        gate = feature_gates.PASSTHROUGH_SUPPORT
        if not gates.enabled(gate):
            fail(
                "kind",
                f"{kind} needs feature gate {gate}, which is off: enable it "
                f"(Helm featureGates.{gate}=true) or use {KIND_GPU_CONFIG}",
            )
        _check_fields(obj, VFIO_DEVICE_CONFIG_FIELDS, path="", what=kind, strict=strict)
        return _vfio_config(obj.get("iommu"), kind=kind, strict=strict)

    gpu = kind == KIND_GPU_CONFIG
    accepted = GPU_CONFIG_FIELDS if gpu else MIG_DEVICE_CONFIG_FIELDS
    _check_fields(obj, accepted, path="", what=kind, strict=strict)
    sharing = _sharing(obj.get("sharing"), kind=kind, gpu=gpu, gates=gates, strict=strict)
    if not gpu:
        return MigDeviceConfig(sharing=sharing)
    topology = _fabric_topology(
        obj.get("fabricTopologyConfig"), kind=kind, gates=gates, strict=strict
    )
    return GpuConfig(sharing=sharing, fabric_topology=topology)


def default_config(device_type: str) -> DeviceConfig:
    """The config a device gets when no opaque config applies to it (upstream Default*Config).

    "gpu": GpuConfig without sharing; "mig": MigDeviceConfig without sharing; "vfio":
    VfioDeviceConfig with backend policy LegacyOnly and no API device. Raises PermanentError
    for any other device type.
    """
    if device_type == devices.GPU_TYPE:
        return GpuConfig()
    if device_type == devices.MIG_TYPE:
        return MigDeviceConfig()
    if device_type == devices.VFIO_TYPE:
        return VfioDeviceConfig()
    raise errors.PermanentError(_unknown_type(device_type))


def applies_to(config: DeviceConfig, *, device_type: str) -> bool:
    """Whether `config` is the kind for `device_type` (upstream matchesDeviceType).

    A config whose `requests` is empty applies to every request of the claim, but only to
    the devices of its own type: the prepare planner skips it for the others, silently.
    """
    return _KIND_FOR_TYPE.get(device_type) == kind_of(config)


def check_applies(config: DeviceConfig, *, device_type: str, request: str) -> None:
    """Raise PermanentError when `config` cannot apply to a `device_type` device of `request`.

    For a config that names `request` in its `requests`: upstream refuses a kind that does
    not match the allocated device's type (validateDeviceConfigType) instead of skipping it,
    since the person named that request on purpose. Configs with empty `requests` use
    `applies_to` instead.
    """
    if device_type not in _KIND_FOR_TYPE:
        raise errors.PermanentError(_unknown_type(device_type))
    if applies_to(config, device_type=device_type):
        return
    expected = _KIND_FOR_TYPE[device_type]
    raise errors.PermanentError(
        f"a {kind_of(config)} cannot apply to request '{request}': it was allocated a "
        f"{device_type} device, which takes a {expected}; use a {expected} for that request, "
        "or remove the request from this config's requests"
    )


def allows_sharing(config: DeviceConfig) -> bool:
    """Whether several claims may be prepared on the same device with this config.

    True for a GpuConfig or MigDeviceConfig with strategy TimeSlicing; False without sharing,
    for MPS (its control daemon belongs to one claim: the pods of that claim share the GPU
    through it, and a second claim's daemon could not run on an EXCLUSIVE_PROCESS GPU) and
    for VFIO passthrough, which hands the whole function to one VM.
    """
    if isinstance(config, VfioDeviceConfig) or config.sharing is None:
        return False
    return config.sharing.strategy is SharingStrategy.TIME_SLICING


def mps_of(config: DeviceConfig) -> MpsConfig | None:
    """The MPS settings of a config whose sharing strategy is MPS, else None."""
    if isinstance(config, VfioDeviceConfig) or config.sharing is None:
        return None
    return config.sharing.mps


def kind_of(config: DeviceConfig) -> str:
    """The `kind` of a config (GpuConfig, MigDeviceConfig or VfioDeviceConfig)."""
    if isinstance(config, GpuConfig):
        return KIND_GPU_CONFIG
    if isinstance(config, MigDeviceConfig):
        return KIND_MIG_DEVICE_CONFIG
    return KIND_VFIO_DEVICE_CONFIG


def device_config_to_k8s(config: DeviceConfig) -> dict[str, Any]:
    """The normalized `parameters` JSON of a config (every default written out).

    decode_device_config of the result gives `config` back (with the gates it needs), so
    this is how a decoded config is stored, e.g. in the checkpoint.
    """
    out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind_of(config)}
    if isinstance(config, VfioDeviceConfig):
        out["iommu"] = {
            "backendPolicy": config.iommu_backend.value,
            "enableAPIDevice": config.enable_api_device,
        }
        return out
    if config.sharing is not None:
        sharing: dict[str, Any] = {"strategy": config.sharing.strategy.value}
        if config.sharing.time_slicing is not None:
            sharing["timeSlicingConfig"] = {"interval": config.sharing.time_slicing.interval.value}
        if config.sharing.mps is not None:
            sharing["mpsConfig"] = _mps_to_k8s(config.sharing.mps)
        out["sharing"] = sharing
    if isinstance(config, GpuConfig) and config.fabric_topology is not None:
        out["fabricTopologyConfig"] = fabric_topology_to_k8s(config.fabric_topology)
    return out


def fabric_topology_to_k8s(topology: FabricTopologyConfig) -> dict[str, Any]:
    """The normalized `fabricTopologyConfig` JSON (strategy and model written out, ids as ints)."""
    out: dict[str, Any] = {
        "strategy": topology.strategy.value,
        "virtualizationModel": topology.virtualization_model.value,
    }
    if topology.partition_size is not None:
        out["partitionSize"] = topology.partition_size
    if topology.min_bandwidth is not None:
        out["minBandwidth"] = topology.min_bandwidth
    if topology.max_latency is not None:
        out["maxLatency"] = topology.max_latency
    if topology.partition_ids:
        out["partitionIDs"] = list(topology.partition_ids)
    return out


def _mps_to_k8s(mps: MpsConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mps.default_active_thread_percentage is not None:
        out["defaultActiveThreadPercentage"] = mps.default_active_thread_percentage
    if mps.default_pinned_device_memory_limit is not None:
        out["defaultPinnedDeviceMemoryLimit"] = mps.default_pinned_device_memory_limit
    if mps.default_per_device_pinned_memory_limit:
        out["defaultPerDevicePinnedMemoryLimit"] = dict(mps.default_per_device_pinned_memory_limit)
    if mps.multi_user is not None:
        out["multiUser"] = mps.multi_user
    return out


# ---------------------------------------------------------------- levels


def _sharing(
    value: object, *, kind: str, gpu: bool, gates: models.FeatureGates, strict: bool
) -> Sharing | None:
    if value is None:
        return None
    obj = _object(value, "sharing", kind)
    _check_fields(
        obj, GPU_SHARING_FIELDS if gpu else MIG_SHARING_FIELDS,
        path="sharing", what=kind, strict=strict,
    )
    strategy = obj.get("strategy")
    field = "sharing.strategy"
    known = " or ".join(member.value for member in SharingStrategy)
    if strategy is None or strategy == "":
        fail(field, f"{kind}.{field} is required: use {known}, or remove sharing")
    if strategy == SharingStrategy.MPS.value:
        return _mps_sharing(obj, kind=kind, gpu=gpu, gates=gates, strict=strict)
    if strategy != SharingStrategy.TIME_SLICING.value:
        fail(field, f"{kind}.{field} {show_value(strategy)} is not valid: use {known}")
    # NB: upstream refuses the TimeSlicing strategy as a whole without this gate (Validate),
    # whatever the interval, so the default interval is refused as well.
    gate = feature_gates.TIME_SLICING_SETTINGS
    if not gates.enabled(gate):
        fail(
            field,
            f"{kind}.{field} 'TimeSlicing' needs feature gate {gate}, which is off: enable it "
            f"(Helm featureGates.{gate}=true) or remove sharing",
        )
    if obj.get("mpsConfig") is not None:
        fail(
            "sharing.mpsConfig",
            f"{kind}.sharing.mpsConfig cannot be used with strategy TimeSlicing: remove it",
        )
    if not gpu:
        return Sharing(strategy=SharingStrategy.TIME_SLICING)
    return Sharing(
        strategy=SharingStrategy.TIME_SLICING,
        time_slicing=_time_slicing(obj.get("timeSlicingConfig"), kind=kind, strict=strict),
    )


def _mps_sharing(
    obj: Mapping[Any, Any], *, kind: str, gpu: bool, gates: models.FeatureGates, strict: bool
) -> Sharing:
    gate = feature_gates.MPS_SUPPORT
    if not gates.enabled(gate):
        fail(
            "sharing.strategy",
            f"{kind}.sharing.strategy 'MPS' needs feature gate {gate}, which is off: enable it "
            f"(Helm featureGates.{gate}=true) or use strategy TimeSlicing",
        )
    if gpu and obj.get("timeSlicingConfig") is not None:
        fail(
            "sharing.timeSlicingConfig",
            f"{kind}.sharing.timeSlicingConfig cannot be used with strategy MPS: remove it, "
            "or use strategy TimeSlicing",
        )
    return Sharing(
        strategy=SharingStrategy.MPS,
        mps=_mps_config(obj.get("mpsConfig"), kind=kind, strict=strict),
    )


def _mps_config(value: object, *, kind: str, strict: bool) -> MpsConfig:
    path = "sharing.mpsConfig"
    if value is None:
        return MpsConfig()
    obj = _object(value, path, kind)
    _check_fields(obj, MPS_CONFIG_FIELDS, path=path, what=kind, strict=strict)
    percentage = obj.get("defaultActiveThreadPercentage")
    if percentage is not None:
        field = f"{path}.defaultActiveThreadPercentage"
        if type(percentage) is not int or not 0 <= percentage <= 100:
            shown = str(percentage) if type(percentage) is int else show_value(percentage)
            fail(
                field,
                f"{kind}.{field} {shown} is not valid: use a whole number "
                "from 0 to 100 (the percentage of the GPU's threads each client may use)",
            )
    default = obj.get("defaultPinnedDeviceMemoryLimit")
    if default is not None:
        default = _limit(default, field=f"{path}.defaultPinnedDeviceMemoryLimit", kind=kind)
    per_device: list[tuple[str, str]] = []
    raw_per_device = obj.get("defaultPerDevicePinnedMemoryLimit")
    if raw_per_device is not None:
        field = f"{path}.defaultPerDevicePinnedMemoryLimit"
        entries = _object(raw_per_device, field, kind)
        for key, limit in sorted(entries.items(), key=lambda item: str(item[0])):
            per_device.append((str(key), _limit(limit, field=f"{field}.{key}", kind=kind)))
    multi_user = obj.get("multiUser")
    if multi_user is not None and not isinstance(multi_user, bool):
        field = f"{path}.multiUser"
        fail(field, f"{kind}.{field} must be true or false, got "
             f"{decoding.json_type_name(multi_user)}")
    return MpsConfig(
        default_active_thread_percentage=percentage,
        default_pinned_device_memory_limit=default,
        default_per_device_pinned_memory_limit=tuple(per_device),
        multi_user=multi_user,
    )


def _limit(value: object, *, field: str, kind: str) -> str:
    """A pinned memory limit: a quantity (string, or JSON number) of at least 1Mi."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        fail(field, f"{kind}.{field} must be a quantity such as \"10Gi\", got "
             f"{decoding.json_type_name(value)}")
    text = value if isinstance(value, str) else str(value)
    try:
        pinned_memory.limit_value(text)
    except ValueError as exc:
        fail(field, f"{kind}.{field}: {exc}")
    return text


def _time_slicing(value: object, *, kind: str, strict: bool) -> TimeSlicing:
    path = "sharing.timeSlicingConfig"
    if value is None:
        return TimeSlicing()
    obj = _object(value, path, kind)
    _check_fields(obj, TIME_SLICING_FIELDS, path=path, what=kind, strict=strict)
    interval = obj.get("interval")
    if interval is None:
        # NB: upstream leaves a nil interval in an explicit timeSlicingConfig; Default is what
        # applying it would mean.
        return TimeSlicing()
    field = f"{path}.interval"
    for member in TimeSliceInterval:
        if interval == member.value:
            return TimeSlicing(interval=member)
    fail(
        field,
        f"{kind}.{field} {show_value(interval)} is not valid: use "
        f"{' or '.join(member.value for member in TimeSliceInterval)}",
    )


def _fabric_topology(
    value: object, *, kind: str, gates: models.FeatureGates, strict: bool
) -> FabricTopologyConfig | None:
    """Rules: gate FabricTopologySupport; strategy Auto (default), Manual or Disabled;
    virtualizationModel BareMetal (default), FullPassthrough, SharedNVSwitch or VGPU;
    partitionSize 2, 4 or 8 (not with Disabled); minBandwidth/maxLatency non-negative numbers;
    partitionIDs (Manual only, and required there) distinct partition ids, ints or decimal
    strings."""
    path = "fabricTopologyConfig"
    if value is None:
        return None
    gate = feature_gates.FABRIC_TOPOLOGY_SUPPORT
    if not gates.enabled(gate):
        fail(
            path,
            f"{kind}.{path} needs feature gate {gate}, which is off: enable it (Helm "
            f"featureGates.{gate}=true, with featureGates."
            f"{feature_gates.FABRIC_MANAGER_PARTITIONING}=true) or remove {path}",
        )
    obj = _object(value, path, kind)
    _check_fields(obj, FABRIC_TOPOLOGY_FIELDS, path=path, what=kind, strict=strict)
    strategy = _member(
        obj.get("strategy"), FabricStrategy, FabricStrategy.AUTO,
        field=f"{path}.strategy", kind=kind,
    )
    model = _member(
        obj.get("virtualizationModel"), VirtualizationModel, VirtualizationModel.BARE_METAL,
        field=f"{path}.virtualizationModel", kind=kind,
    )
    size = obj.get("partitionSize")
    if size is not None:
        field = f"{path}.partitionSize"
        if type(size) is not int or size not in PARTITION_SIZES:
            shown = str(size) if type(size) is int else show_value(size)
            fail(
                field,
                f"{kind}.{field} {shown} is not valid: use "
                f"{', '.join(map(str, PARTITION_SIZES))} (GPUs per partition)",
            )
        if strategy is FabricStrategy.DISABLED:
            fail(
                field,
                f"{kind}.{field} has no effect with strategy Disabled: remove it, or use "
                "strategy Auto",
            )
    bandwidth = _non_negative(obj.get("minBandwidth"), field=f"{path}.minBandwidth",
                              kind=kind, unit="GB/s")
    latency = _non_negative(obj.get("maxLatency"), field=f"{path}.maxLatency",
                            kind=kind, unit="ms")
    ids = _partition_ids(obj.get("partitionIDs"), field=f"{path}.partitionIDs", kind=kind)
    if strategy is FabricStrategy.MANUAL and not ids:
        fail(
            f"{path}.partitionIDs",
            f"{kind}.{path}.partitionIDs is required with strategy Manual: list the Fabric "
            "Manager partition ids the claim's GPUs form (the values of their "
            "gpu.nvidia.com/partition<N> attributes), or use strategy Auto",
        )
    if strategy is not FabricStrategy.MANUAL and ids:
        fail(
            f"{path}.partitionIDs",
            f"{kind}.{path}.partitionIDs can only be used with strategy Manual (strategy is "
            f"{strategy.value}): set strategy Manual, or remove partitionIDs",
        )
    return FabricTopologyConfig(
        strategy=strategy,
        partition_size=size,
        virtualization_model=model,
        min_bandwidth=bandwidth,
        max_latency=latency,
        partition_ids=ids,
    )


def _member(
    value: object, members: type[_Member], default: _Member, *, field: str, kind: str
) -> _Member:
    """The enum member `value` names exactly; `default` when missing or empty."""
    if value is None or value == "":
        return default
    for member in members:
        if value == member.value:
            return member
    fail(
        field,
        f"{kind}.{field} {show_value(value)} is not valid: use "
        f"{' or '.join(member.value for member in members)}",
    )


def _non_negative(value: object, *, field: str, kind: str, unit: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(field, f"{kind}.{field} must be a number ({unit}), got "
             f"{decoding.json_type_name(value)}")
    if not math.isfinite(value) or value < 0:
        fail(field, f"{kind}.{field} {value} is not valid: use a number of {unit} of 0 or more")
    return float(value)


def _partition_ids(value: object, *, field: str, kind: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        fail(field, f"{kind}.{field} must be a list of partition ids, got "
             f"{decoding.json_type_name(value)}")
    ids: list[int] = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if type(item) is int and item >= 0:
            partition_id = item
        elif isinstance(item, str) and _DECIMAL.fullmatch(item):
            partition_id = int(item)
        else:
            shown = str(item) if type(item) is int else show_value(item)
            fail(
                where,
                f"{kind}.{where} {shown} is not a Fabric Manager partition id: use the "
                "partition's number as Fabric Manager reports it (the value of the GPUs' "
                "gpu.nvidia.com/partition<N> attributes), e.g. 1 or \"1\"",
            )
        if partition_id in ids:
            fail(where, f"{kind}.{where} {partition_id} is listed twice: list each once")
        ids.append(partition_id)
    return tuple(ids)


def _vfio_config(value: object, *, kind: str, strict: bool) -> VfioDeviceConfig:
    if value is None:
        return VfioDeviceConfig()
    obj = _object(value, "iommu", kind)
    _check_fields(obj, IOMMU_FIELDS, path="iommu", what=kind, strict=strict)
    policy = IommuBackendPolicy.LEGACY_ONLY
    raw_policy = obj.get("backendPolicy")
    if raw_policy is not None and raw_policy != "":
        field = "iommu.backendPolicy"
        for member in IommuBackendPolicy:
            if raw_policy == member.value:
                policy = member
                break
        else:
            fail(
                field,
                f"{kind}.{field} {show_value(raw_policy)} is not valid: use "
                f"{' or '.join(member.value for member in IommuBackendPolicy)}",
            )
    enable = obj.get("enableAPIDevice")
    if enable is not None and not isinstance(enable, bool):
        field = "iommu.enableAPIDevice"
        fail(
            field,
            f"{kind}.{field} must be true or false, got {decoding.json_type_name(enable)}",
        )
    return VfioDeviceConfig(iommu_backend=policy, enable_api_device=bool(enable))


# ---------------------------------------------------------------- field readers


def _object(value: object, path: str, kind: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        fail(
            path,
            f"{kind}.{path} must be an object, got {decoding.json_type_name(value)}",
        )
    return value


def _check_fields(
    obj: Mapping[Any, Any], accepted: tuple[str, ...], *, path: str, what: str, strict: bool
) -> None:
    """Refuse unknown fields (strict only), naming each by its path, first one as `field`."""
    if not strict:
        return
    unknown = sorted(str(key) for key in obj if not (isinstance(key, str) and key in accepted))
    if not unknown:
        return
    paths = [f"{path}.{key}" if path else key for key in unknown]
    where = f"{what}.{path}" if path else what
    fail(paths[0], decoding.unknown_fields_message(paths, where=where, accepted=accepted))


def _unknown_type(device_type: str) -> str:
    return (
        f"unknown GPU device type {show_value(device_type)}: the GPU half knows "
        f"{', '.join(_KIND_FOR_TYPE)}; this is a driver bug, report it"
    )
