"""Driver version needed by gate IMEXDaemonsWithDNSNames (upstream: >= 570.158.01, driverManaged)"""

from __future__ import annotations

import pytest

from core import errors, gates, models
from core.computedomain import driver_version


def _config(
    *, mode: models.IMEXMode = models.IMEXMode.DRIVER_MANAGED, dns_names: bool = True
) -> models.DriverConfig:
    return models.DriverConfig(
        mode=mode,
        isolation=models.Isolation.DOMAIN,
        gates=models.FeatureGates(values={gates.IMEX_DAEMONS_WITH_DNS_NAMES: dns_names}),
    )


@pytest.mark.parametrize(
    "version", ["570.158.01", "570.158.1", "570.172.08", "575.51.03", "580.65.06", "1000.0"]
)
def test_a_new_enough_driver_passes(version: str) -> None:
    driver_version.check_driver_version(_config(), driver_version=version)


@pytest.mark.parametrize("version", ["570.148.08", "570.86.15", "565.57.01", "570", "535.247.01"])
def test_an_older_driver_is_refused_in_one_line_naming_gate_and_versions(version: str) -> None:
    if version == "570":  # one component is not a version (upstream's ParseGeneric agrees)
        with pytest.raises(errors.ConfigError, match="is not a version"):
            driver_version.check_driver_version(_config(), driver_version=version)
        return
    with pytest.raises(errors.ConfigError) as err:
        driver_version.check_driver_version(_config(), driver_version=version)
    message = err.value.message
    assert "\n" not in message
    assert "IMEXDaemonsWithDNSNames" in message and "570.158.01" in message and version in message


def test_host_managed_is_exempt_as_upstream() -> None:
    config = _config(mode=models.IMEXMode.HOST_MANAGED)
    assert not driver_version.needs_driver_check(config)
    driver_version.check_driver_version(config, driver_version="535.0.0")


def test_gate_off_is_exempt() -> None:
    config = _config(dns_names=False)
    assert not driver_version.needs_driver_check(config)
    driver_version.check_driver_version(config, driver_version="535.0.0")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("570.158.01", (570, 158, 1)), ("v580.65", (580, 65)), (" 580.65.06-open", (580, 65, 6))],
)
def test_versions_parse_as_generic_versions(text: str, parsed: tuple[int, ...]) -> None:
    assert driver_version.parse_generic_version(text) == parsed


def test_missing_components_count_as_zero() -> None:
    assert not driver_version.is_older((570, 158), (570, 158, 0))
    assert driver_version.is_older((570, 158), (570, 158, 1))
