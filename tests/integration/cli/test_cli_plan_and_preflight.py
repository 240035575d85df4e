"""`computedomain plan` (offline) and `computedomain preflight` (the Helm pre-upgrade check)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Mapping

import yaml

from adapters.memory import cluster as memory_cluster
from apps.cli import preflight
from core import errors, kinds, names, ports

CD_MANIFEST = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata: {name: training, namespace: ml}
spec:
  numNodes: 0
  channel:
    resourceClaimTemplate: {name: training-channel}
    allocationMode: All
"""


def _plan(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "cd.yaml"
    manifest.write_text(CD_MANIFEST)
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", "plan", *args, str(manifest)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_plan_in_host_managed_mode_prints_only_the_workload_template_forced_to_single(
    tmp_path: pathlib.Path,
) -> None:
    done = _plan(tmp_path, "--mode", "hostManaged", "--isolation", "none",
                 "--feature-gates", "HostManagedIMEXDaemon=true")
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    assert [o["kind"] for o in objects] == ["ResourceClaimTemplate"]
    params = objects[0]["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "Single"
    assert params["domainID"] == "<computedomain-uid>"


def test_plan_in_driver_managed_mode_adds_the_daemon_template_and_daemonset(
    tmp_path: pathlib.Path,
) -> None:
    done = _plan(tmp_path, "--mode", "driverManaged")
    assert done.returncode == 0, done.stderr
    made = sorted(o["kind"] for o in yaml.safe_load_all(done.stdout))
    assert made == ["DaemonSet", "ResourceClaimTemplate", "ResourceClaimTemplate"]


def test_plan_refuses_an_invalid_mode_with_the_config_message(tmp_path: pathlib.Path) -> None:
    done = _plan(tmp_path, "--mode", "hostManaged", "--isolation", "none")
    assert done.returncode == 2
    assert "requires feature gate HostManagedIMEXDaemon=true" in done.stderr


def _admitted_cd(
    cluster: memory_cluster.InMemoryCluster, name: str, admitted: str, *, rct: str | None = None
) -> None:
    mode, isolation = admitted.split("/")
    cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "ml", "annotations": {
            names.ADMITTED_MODE_ANNOTATION: mode, names.ADMITTED_ISOLATION_ANNOTATION: isolation}},
        "spec": {"channel": {"resourceClaimTemplate": {
            "name": f"{name}-channel" if rct is None else rct}}},
    })


def test_preflight_judges_a_compute_domain_our_decoder_rejects_by_its_annotations() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _admitted_cd(cluster, "odd", "hostManaged/none", rct="")  # the CRD accepts an empty name
    refusal = preflight.check(cluster, mode="driverManaged", isolation="", feature_gates="")
    assert "ml/odd (hostManaged/none)" in refusal
    assert preflight.check(cluster, mode="hostManaged", isolation="none",
                           feature_gates="HostManagedIMEXDaemon=true") == ""


class _Forbidden(memory_cluster.InMemoryCluster):
    def list(self, kind: str, *, namespace: str = "",
             label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
        raise errors.ClusterError(f"{kind} is forbidden for the preflight ServiceAccount")


def test_preflight_refuses_readably_when_it_cannot_list_compute_domains() -> None:
    refusal = preflight.check(_Forbidden(), mode="driverManaged", isolation="", feature_gates="")
    assert refusal.startswith("cannot list ComputeDomains")
    assert "forbidden for the preflight ServiceAccount" in refusal


def test_preflight_refuses_a_mode_change_while_domains_of_the_old_mode_exist() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _admitted_cd(cluster, "old", "hostManaged/none")
    refusal = preflight.check(cluster, mode="driverManaged", isolation="", feature_gates="")
    assert "refusing to install or upgrade with IMEX mode/isolation driverManaged/domain" in refusal
    assert "ml/old (hostManaged/none)" in refusal


def test_preflight_allows_an_upgrade_that_keeps_the_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _admitted_cd(cluster, "same", "hostManaged/none")
    assert preflight.check(cluster, mode="hostManaged", isolation="none",
                           feature_gates="HostManagedIMEXDaemon=true") == ""


def test_preflight_allows_any_change_when_no_domain_exists() -> None:
    cluster = memory_cluster.InMemoryCluster()
    assert preflight.check(cluster, mode="driverManaged", isolation="", feature_gates="") == ""


def test_preflight_reports_an_invalid_target_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    refusal = preflight.check(cluster, mode="driverManaged", isolation="channel",
                              feature_gates="")
    assert "isolation 'channel' is only valid with mode hostManaged" in refusal


def test_preflight_without_reachable_credentials_fails_with_a_message_not_a_traceback(
    tmp_path: pathlib.Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "preflight", "--mode", "driverManaged",
         "--kubeconfig", str(tmp_path / "missing-kubeconfig")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert "error: cannot reach the API server" in done.stderr
    assert "Traceback" not in done.stderr


def test_plan_with_the_host_managed_gate_alone_plans_driver_managed(
    tmp_path: pathlib.Path,
) -> None:
    # As upstream: the gate only unlocks hostManaged; the mode stays the default.
    done = _plan(tmp_path, "--feature-gates", "HostManagedIMEXDaemon=true")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
