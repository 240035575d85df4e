"""Opaque configs of `gpu.nvidia.com` claims (`resource.nvidia.com/v1beta1`), decoded strictly.

`GpuConfig`, `MigDeviceConfig` and `VfioDeviceConfig`, with the defaulting and validation of
the upstream driver. Sharing: TimeSlicing is supported; MPS is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import enum

API_VERSION = "resource.nvidia.com/v1beta1"


class SharingStrategy(enum.StrEnum):
    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


class TimeSliceInterval(enum.StrEnum):
    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimeSlicing:
    interval: TimeSliceInterval = TimeSliceInterval.DEFAULT


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sharing:
    strategy: SharingStrategy
    # Set (defaulted) when the strategy is TimeSlicing.
    time_slicing: TimeSlicing | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuConfig:
    sharing: Sharing | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigDeviceConfig:
    sharing: Sharing | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VfioDeviceConfig:
    # IOMMU backend: "legacy" (/dev/vfio/<group>) or "iommufd"; None means upstream's default.
    iommu_backend: str | None = None


DeviceConfig = GpuConfig | MigDeviceConfig | VfioDeviceConfig
