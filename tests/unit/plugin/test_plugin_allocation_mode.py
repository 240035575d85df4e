"""allocationMode rules: which values each IMEX mode serves, and that the admission webhook
and prepare refuse the same values with the same reason."""

from __future__ import annotations

import plugin_factories as f
import pytest

from core import admission, errors, names
from core.computedomain import allocation_mode

CONFIGS = {"hostManaged/none": f.HOST, "hostManaged/channel": f.HOST_CHANNEL,
           "driverManaged": f.DRIVER}


@pytest.mark.parametrize(
    ("config_name", "mode", "served"),
    [
        ("driverManaged", "", True),
        ("driverManaged", "Single", True),
        ("driverManaged", "All", True),
        ("driverManaged", "all", False),
        ("driverManaged", "Many", False),
        ("hostManaged/none", "", True),
        ("hostManaged/none", "Single", True),
        ("hostManaged/none", "All", False),
        ("hostManaged/none", "Many", False),
        ("hostManaged/channel", "Single", True),
        ("hostManaged/channel", "All", False),
    ],
)
def test_which_allocation_modes_each_imex_mode_serves(
    config_name: str, mode: str, served: bool
) -> None:
    refusal = allocation_mode.refusal(mode, config=CONFIGS[config_name])
    assert (refusal == "") is served


def test_all_under_host_managed_says_what_the_host_gives_and_to_use_single() -> None:
    refusal = allocation_mode.refusal("All", config=f.HOST)
    assert refusal.startswith("'All' is not supported in host-managed IMEX mode")
    assert "channel 0 only" in refusal
    assert "set allocationMode: Single (or leave it out)" in refusal


def test_all_under_channel_isolation_names_the_domains_own_channel_not_channel_0() -> None:
    refusal = allocation_mode.refusal("All", config=f.HOST_CHANNEL)
    assert "its ComputeDomain's own IMEX channel only" in refusal
    assert "channel 0" not in refusal


def test_an_unknown_mode_is_refused_naming_the_valid_ones() -> None:
    refusal = allocation_mode.refusal("Many", config=f.DRIVER)
    assert refusal == "'Many' is not valid: use Single or All"


@pytest.mark.parametrize(
    ("config_name", "mode"),
    [("hostManaged/none", "All"), ("hostManaged/channel", "All"), ("driverManaged", "Many"),
     ("hostManaged/none", "Many")],
)
def test_admission_and_prepare_refuse_with_the_same_reason(config_name: str, mode: str) -> None:
    config = CONFIGS[config_name]
    params = f.channel_params(allocation_mode=mode)
    refusal = allocation_mode.refusal(mode, config=config)

    denial = admission.check_config_entry(
        {"opaque": {"driver": names.DRIVER_NAME, "parameters": params}},
        path="spec.devices.config[0]", config=config,
    )
    device_type = names.DEVICE_TYPE_SLOT if config.channel_isolation else names.DEVICE_TYPE_CHANNEL
    outcome = f.prepare(f.claim(params=params, device=f"{device_type}-0"), config=config)

    assert denial == f"spec.devices.config[0].opaque.parameters.allocationMode: {refusal}"
    assert isinstance(outcome.error, errors.PermanentError)
    assert outcome.error.message == f"allocationMode {refusal}"

