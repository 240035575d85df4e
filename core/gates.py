"""Feature gates: the registry of gates this driver knows, and parsing of `A=true,B=false`.

Gates arrive as text (`FEATURE_GATES` env, `--feature-gates`, Helm `featureGates`) and leave
as a resolved `models.FeatureGates` holding every known gate with its effective value.
Names, defaults and dependencies match upstream dra-driver-nvidia-gpu so that the same
Helm values mean the same thing; an unknown gate is a startup error, never ignored.

Kubernetes component-base, which upstream's gates are built on, also knows `AllAlpha` and
`AllBeta`: each sets every alpha (beta) gate that is not set explicitly, whatever the order
of the items. They are accepted with that meaning here; the resolved gates never hold them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Final

from core import errors, models


class Stage(enum.StrEnum):
    """Maturity of a gate, as Kubernetes component-base names it."""

    ALPHA = "alpha"
    BETA = "beta"
    GA = "ga"


class Component(enum.StrEnum):
    """A binary of this driver that reads gates (the names of upstream's binaries)."""

    CONTROLLER = "compute-domain-controller"
    COMPUTE_DOMAIN_PLUGIN = "compute-domain-kubelet-plugin"
    GPU_PLUGIN = "gpu-kubelet-plugin"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gate:
    """One known gate: its default, its stage, and where its feature is still missing here."""

    name: str
    default: bool
    stage: Stage
    # The binaries upstream changes behaviour in for this gate but this driver does not yet:
    # turning the gate on makes exactly those refuse to start (`refuse_unbuilt`), while the
    # chart and the other binaries accept it, so an upstream values file still installs.
    unbuilt_in: frozenset[Component] = frozenset()
    # What the feature does, for the refusal message.
    feature: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Requires:
    """`gate` on needs `needed` on."""

    gate: str
    needed: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Excludes:
    """`gate` and `other` may not both be on."""

    gate: str
    other: str


Rule = Requires | Excludes


IMEX_DAEMONS_WITH_DNS_NAMES: Final = "IMEXDaemonsWithDNSNames"
COMPUTE_DOMAIN_CLIQUES: Final = "ComputeDomainCliques"
CRASH_ON_NVLINK_FABRIC_ERRORS: Final = "CrashOnNVLinkFabricErrors"
HOST_MANAGED_IMEX: Final = "HostManagedIMEXDaemon"
FABRIC_MANAGER_PARTITIONING: Final = "FabricManagerPartitioning"
# The seed's gate (not upstream's): GpuConfig.fabricTopologyConfig (core.gpu.fabric_topology).
FABRIC_TOPOLOGY_SUPPORT: Final = "FabricTopologySupport"
# The GPU half's gates (gpu.nvidia.com), with upstream's names and defaults.
TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"
NVML_DEVICE_HEALTH_CHECK: Final = "NVMLDeviceHealthCheck"
DYNAMIC_MIG: Final = "DynamicMIG"
DEVICE_METADATA: Final = "DeviceMetadata"
DRA_LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"
CONSUMABLE_SHARES: Final = "ConsumableShares"
# Ours, not upstream's: driver-managed channel devices carry DRA binding conditions (KEP-5007),
# so a workload pod is bound only once its node's IMEX daemon is ready (docs/operations.md).
COMPUTE_DOMAIN_BINDING_CONDITIONS: Final = "ComputeDomainBindingConditions"
# Kubernetes component-base's logging gates, which upstream's binaries register beside their
# own (ContextualLogging defaults to true there). Accepted so the same FEATURE_GATES string
# starts ours; our logging does not change with them.
CONTEXTUAL_LOGGING: Final = "ContextualLogging"
LOGGING_ALPHA_OPTIONS: Final = "LoggingAlphaOptions"
LOGGING_BETA_OPTIONS: Final = "LoggingBetaOptions"
# component-base's toggles of every alpha / beta gate (not gates of their own).
ALL_ALPHA: Final = "AllAlpha"
ALL_BETA: Final = "AllBeta"

REGISTRY: Final[Mapping[str, Gate]] = {
    g.name: g
    for g in sorted(
        (
            Gate(name=IMEX_DAEMONS_WITH_DNS_NAMES, default=True, stage=Stage.BETA),
            Gate(name=COMPUTE_DOMAIN_CLIQUES, default=True, stage=Stage.BETA),
            Gate(name=CRASH_ON_NVLINK_FABRIC_ERRORS, default=True, stage=Stage.BETA),
            Gate(name=HOST_MANAGED_IMEX, default=False, stage=Stage.ALPHA),
            Gate(name=TIME_SLICING_SETTINGS, default=False, stage=Stage.ALPHA),
            Gate(name=MPS_SUPPORT, default=False, stage=Stage.ALPHA),
            Gate(name=PASSTHROUGH_SUPPORT, default=False, stage=Stage.ALPHA),
            Gate(name=NVML_DEVICE_HEALTH_CHECK, default=False, stage=Stage.ALPHA),
            Gate(name=DYNAMIC_MIG, default=False, stage=Stage.ALPHA),
            Gate(name=DEVICE_METADATA, default=False, stage=Stage.ALPHA),
            Gate(name=FABRIC_MANAGER_PARTITIONING, default=False, stage=Stage.ALPHA),
            Gate(name=FABRIC_TOPOLOGY_SUPPORT, default=False, stage=Stage.ALPHA),
            Gate(name=DRA_LIST_TYPE_ATTRIBUTES, default=False, stage=Stage.ALPHA),
            Gate(name=CONSUMABLE_SHARES, default=False, stage=Stage.ALPHA),
            Gate(name=COMPUTE_DOMAIN_BINDING_CONDITIONS, default=False, stage=Stage.ALPHA),
            Gate(name=CONTEXTUAL_LOGGING, default=True, stage=Stage.BETA),
            Gate(name=LOGGING_ALPHA_OPTIONS, default=False, stage=Stage.ALPHA),
            Gate(name=LOGGING_BETA_OPTIONS, default=True, stage=Stage.BETA),
        ),
        key=lambda g: g.name,
    )
}

# Upstream's dependency rules (pkg/featuregates ValidateFeatureGates), checked in its order so
# that a combination breaking two rules reports the same one first.
RULES: Final[tuple[Rule, ...]] = (
    Requires(gate=COMPUTE_DOMAIN_CLIQUES, needed=IMEX_DAEMONS_WITH_DNS_NAMES),
    Excludes(gate=DYNAMIC_MIG, other=PASSTHROUGH_SUPPORT),
    Excludes(gate=DYNAMIC_MIG, other=NVML_DEVICE_HEALTH_CHECK),
    Excludes(gate=DYNAMIC_MIG, other=MPS_SUPPORT),
    Excludes(gate=PASSTHROUGH_SUPPORT, other=NVML_DEVICE_HEALTH_CHECK),
    Requires(gate=DEVICE_METADATA, needed=PASSTHROUGH_SUPPORT),
    # Ours (the seed's gate): fabricTopologyConfig chooses Fabric Manager partitions, which
    # only exist where FabricManagerPartitioning publishes and activates them.
    Requires(gate=FABRIC_TOPOLOGY_SUPPORT, needed=FABRIC_MANAGER_PARTITIONING),
)

# Other spellings accepted on input; always canonicalised before anything else sees them.
# `HostManagedIMEX` is the name our earlier releases gave upstream's `HostManagedIMEXDaemon`.
ALIASES: Final[Mapping[str, str]] = {"HostManagedIMEX": HOST_MANAGED_IMEX}

# What AllAlpha / AllBeta set, by stage.
_TOGGLES: Final[Mapping[str, Stage]] = {ALL_ALPHA: Stage.ALPHA, ALL_BETA: Stage.BETA}

# Gates upstream sets explicitly when it builds its gate set (before the user's settings):
# AllAlpha / AllBeta leave them as they are.
PRESET: Final[Mapping[str, bool]] = {CONTEXTUAL_LOGGING: True}

# The literals Go's strconv.ParseBool accepts (the upstream flag parser), so that any
# FEATURE_GATES string upstream accepts is accepted here too.
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def known_gate_names() -> tuple[str, ...]:
    """Canonical names of every known gate, sorted."""
    return tuple(sorted(REGISTRY))


def unknown_gate_message(name: str) -> str:
    aliases = "; ".join(f"{a} is an alias of {c}" for a, c in sorted(ALIASES.items()))
    return (
        f"unknown feature gate '{name}': known gates are {', '.join(known_gate_names())} "
        f"(and {ALL_ALPHA}, {ALL_BETA}; {aliases})"
    )


def dependency_message(gate: str, required: str) -> str:
    return f"feature gate {gate}=true requires {required}=true"


def exclusion_message(gate: str, other: str) -> str:
    return (
        f"feature gate {gate}=true cannot be combined with {other}=true "
        f"(the two are mutually exclusive, as upstream): set one of them to false"
    )


def unbuilt_message(gate: Gate, component: Component) -> str:
    return (
        f"feature gate {gate.name}=true: {gate.feature} is not implemented yet in this "
        f"driver's {component.value}; set {gate.name}=false (or remove it) to start"
    )


def canonical_name(name: str) -> str:
    """The registry name of `name` (resolving aliases); ConfigError if it names no gate."""
    canonical = ALIASES.get(name, name)
    if canonical not in REGISTRY and canonical not in _TOGGLES:
        raise errors.ConfigError(unknown_gate_message(name))
    return canonical


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Parse `A=true,B=false` into explicitly set gates, aliases canonicalised.

    Whitespace around items, names and values is ignored, as are empty items; an empty
    string gives `{}`. When a gate appears twice the later item wins. Raises ConfigError
    naming the offending item for a malformed item, an unknown gate or a non-boolean value.
    """
    parsed: dict[str, bool] = {}
    for raw_item in text.split(","):
        item = raw_item.strip()
        if not item:
            continue
        name, sep, raw_value = item.partition("=")
        name, value = name.strip(), raw_value.strip()
        if not sep or not name:
            raise errors.ConfigError(
                f"malformed feature gate item '{item}': "
                "write Name=true or Name=false, separated by commas"
            )
        canonical = canonical_name(name)
        if value in _TRUE:
            parsed[canonical] = True
        elif value in _FALSE:
            parsed[canonical] = False
        else:
            raise errors.ConfigError(
                f"invalid value in feature gate item '{item}': values are true or false"
            )
    return dict(sorted(parsed.items()))


def canonical_gates(explicit: Mapping[str, bool]) -> dict[str, bool]:
    """Explicitly set gates with aliases resolved; ConfigError on an unknown gate or non-bool.

    Where a gate is set under its own name and an alias, its own name wins (as in the chart).
    """
    canonical: dict[str, bool] = {}
    for name, value in explicit.items():
        gate = canonical_name(name)
        if not isinstance(value, bool):
            raise errors.ConfigError(
                f"invalid value {value!r} for feature gate {name}: values are true or false"
            )
        if gate != name and gate in explicit:
            continue
        canonical[gate] = value
    return dict(sorted(canonical.items()))


def resolve_gates(explicit: Mapping[str, bool]) -> models.FeatureGates:
    """Every known gate with its effective value: explicit settings over AllAlpha / AllBeta
    (for gates of that stage, `PRESET` ones excepted) over registry defaults.

    Does not validate dependencies (the IMEX mode may still override gates first);
    call `validate_gate_dependencies` on the final result.
    """
    canonical = canonical_gates(explicit)
    values = {name: gate.default for name, gate in REGISTRY.items()}
    for toggle, stage in _TOGGLES.items():
        if toggle in canonical:
            values.update({
                name: canonical[toggle] for name, gate in REGISTRY.items()
                if gate.stage is stage and name not in PRESET
            })
    values.update({n: v for n, v in canonical.items() if n in REGISTRY})
    return models.FeatureGates(values=dict(sorted(values.items())))


def validate_gate_dependencies(gates: models.FeatureGates) -> None:
    """Raise ConfigError for the first broken rule of `RULES`, in upstream's order."""
    for rule in RULES:
        match rule:
            case Requires(gate=gate, needed=needed):
                if gates.enabled(gate) and not gates.enabled(needed):
                    raise errors.ConfigError(dependency_message(gate, needed))
            case Excludes(gate=gate, other=other):
                if gates.enabled(gate) and gates.enabled(other):
                    raise errors.ConfigError(exclusion_message(gate, other))


def refuse_unbuilt(gates: models.FeatureGates, component: Component) -> None:
    """Raise ConfigError when an enabled gate's feature is not built into `component` yet.

    A gate that is merely accepted must never look as if it took effect: the binary that
    would act on it stops instead, naming the gate (the first by name when several are on).
    """
    for name in known_gate_names():
        gate = REGISTRY[name]
        if component in gate.unbuilt_in and gates.enabled(name):
            raise errors.ConfigError(unbuilt_message(gate, component))


def format_feature_gates(gates: models.FeatureGates | Mapping[str, bool]) -> str:
    """`A=true,B=false` sorted by name, the inverse of `parse_feature_gates` (env, flags, logs)."""
    values = gates.values if isinstance(gates, models.FeatureGates) else gates
    return ",".join(f"{name}={str(values[name]).lower()}" for name in sorted(values))
