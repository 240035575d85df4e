"""Each claim's ComputeDomain must have been admitted under the mode this plugin runs in.

The controller stamps a ComputeDomain with the IMEX mode/isolation that admitted it. A claim of
a ComputeDomain admitted under the other mode can never work on this node: a host-managed plugin
would hand out the host's channel to a domain whose daemons the driver was meant to run, and a
driver-managed plugin would wait forever for a daemon nobody starts. Both are refused at once.
"""

from __future__ import annotations

import plugin_factories as f

from core import errors, models, names


def _stamped(mode: str, isolation: str, *, ready: bool = True) -> models.ComputeDomain:
    return f.domain(
        ready_nodes=(f.NODE_NAME,) if ready else (),
        annotations={
            names.ADMITTED_MODE_ANNOTATION: mode,
            names.ADMITTED_ISOLATION_ANNOTATION: isolation,
        },
    )


def test_host_managed_plugin_refuses_a_claim_of_a_driver_managed_compute_domain() -> None:
    outcome = f.prepare(f.claim(), config=f.HOST, domains={f.CD_UID: _stamped(
        "driverManaged", "domain")})
    assert isinstance(outcome.error, errors.PermanentError)
    assert "admitted under IMEX mode driverManaged/domain" in str(outcome.error)
    assert "hostManaged/none" in str(outcome.error)
    assert "Switching modes" in str(outcome.error)
    assert f.writes(outcome) == []


def test_driver_managed_plugin_refuses_a_host_managed_compute_domain_instead_of_waiting() -> None:
    outcome = f.prepare(
        f.claim(), config=f.DRIVER,
        domains={f.CD_UID: _stamped("hostManaged", "none", ready=False)},
    )
    assert isinstance(outcome.error, errors.PermanentError), outcome.error
    assert "admitted under IMEX mode hostManaged/none" in str(outcome.error)
    assert outcome.steps == (), "no node label for a domain that cannot run here"


def test_a_compute_domain_admitted_under_this_mode_is_prepared() -> None:
    outcome = f.prepare(f.claim(), config=f.HOST, domains={f.CD_UID: _stamped(
        "hostManaged", "none")})
    assert outcome.error is None


def test_a_compute_domain_not_stamped_yet_is_prepared() -> None:
    assert f.prepare(f.claim(), config=f.HOST).error is None
