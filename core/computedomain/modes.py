"""The IMEX mode/isolation matrix (DESIGN §1): raw settings in, one validated DriverConfig out.

Both the controller and the kubelet plugin start by calling `resolve_driver_config`; any
invalid combination stops the process with one message saying what to set instead. The
Helm chart renders the same messages at install time, so they are module constants here
and must not be reworded casually (tests compare them exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from core import errors, gates, models
from core.computedomain import channels

HOST_MANAGED_NEEDS_GATE: Final = (
    "IMEX mode hostManaged requires feature gate HostManagedIMEXDaemon=true: "
    "set featureGates.HostManagedIMEXDaemon=true (Helm) or "
    "FEATURE_GATES=HostManagedIMEXDaemon=true, or use mode driverManaged"
)
DEFAULT_CHANNEL_SLOTS: Final = 8
MAX_CHANNEL_SLOTS: Final = 128

# Gates that only make sense when the driver runs the IMEX daemons; hostManaged forces them off.
HOST_MANAGED_FORCED_OFF: Final = (gates.COMPUTE_DOMAIN_CLIQUES, gates.IMEX_DAEMONS_WITH_DNS_NAMES)


def host_managed_channel_grant(config: models.DriverConfig) -> str:
    """What host-managed IMEX gives one workload, for the messages that explain why a
    ComputeDomain's `allocationMode: All` becomes `Single`."""
    if config.channel_isolation:
        return (
            "every workload its ComputeDomain's own IMEX channel only (isolation: channel; "
            "the channel in the ComputeDomain's status.channelID)"
        )
    return "every workload channel 0 only"


def unknown_mode_message(mode: str) -> str:
    return f"unknown IMEX mode '{mode}': use driverManaged or hostManaged"


def unknown_isolation_message(isolation: str) -> str:
    return (
        f"unknown IMEX isolation '{isolation}': use domain or channel "
        "(none is accepted as an old name of domain under hostManaged)"
    )


def driver_managed_isolation_message(isolation: str) -> str:
    return (
        f"isolation '{isolation}' is only valid with mode hostManaged: "
        "with mode driverManaged leave isolation empty or set it to 'domain'"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolvedConfig:
    """A validated configuration plus the notes the app logs once at startup."""

    config: models.DriverConfig
    notes: tuple[str, ...] = ()


def resolve_driver_config(
    *,
    mode: str,
    isolation: str,
    feature_gates: str | Mapping[str, bool],
    namespace: str,
    host_imex_check: bool = False,
    daemon_image: str | None = None,
    daemon_service_account: str = "",
    max_channels: int = channels.DEFAULT_MAX_CHANNELS,
    channel_slots: int = DEFAULT_CHANNEL_SLOTS,
) -> ResolvedConfig:
    """Validate the mode/isolation/gates triple and return the effective DriverConfig.

    Order matters and is fixed: gates are parsed; the mode is checked (empty means
    driverManaged); in hostManaged the HostManagedIMEXDaemon gate is required and the
    driver-daemon gates are forced off (reported in `notes`) *before* gate dependencies
    are validated; then the isolation matrix is applied; channel-isolation sizes are
    range-checked last (in every mode, so a bad value never waits for a mode change to
    surface). As upstream, the HostManagedIMEXDaemon gate (alias HostManagedIMEX; AllAlpha
    sets it too) only unlocks hostManaged: on with driverManaged is valid. Raises
    ConfigError. Deterministic and pure.
    """
    explicit = (
        gates.parse_feature_gates(feature_gates)
        if isinstance(feature_gates, str)
        else gates.canonical_gates(feature_gates)
    )
    resolved = gates.resolve_gates(explicit)
    imex_mode = _parse_mode(mode)

    notes: list[str] = []
    if imex_mode is models.IMEXMode.HOST_MANAGED:
        if not resolved.enabled(gates.HOST_MANAGED_IMEX):
            raise errors.ConfigError(HOST_MANAGED_NEEDS_GATE)
        resolved, note = _force_host_managed_gates(resolved, explicit=explicit)
        if note:
            notes.append(note)
    gates.validate_gate_dependencies(resolved)

    config = models.DriverConfig(
        mode=imex_mode,
        isolation=_resolve_isolation(imex_mode, isolation.strip()),
        gates=resolved,
        namespace=namespace,
        host_imex_check=host_imex_check,
        daemon_service_account=daemon_service_account,
        max_channels=max_channels,
        channel_slots=channel_slots,
    )
    channels.check_max_channels(max_channels)
    if not 1 <= channel_slots <= MAX_CHANNEL_SLOTS:
        raise errors.ConfigError(
            f"imex.channels.slotsPerNode is {channel_slots}: it must be 1..{MAX_CHANNEL_SLOTS} "
            "(the ComputeDomain pods one node can run under channel isolation)"
        )
    if daemon_image is not None:
        config = dataclasses.replace(config, daemon_image=daemon_image)
    return ResolvedConfig(config=config, notes=tuple(notes))


def describe(config: models.DriverConfig) -> str:
    """One key=value line for the startup log."""
    return (
        f"mode={config.mode.value} isolation={config.isolation.value} "
        f"namespace={config.namespace} host_imex_check={str(config.host_imex_check).lower()} "
        f"feature_gates={gates.format_feature_gates(config.gates)}"
    )


def _parse_mode(mode: str) -> models.IMEXMode:
    value = mode.strip()
    if not value:
        return models.IMEXMode.DRIVER_MANAGED
    for candidate in models.IMEXMode:
        if candidate.value == value:
            return candidate
    raise errors.ConfigError(unknown_mode_message(mode))


def _force_host_managed_gates(
    resolved: models.FeatureGates, *, explicit: Mapping[str, bool]
) -> tuple[models.FeatureGates, str]:
    """Turn off the driver-daemon gates; the note names only gates that were on."""
    changed: list[str] = []
    for name in HOST_MANAGED_FORCED_OFF:
        if resolved.enabled(name):
            origin = "set true explicitly" if explicit.get(name) else "default true"
            changed.append(f"{name}=false (was {origin})")
    values = dict(resolved.values)
    values.update({name: False for name in HOST_MANAGED_FORCED_OFF})
    forced = models.FeatureGates(values=dict(sorted(values.items())))
    if not changed:
        return forced, ""
    note = (
        "IMEX mode hostManaged: the host runs nvidia-imex, so feature gates for "
        f"driver-managed IMEX daemons are overridden: {', '.join(changed)}"
    )
    return forced, note


def _resolve_isolation(mode: models.IMEXMode, isolation: str) -> models.Isolation:
    """The isolation a (mode, value) pair means; `domain` is the default in both modes.

    NB: under hostManaged, `domain` has upstream's meaning: the host's one IMEX domain, every
    ComputeDomain on host channel 0. Internally that is `Isolation.NONE`, the value earlier
    versions of ours stored in checkpoints and admitted-mode stamps for exactly that
    behaviour, so `none` stays accepted as its alias and nothing recorded changes meaning.
    """
    chosen: models.Isolation | None = None
    if isolation:
        for candidate in models.Isolation:
            if candidate.value == isolation:
                chosen = candidate
        if chosen is None:
            raise errors.ConfigError(unknown_isolation_message(isolation))

    if mode is models.IMEXMode.DRIVER_MANAGED:
        if chosen in (None, models.Isolation.DOMAIN):
            return models.Isolation.DOMAIN
        raise errors.ConfigError(driver_managed_isolation_message(isolation))

    if chosen is models.Isolation.CHANNEL:
        return models.Isolation.CHANNEL
    return models.Isolation.NONE
