"""Is this node's NVLink fabric healthy? Fabric records in, taints and health states out.

The kubelet plugin re-reads the fabric with the clique (`cliques.CLIQUE_REFRESH_INTERVAL_S`).
A node is degraded when a GPU's fabric is supported but not usable: registration NOT_STARTED or
IN_PROGRESS, or COMPLETED with an error status — the GPUs `cliques.unusable_fabric` names, which
gate CrashOnNVLinkFabricErrors refuses at start. A GPU without multi-node fabric (an H100, an
all-zero cluster UUID) degrades nothing: such a node has no clique to lose.

While degraded, every device the node publishes (channels, daemon devices, channel-isolation
slots: all of them need the fabric) carries taint `compute-domain.nvidia.com/fabric-degraded`,
`NoSchedule`, with a short reason as value (`Failed`, `NotStarted`, `InProgress`), is reported
Unhealthy in the kubelet's health stream, and the node's IMEX daemon reports its entry
NotReady to its ComputeDomain. Nothing is evicted: running workloads keep their channels.

The plugin hands its judgment to the node's driver-managed IMEX daemons as a small JSON file,
`fabric-health.json`, in each per-domain directory (`encode` / `decode`): a daemon pod is given
no NVML of its own.

Pure: no clocks, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Final

from core import device_health, device_taints, errors, models, names
from core.computedomain import cliques

TAINT_KEY: Final = f"{names.DRIVER_NAME}/fabric-degraded"

# Taint values (label values: short, no spaces), the most severe first.
REASON_FAILED: Final = "Failed"
REASON_NOT_STARTED: Final = "NotStarted"
REASON_IN_PROGRESS: Final = "InProgress"
_SEVERITY: Final = (REASON_FAILED, REASON_NOT_STARTED, REASON_IN_PROGRESS)

# As `nvidia-smi -q` names the states (its Fabric section), so logs read like what it prints.
_STATE_NAMES: Final = {
    models.FabricState.NOT_SUPPORTED: "NotSupported",
    models.FabricState.NOT_STARTED: "NotStarted",
    models.FabricState.IN_PROGRESS: "InProgress",
    models.FabricState.COMPLETED: "Completed",
}

# The plugin's judgment as the node's IMEX daemons read it, in each per-domain directory.
FILE_NAME: Final = "fabric-health.json"

HEALTHY_MESSAGE: Final = (
    "NVLink fabric: no GPU of this node reports an incomplete or failed registration"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DegradedGpu:
    """One GPU whose fabric is supported but not usable."""

    gpu_uuid: str
    state: models.FabricState
    status_ok: bool

    @property
    def reason(self) -> str:
        if self.state is models.FabricState.COMPLETED:
            return REASON_FAILED  # completed, yet with an error status
        if self.state is models.FabricState.NOT_STARTED:
            return REASON_NOT_STARTED
        return REASON_IN_PROGRESS

    def __str__(self) -> str:
        status = "" if self.status_ok else " status=error"
        return f"{self.gpu_uuid} state={_STATE_NAMES[self.state]}{status}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FabricHealth:
    """The judgment of one read of the node's fabric records."""

    degraded: tuple[DegradedGpu, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.degraded

    @property
    def reason(self) -> str:
        """The most severe reason among the degraded GPUs ("" when healthy)."""
        found = {gpu.reason for gpu in self.degraded}
        return next((reason for reason in _SEVERITY if reason in found), "")

    def describe(self) -> str:
        """Which GPUs, in what state ("" when healthy), e.g. `GPU-1 state=InProgress`."""
        return "; ".join(str(gpu) for gpu in self.degraded)


# What is known before the first read succeeds: nothing wrong (as before fabric health was
# judged at all); a read that fails later keeps the last judgment instead.
NOT_JUDGED: Final = FabricHealth()


def judge(records: Sequence[models.FabricRecord]) -> FabricHealth:
    """Healthy unless some GPU's fabric is supported but not usable; deterministic (the
    degraded GPUs are sorted by UUID)."""
    return FabricHealth(degraded=tuple(
        DegradedGpu(gpu_uuid=r.gpu_uuid, state=r.state, status_ok=r.status_ok)
        for r in cliques.unusable_fabric(records)
    ))


def taint(health: FabricHealth) -> device_taints.DeviceTaint | None:
    """The taint every published device carries while `health` is degraded; None if healthy."""
    if health.healthy:
        return None
    return device_taints.DeviceTaint(key=TAINT_KEY, value=health.reason,
                                     effect=device_taints.TaintEffect.NO_SCHEDULE)


def device_taints_of(
    health: FabricHealth, published: Iterable[str]
) -> dict[str, tuple[device_taints.DeviceTaint, ...]]:
    """The taints of each published device (empty while healthy)."""
    found = taint(health)
    if found is None:
        return {}
    return {device: (found,) for device in sorted(set(published))}


def observations(
    health: FabricHealth, published: Iterable[str]
) -> dict[str, device_health.Observation]:
    """What the kubelet's health stream says of each published device: Unhealthy, naming the
    GPUs and the taint, while degraded; Healthy otherwise."""
    found = taint(health)
    if found is None:
        observed = device_health.Observation(
            status=device_health.HealthStatus.HEALTHY, message=HEALTHY_MESSAGE)
    else:
        observed = device_health.Observation(
            status=device_health.HealthStatus.UNHEALTHY,
            message=f"NVLink fabric degraded ({health.describe()}): tainted {found}",
        )
    return {device: observed for device in sorted(set(published))}


def daemon_status(imex: models.DomainStatus, health: FabricHealth) -> models.DomainStatus:
    """What the node's IMEX daemon reports in its ComputeDomain entry: what nvidia-imex says,
    but never Ready while the node's fabric is degraded (its peers cannot reach it over
    NVLink, whatever the daemon process answers)."""
    return imex if health.healthy else models.DomainStatus.NOT_READY


def encode(health: FabricHealth) -> bytes:
    """`health` as the JSON of `FILE_NAME` (sorted keys, one trailing newline).

    `healthy` and `reason` are for a human reading the file; `decode` trusts `degraded` alone.
    """
    document = {
        "healthy": health.healthy,
        "reason": health.reason,
        "degraded": [
            {"gpuUUID": gpu.gpu_uuid, "state": _STATE_NAMES[gpu.state],
             "statusOk": gpu.status_ok}
            for gpu in health.degraded
        ],
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


_STATES_BY_NAME: Final = {name: state for state, name in _STATE_NAMES.items()}


def decode(data: bytes | str) -> FabricHealth:
    """What `encode` wrote; unknown fields are ignored. DecodeError (naming the field) for
    anything that is not such a document: a file that cannot be read is no judgment."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.DecodeError(f"{FILE_NAME} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise errors.DecodeError(f"{FILE_NAME} is not a JSON object")
    entries = document.get("degraded", [])
    if not isinstance(entries, list):
        raise errors.DecodeError(f"{FILE_NAME}: degraded is not a list", field="degraded")
    degraded: list[DegradedGpu] = []
    for index, entry in enumerate(entries):
        field = f"degraded[{index}]"
        if not isinstance(entry, dict):
            raise errors.DecodeError(f"{FILE_NAME}: {field} is not an object", field=field)
        uuid, state, status_ok = entry.get("gpuUUID"), entry.get("state"), entry.get("statusOk")
        if not isinstance(uuid, str) or not uuid:
            raise errors.DecodeError(f"{FILE_NAME}: {field}.gpuUUID is not a non-empty string",
                                     field=f"{field}.gpuUUID")
        found = _STATES_BY_NAME.get(state) if isinstance(state, str) else None
        if found is None or found is models.FabricState.NOT_SUPPORTED:
            raise errors.DecodeError(
                f"{FILE_NAME}: {field}.state {state!r} is not one of NotStarted, InProgress, "
                "Completed", field=f"{field}.state")
        if not isinstance(status_ok, bool):
            raise errors.DecodeError(f"{FILE_NAME}: {field}.statusOk is not a boolean",
                                     field=f"{field}.statusOk")
        if found is models.FabricState.COMPLETED and status_ok:
            raise errors.DecodeError(
                f"{FILE_NAME}: {field} is Completed with an ok status, which degrades nothing",
                field=field)
        degraded.append(DegradedGpu(gpu_uuid=uuid, state=found, status_ok=status_ok))
    return FabricHealth(degraded=tuple(sorted(degraded, key=lambda gpu: gpu.gpu_uuid)))
