"""What the plugin tells the kubelet about the health of the devices it publishes.

The kubelet's `DRAResourceHealth` stream wants, in every message, the complete list of the
driver's devices with a state each; it copies the state of allocated devices into the pod's
status (`allocatedResourcesStatus`). This module decides that list from plain values: the
devices this node publishes and, where a health monitor runs, what it observed.

Pure: the time of the determination comes in as an argument.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping

# How long the kubelet should keep a state without hearing it again. The plugin re-sends the
# list well within it (see `adapters.grpc.health_stream`), so a live plugin never goes stale.
DEFAULT_TIMEOUT_S = 60
# How long the 1.34 kubelet keeps a state, whatever the plugin sends: its v1alpha1 message has
# no `health_check_timeout_seconds` (nor `message`), it stamps each entry with its own receive
# time and reads it as Unknown 30 s later (pkg/kubelet/cm/dra/healthinfo.go: `healthTimeout`).
# Newer kubelets fall back to the same 30 s when the field is unset. The re-send interval
# must stay under this, not merely under DEFAULT_TIMEOUT_S, or a 1.34 pod's
# `allocatedResourcesStatus` flips to Unknown between two messages.
KUBELET_FIXED_TIMEOUT_S = 30
# The kubelet truncates longer messages.
MAX_MESSAGE_CHARS = 1024

NOT_MONITORED_MESSAGE = "published by the driver; no health monitor runs on this node"
NOT_OBSERVED_MESSAGE = "the health monitor has not reported on this device"


class HealthStatus(enum.Enum):
    """The three states of the kubelet's API."""

    UNKNOWN = "Unknown"
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """What a health monitor last saw of one device."""

    status: HealthStatus
    message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceHealth:
    """One entry of the kubelet's list."""

    pool: str
    device: str
    status: HealthStatus
    # Unix seconds of the determination.
    updated_at_s: int
    timeout_s: int = DEFAULT_TIMEOUT_S
    message: str = ""


def plan_device_health(
    *,
    pool: str,
    published: Iterable[str],
    observed: Mapping[str, Observation] | None,
    now_s: int,
    timeout_s: int = DEFAULT_TIMEOUT_S,
) -> tuple[DeviceHealth, ...]:
    """The health list for the devices `published` in `pool`, sorted by device name.

    `observed` None means no monitor runs: a published device is reported healthy (it was
    found and is offered). With a monitor, a device it has not reported on is unknown, never
    assumed healthy. Observations of devices not published are dropped: the kubelet knows
    only published devices. Deterministic; duplicates in `published` are reported once.
    """
    if not pool:
        raise ValueError("the pool name of the health list is empty")
    if timeout_s <= 0:
        raise ValueError(f"health timeout must be positive seconds, got {timeout_s}")
    entries = []
    for device in sorted(set(published)):
        if observed is None:
            status, message = HealthStatus.HEALTHY, NOT_MONITORED_MESSAGE
        elif device in observed:
            status, message = observed[device].status, observed[device].message
        else:
            status, message = HealthStatus.UNKNOWN, NOT_OBSERVED_MESSAGE
        entries.append(
            DeviceHealth(
                pool=pool,
                device=device,
                status=status,
                updated_at_s=now_s,
                timeout_s=timeout_s,
                message=message[:MAX_MESSAGE_CHARS],
            )
        )
    return tuple(entries)
