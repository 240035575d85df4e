"""Which NVIDIA driver the ComputeDomain plugin needs for the features it was asked to run.

Upstream's kubelet plugin refuses to start driver-managed IMEX with gate
IMEXDaemonsWithDNSNames on when the node's driver is older than 570.158.01 (IMEX daemons
addressed by DNS name need that driver). Host-managed IMEX runs no daemons, so it is exempt.
Versions compare as upstream's "generic" versions: dot-separated numbers, compared
component by component (a missing component counts as 0, leading zeros do not count), and
anything after the numbers is ignored.
"""

from __future__ import annotations

import re
from typing import Final

from core import errors, gates, models

IMEX_DAEMONS_WITH_DNS_NAMES_MIN_DRIVER: Final = "570.158.01"

_GENERIC_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)+)")


def parse_generic_version(text: str) -> tuple[int, ...]:
    """The numeric components of a version such as "570.158.01"; ValueError if there are
    fewer than two."""
    match = _GENERIC_VERSION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a version (expected numbers such as 570.158.01)")
    return tuple(int(part) for part in match.group(1).split("."))


def is_older(version: tuple[int, ...], than: tuple[int, ...]) -> bool:
    """Component-wise comparison with missing components counted as 0."""
    width = max(len(version), len(than))
    return version + (0,) * (width - len(version)) < than + (0,) * (width - len(than))


def needs_driver_check(config: models.DriverConfig) -> bool:
    """Whether this install's mode and gates depend on the node's driver version."""
    return not config.host_managed and config.gates.enabled(gates.IMEX_DAEMONS_WITH_DNS_NAMES)


def check_driver_version(config: models.DriverConfig, *, driver_version: str) -> None:
    """Raise ConfigError (the plugin must not start) when the node's driver is too old for
    what `config` asks; return None otherwise. Deterministic, no I/O."""
    if not needs_driver_check(config):
        return
    gate = gates.IMEX_DAEMONS_WITH_DNS_NAMES
    try:
        found = parse_generic_version(driver_version)
    except ValueError as exc:
        raise errors.ConfigError(
            f"cannot check the NVIDIA driver version that gate {gate} needs: NVML reported "
            f"{exc}"
        ) from exc
    if is_older(found, parse_generic_version(IMEX_DAEMONS_WITH_DNS_NAMES_MIN_DRIVER)):
        raise errors.ConfigError(
            f"feature gate {gate} requires NVIDIA driver >= "
            f"{IMEX_DAEMONS_WITH_DNS_NAMES_MIN_DRIVER}, but this node runs {driver_version}: "
            f"upgrade the driver, or set featureGates.{gate}=false (and "
            f"{gates.COMPUTE_DOMAIN_CLIQUES}=false, which requires it)"
        )
