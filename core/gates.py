"""Feature gates: the registry of gates this driver knows, and parsing of `A=true,B=false`.

Gates arrive as text (`FEATURE_GATES` env, `--feature-gates`, Helm `featureGates`) and leave
as a resolved `models.FeatureGates` holding every known gate with its effective value.
Names, defaults and dependencies match upstream dra-driver-nvidia-gpu so that the same
Helm values mean the same thing; an unknown gate is a startup error, never ignored.
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gate:
    """One known gate: its default and the gates it needs enabled alongside it."""

    name: str
    default: bool
    stage: Stage
    requires: tuple[str, ...] = ()


IMEX_DAEMONS_WITH_DNS_NAMES: Final = "IMEXDaemonsWithDNSNames"
COMPUTE_DOMAIN_CLIQUES: Final = "ComputeDomainCliques"
CRASH_ON_NVLINK_FABRIC_ERRORS: Final = "CrashOnNVLinkFabricErrors"
HOST_MANAGED_IMEX: Final = "HostManagedIMEX"
# The GPU half's gates (gpu.nvidia.com), with upstream's names and defaults.
TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"

REGISTRY: Final[Mapping[str, Gate]] = {
    g.name: g
    for g in sorted(
        (
            Gate(name=IMEX_DAEMONS_WITH_DNS_NAMES, default=True, stage=Stage.BETA),
            Gate(
                name=COMPUTE_DOMAIN_CLIQUES,
                default=True,
                stage=Stage.BETA,
                requires=(IMEX_DAEMONS_WITH_DNS_NAMES,),
            ),
            Gate(name=CRASH_ON_NVLINK_FABRIC_ERRORS, default=True, stage=Stage.BETA),
            Gate(name=HOST_MANAGED_IMEX, default=False, stage=Stage.ALPHA),
            Gate(name=TIME_SLICING_SETTINGS, default=False, stage=Stage.ALPHA),
            Gate(name=MPS_SUPPORT, default=False, stage=Stage.ALPHA),
            Gate(name=PASSTHROUGH_SUPPORT, default=False, stage=Stage.ALPHA),
        ),
        key=lambda g: g.name,
    )
}

# Other spellings accepted on input; always canonicalised before anything else sees them.
# `HostManagedIMEXDaemon` is the upstream name of our `HostManagedIMEX`.
ALIASES: Final[Mapping[str, str]] = {"HostManagedIMEXDaemon": HOST_MANAGED_IMEX}

# The literals Go's strconv.ParseBool accepts (the upstream flag parser), so that any
# FEATURE_GATES string upstream accepts is accepted here too.
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def known_gate_names() -> tuple[str, ...]:
    """Canonical names of every known gate, sorted."""
    return tuple(sorted(REGISTRY))


def unknown_gate_message(name: str) -> str:
    return f"unknown feature gate '{name}': known gates are {', '.join(known_gate_names())}"


def dependency_message(gate: str, required: str) -> str:
    return f"feature gate {gate}=true requires {required}=true"


def canonical_name(name: str) -> str:
    """The registry name of `name` (resolving aliases); ConfigError if it names no gate."""
    canonical = ALIASES.get(name, name)
    if canonical not in REGISTRY:
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
    """Explicitly set gates with aliases resolved; ConfigError on an unknown gate or non-bool."""
    canonical: dict[str, bool] = {}
    for name, value in explicit.items():
        gate = canonical_name(name)
        if not isinstance(value, bool):
            raise errors.ConfigError(
                f"invalid value {value!r} for feature gate {name}: values are true or false"
            )
        canonical[gate] = value
    return dict(sorted(canonical.items()))


def resolve_gates(explicit: Mapping[str, bool]) -> models.FeatureGates:
    """Every known gate with its effective value: explicit settings over registry defaults.

    Does not validate dependencies (the IMEX mode may still override gates first);
    call `validate_gate_dependencies` on the final result.
    """
    values = {name: gate.default for name, gate in REGISTRY.items()}
    values.update(canonical_gates(explicit))
    return models.FeatureGates(values=dict(sorted(values.items())))


def validate_gate_dependencies(gates: models.FeatureGates) -> None:
    """Raise ConfigError for the first enabled gate (by name) whose required gate is off."""
    for name in known_gate_names():
        if not gates.enabled(name):
            continue
        for required in REGISTRY[name].requires:
            if not gates.enabled(required):
                raise errors.ConfigError(dependency_message(name, required))


def format_feature_gates(gates: models.FeatureGates | Mapping[str, bool]) -> str:
    """`A=true,B=false` sorted by name, the inverse of `parse_feature_gates` (env, flags, logs)."""
    values = gates.values if isinstance(gates, models.FeatureGates) else gates
    return ",".join(f"{name}={str(values[name]).lower()}" for name in sorted(values))
