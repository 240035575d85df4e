"""`compute-domain-controller` as a real process reconciling the embedded cluster over HTTP.

The controller runs as `python -m apps.controller` in host-managed mode with its real
`KubeCluster` (list + watch informers over chunked HTTP) against an `EmbeddedAPIServer` in
this test process; the test writes ComputeDomains into the `InMemoryCluster` behind it and
polls for what the controller makes of them.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

import app_processes
import pytest
from app_processes import NAMESPACE, eventually

from core import errors, kinds, names

pytestmark = pytest.mark.slow


def _controller(
    launch: app_processes.Launch, served: app_processes.ServedCluster
) -> app_processes.AppProcess:
    return launch(
        "apps.controller",
        [
            "--kubeconfig", str(served.kubeconfig),
            *app_processes.host_managed_flags(),
            "--resync-seconds", "2",
        ],
    )


def _get(served: app_processes.ServedCluster, kind: str, name: str) -> Mapping[str, Any] | None:
    try:
        return served.cluster.get(kind, namespace=NAMESPACE, name=name)
    except errors.NotFoundError:
        return None


def _alive(process: app_processes.AppProcess) -> None:
    if not process.running:
        raise AssertionError(
            f"controller exited with {process.popen.returncode}; output:\n{process.output()}"
        )


def _ready_with_template(
    served: app_processes.ServedCluster, process: app_processes.AppProcess, cd: str
) -> Mapping[str, Any]:
    """Wait for the CD's RCT and Ready status; returns the RCT."""

    def probe() -> Mapping[str, Any] | None:
        _alive(process)
        rct = _get(served, kinds.RESOURCE_CLAIM_TEMPLATE.kind, f"{cd}-ch")
        obj = _get(served, kinds.COMPUTE_DOMAIN.kind, cd)
        ready = obj is not None and (obj.get("status") or {}).get("status") == "Ready"
        return rct if rct is not None and ready else None

    return eventually(
        probe, what=f"ResourceClaimTemplate {cd}-ch and ComputeDomain {cd} Ready",
        timeout_s=app_processes.START_TIMEOUT_S,
    )


def _wait_gone(
    served: app_processes.ServedCluster, process: app_processes.AppProcess, cd: str
) -> None:
    """Wait until the CD (its finalizer removed) and its RCT are both gone."""

    def probe() -> bool:
        _alive(process)
        return (
            _get(served, kinds.COMPUTE_DOMAIN.kind, cd) is None
            and _get(served, kinds.RESOURCE_CLAIM_TEMPLATE.kind, f"{cd}-ch") is None
        )

    eventually(
        probe, what=f"ComputeDomain {cd} and its ResourceClaimTemplate to be deleted",
        timeout_s=app_processes.START_TIMEOUT_S,
    )


def test_controller_process_reconciles_create_and_delete_of_a_compute_domain(
    served: app_processes.ServedCluster, launch: app_processes.Launch
) -> None:
    process = _controller(launch, served)
    cd_uid = app_processes.compute_domain(served.cluster, "alpha")["metadata"]["uid"]

    rct = _ready_with_template(served, process, "alpha")

    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["domainID"] == cd_uid
    cd = _get(served, kinds.COMPUTE_DOMAIN.kind, "alpha")
    assert cd is not None
    assert names.COMPUTE_DOMAIN_FINALIZER in cd["metadata"]["finalizers"]

    served.cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="alpha")

    _wait_gone(served, process, "alpha")


def test_controller_process_finishes_a_deletion_made_while_it_was_down(
    served: app_processes.ServedCluster, launch: app_processes.Launch
) -> None:
    first = _controller(launch, served)
    app_processes.compute_domain(served.cluster, "beta")
    _ready_with_template(served, first, "beta")

    first.kill()
    served.cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="beta")
    held = _get(served, kinds.COMPUTE_DOMAIN.kind, "beta")
    assert held is not None and held["metadata"]["deletionTimestamp"], "finalizer should hold it"
    second = _controller(launch, served)

    _wait_gone(served, second, "beta")


def test_controller_process_picks_up_a_compute_domain_created_while_it_was_down(
    served: app_processes.ServedCluster, launch: app_processes.Launch
) -> None:
    first = _controller(launch, served)
    app_processes.compute_domain(served.cluster, "gamma")
    _ready_with_template(served, first, "gamma")
    first.kill()

    app_processes.compute_domain(served.cluster, "delta")
    second = _controller(launch, served)

    _ready_with_template(served, second, "delta")
    assert _get(served, kinds.RESOURCE_CLAIM_TEMPLATE.kind, "gamma-ch") is not None


def test_controller_process_exits_0_on_sigterm(
    served: app_processes.ServedCluster, launch: app_processes.Launch
) -> None:
    process = _controller(launch, served)
    app_processes.compute_domain(served.cluster, "epsilon")
    _ready_with_template(served, process, "epsilon")

    process.signal(signal.SIGTERM)

    assert process.wait() == 0, process.output()


def test_controller_process_in_host_managed_mode_without_the_gate_exits_2(
    served: app_processes.ServedCluster, launch: app_processes.Launch
) -> None:
    process = launch(
        "apps.controller",
        ["--kubeconfig", str(served.kubeconfig), "--imex-mode", "hostManaged"],
    )

    assert process.wait() == 2
    assert "requires feature gate HostManagedIMEXDaemon=true" in process.output()
