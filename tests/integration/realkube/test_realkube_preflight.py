"""The chart's pre-upgrade hook (`computedomain preflight`) on a real kube-apiserver.

It runs with the command the chart's Job gives it and a token of the chart's preflight
ServiceAccount: it must be able to read what it checks, and refuse a mode change while
ComputeDomains admitted under the installed mode exist.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import realkube_driver
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import kinds, names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("installed", ["hostManaged"], indirect=True),
]


def preflight_command(values_mode: str) -> list[str]:
    """The Job's command for a chart rendered in `values_mode` (what an upgrade would run)."""
    rendered = realkube_driver.render(realkube_driver.MODES[values_mode])
    job = next(o for o in rendered if o["kind"] == "Job" and "preflight" in o["metadata"]["name"])
    container = job["spec"]["template"]["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


def run_preflight(installed: Driver, command: Sequence[str]) -> tuple[int, str]:
    assert command[:2] == ["computedomain", "preflight"]
    credentials = installed.kube.credentials_for(
        namespace=NAMESPACE, service_account=installed.service_account("preflight")
    )
    process = installed.launch(
        "apps.cli", [*command[1:], "--kubeconfig", str(credentials.kubeconfig)],
        {"NAMESPACE": NAMESPACE},
    )
    code = process.wait(timeout_s=120)
    return code, process.output()


def test_preflight_refuses_a_mode_change_while_a_domain_of_the_installed_mode_exists(
    installed: Driver, admin: KubeCluster
) -> None:
    controller = installed.start_controller()
    try:
        admin.create(kinds.COMPUTE_DOMAIN.kind, {
            "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": "busy", "namespace": WORKLOAD_NAMESPACE},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "busy-ch"}}},
        })
        wait_for(
            lambda: (admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE,
                               name="busy")["metadata"].get("annotations") or {})
            .get(names.ADMITTED_MODE_ANNOTATION),
            what="the controller to stamp the admitted mode", timeout_s=120,
        )
    finally:
        controller.stop()

    same_code, same_output = run_preflight(installed, preflight_command("hostManaged"))
    assert same_code == 0, same_output

    switch_code, switch_output = run_preflight(installed, preflight_command("driverManaged"))
    assert switch_code != 0, switch_output
    assert "team-a/busy (hostManaged/none)" in switch_output
    assert "'Switching modes'" in switch_output
    assert "forbidden" not in switch_output.lower(), "the preflight ServiceAccount lacks a right"
