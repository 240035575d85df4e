"""`computedomain preflight` beyond admitted ComputeDomains: what else blocks a mode switch.

Covers: ComputeDomains another driver manages (our finalizer, no admitted-mode stamp) block an
install unless they can be adopted in place (the node plugins run the requested mode, and in
driver-managed mode their IMEX DaemonSets run in the namespace being installed); claims of
this driver still in use (allocated by compute-domain.nvidia.com, reserved by a pod) block a
change of mode, judged against the mode the node plugins publish (a `daemon` device in their
ResourceSlices means driverManaged); the docs section the refusal points to exists.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from apps.cli import preflight
from core import errors, kinds, names, ports, runtime_cdi
from core.computedomain import modeswitch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
HOST = {"mode": "hostManaged", "isolation": "none", "feature_gates": "HostManagedIMEXDaemon=true"}
DRIVER = {"mode": "driverManaged", "isolation": "", "feature_gates": ""}


def _cd(cluster: memory_cluster.InMemoryCluster, name: str, *, finalizers: list[str],
        annotations: dict[str, str] | None = None) -> None:
    cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": "ml", "finalizers": finalizers,
                     "annotations": annotations or {}},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })


def _claim(cluster: memory_cluster.InMemoryCluster, name: str, *, driver: str = names.DRIVER_NAME,
           reserved: bool = True) -> None:
    cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    status: dict[str, Any] = {"allocation": {"devices": {"results": [{
        "request": "channel", "driver": driver, "pool": "node-a", "device": "channel-0"}]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": "pod-uid"}]
    cluster.patch(kinds.RESOURCE_CLAIM.kind, namespace="ml", name=name, subresource="status",
                  patch={"status": status})


def _slice(cluster: memory_cluster.InMemoryCluster, node: str, *, daemon: bool) -> None:
    devices = [{"name": "channel-0", "attributes": {
        "type": {"string": "channel"}, "id": {"int": 0}}}]
    if daemon:
        devices.append({"name": "daemon-0", "attributes": {
            "type": {"string": "daemon"}, "id": {"int": 0}}})
    cluster.create(kinds.RESOURCE_SLICE.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{names.DRIVER_NAME}"},
        "spec": {"driver": names.DRIVER_NAME, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    })


# ---------------------------------------------------------------- ComputeDomains with no stamp


def test_a_compute_domain_another_driver_manages_blocks_when_no_plugin_publishes() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])

    for target in (HOST, DRIVER):
        refusal = preflight.check(cluster, **target)
        assert "ml/upstream" in refusal
        assert "no admitted-mode stamp" in refusal
        assert "another driver" in refusal


def test_a_compute_domain_no_driver_has_touched_yet_does_not_block() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "new", finalizers=[])

    assert preflight.check(cluster, **HOST) == ""


def test_stamped_and_unstamped_domains_are_both_listed() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "old", finalizers=[names.COMPUTE_DOMAIN_FINALIZER], annotations={
        names.ADMITTED_MODE_ANNOTATION: "driverManaged",
        names.ADMITTED_ISOLATION_ANNOTATION: "domain"})
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])

    refusal = preflight.check(cluster, **HOST)

    assert "ml/old (driverManaged/domain)" in refusal
    assert "ml/upstream" in refusal


def _upstream_daemonset(cluster: memory_cluster.InMemoryCluster, *, cd: str,
                        namespace: str) -> None:
    uid = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name=cd)["metadata"]["uid"]
    labels = {names.COMPUTE_DOMAIN_LABEL: uid}
    cluster.create(kinds.DAEMON_SET.kind, {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": names.daemonset_name(uid), "namespace": namespace,
                     "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "compute-domain-daemon", "image": "up"}]}}},
    })


def test_upstream_compute_domains_are_adopted_when_the_plugins_run_the_requested_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    _upstream_daemonset(cluster, cd="upstream", namespace="nvidia-dra-driver")
    _slice(cluster, "node-a", daemon=True)  # upstream's driver-managed plugin
    _claim(cluster, "training")

    assert preflight.check(cluster, **DRIVER, namespace="nvidia-dra-driver") == ""
    refusal = preflight.check(cluster, **HOST)
    assert "ml/upstream" in refusal and "the node plugins run driverManaged/domain" in refusal


def test_upstream_daemons_in_another_namespace_block_their_adoption() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    _upstream_daemonset(cluster, cd="upstream", namespace="nvidia-dra-driver-gpu")
    _slice(cluster, "node-a", daemon=True)

    refusal = preflight.check(cluster, **DRIVER, namespace="nvidia-dra-driver")

    assert "ml/upstream (DaemonSet in nvidia-dra-driver-gpu)" in refusal
    assert preflight.check(cluster, **DRIVER, namespace="nvidia-dra-driver-gpu") == ""


# ---------------------------------------------------------------- claims still prepared


def test_claims_in_use_block_a_mode_change_away_from_the_published_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _slice(cluster, "node-a", daemon=True)  # driver-managed plugins publish daemon-0
    _claim(cluster, "training")

    refusal = preflight.check(cluster, **HOST)

    assert "ml/training" in refusal
    assert "still in use" in refusal
    assert "driverManaged" in refusal


def test_claims_in_use_do_not_block_an_upgrade_that_keeps_the_published_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _slice(cluster, "node-a", daemon=False)  # host-managed: channel devices only
    _claim(cluster, "training")

    assert preflight.check(cluster, **HOST) == ""
    assert "ml/training" in preflight.check(cluster, **DRIVER)


def test_claims_in_use_block_when_no_plugin_publishes_a_mode() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _claim(cluster, "training")

    refusal = preflight.check(cluster, **DRIVER)

    assert "ml/training" in refusal
    assert "the installed mode cannot be told" in refusal


def test_claims_of_other_drivers_or_reserved_by_no_pod_do_not_block() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _claim(cluster, "gpu", driver="gpu.nvidia.com")
    _claim(cluster, "idle", reserved=False)

    assert preflight.check(cluster, **HOST) == ""


class _ClaimsForbidden(memory_cluster.InMemoryCluster):
    def list(self, kind: str, *, namespace: str = "",
             label_selector: Mapping[str, str] | None = None) -> ports.ListResult:
        if kind == kinds.RESOURCE_CLAIM.kind:
            raise errors.ClusterError("resourceclaims is forbidden for the preflight account")
        return super().list(kind, namespace=namespace, label_selector=label_selector)


def test_preflight_refuses_readably_when_it_cannot_list_claims() -> None:
    refusal = preflight.check(_ClaimsForbidden(), **HOST)

    assert refusal.startswith("cannot list ResourceClaims")
    assert "forbidden for the preflight account" in refusal


# ---------------------------------------------------------------- the docs it points to


def test_the_refusal_points_to_a_docs_section_that_exists() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "old", finalizers=[names.COMPUTE_DOMAIN_FINALIZER], annotations={
        names.ADMITTED_MODE_ANNOTATION: "driverManaged",
        names.ADMITTED_ISOLATION_ANNOTATION: "domain"})
    refusal = preflight.check(cluster, **HOST)

    match = re.search(r"see (docs/[\w./-]+\.md), '([^']+)'", refusal)

    assert match is not None, refusal
    headings = [line.lstrip("#").strip()
                for line in (REPO_ROOT / match.group(1)).read_text().splitlines()
                if line.startswith("#")]
    assert match.group(2) in headings, f"{match.group(1)} has no section '{match.group(2)}'"
    assert (match.group(1), match.group(2)) == modeswitch.DOCS_SECTION


# ---------------------------------------------------------------- the real command over HTTP


def _preflight_process(kubeconfig: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", "preflight", "--mode", "hostManaged",
         "--isolation", "none", "--feature-gates", "HostManagedIMEXDaemon=true",
         "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_the_preflight_command_refuses_over_the_api_and_passes_once_cleared(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])
    _slice(cluster, "node-a", daemon=True)
    _claim(cluster, "training")
    kubeconfig = tmp_path / "kubeconfig"
    with apiserver.EmbeddedAPIServer(cluster) as server:
        server.write_kubeconfig(str(kubeconfig))

        refused = _preflight_process(kubeconfig)
        cluster.patch(kinds.COMPUTE_DOMAIN.kind, namespace="ml", name="upstream",
                      patch={"metadata": {"finalizers": []}})
        cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace="ml", name="training")
        passed = _preflight_process(kubeconfig)

    assert refused.returncode == 1, refused.stderr
    assert "ml/upstream" in refused.stderr and "ml/training" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.startswith("ok:")


def test_an_adoption_refusal_also_points_to_the_upstream_section_that_exists() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _cd(cluster, "upstream", finalizers=[names.COMPUTE_DOMAIN_FINALIZER])

    refusal = preflight.check(cluster, **DRIVER)

    docs, section = modeswitch.ADOPTION_DOCS_SECTION
    assert f"{docs}, '{section}'" in refusal
    headings = [line.lstrip("#").strip()
                for line in (REPO_ROOT / docs).read_text().splitlines() if line.startswith("#")]
    assert section in headings


# ---------------------------------------------------------------- the runtime CDI check, per node


def _node(cluster: memory_cluster.InMemoryCluster, name: str, *, cdi_disabled: str | None,
          message: str = "CDI off") -> None:
    cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": name}})
    conditions = [{"type": "Ready", "status": "True"}]
    if cdi_disabled is not None:
        conditions.append({"type": runtime_cdi.CONDITION_TYPE, "status": cdi_disabled,
                           "reason": "CDIOff", "message": message})
    cluster.patch(kinds.NODE.kind, namespace="", name=name, subresource="status",
                  patch={"status": {"conditions": conditions}})


def test_nodes_whose_runtime_ignores_cdi_specs_are_reported_by_name() -> None:
    cluster = memory_cluster.InMemoryCluster()
    _node(cluster, "node-b", cdi_disabled="True", message="enable CDI on b")
    _node(cluster, "node-a", cdi_disabled="True", message="enable CDI on a")
    _node(cluster, "node-c", cdi_disabled="False")
    _node(cluster, "node-d", cdi_disabled=None)
    assert preflight.runtime_cdi_notes(cluster) == (
        "node node-a: prepares are refused there: enable CDI on a",
        "node node-b: prepares are refused there: enable CDI on b",
    )


def test_nodes_that_cannot_be_listed_are_a_note_not_a_refusal() -> None:
    class NoNodes(memory_cluster.InMemoryCluster):
        def list(self, kind: str, **kwargs: Any) -> ports.ListResult:
            if kind == kinds.NODE.kind:
                raise errors.ClusterError("nodes is forbidden")
            return super().list(kind, **kwargs)

    (note,) = preflight.runtime_cdi_notes(NoNodes())
    assert "cannot list Nodes" in note and "nodes is forbidden" in note


def test_the_preflight_command_warns_of_such_nodes_and_still_passes(
    tmp_path: pathlib.Path,
) -> None:
    cluster = memory_cluster.InMemoryCluster()
    _node(cluster, "node-a", cdi_disabled="True", message="the runtime has CDI disabled")
    kubeconfig = tmp_path / "kubeconfig"
    with apiserver.EmbeddedAPIServer(cluster) as server:
        server.write_kubeconfig(str(kubeconfig))
        passed = _preflight_process(kubeconfig)
    assert passed.returncode == 0, passed.stderr
    assert ("warning: node node-a: prepares are refused there: the runtime has CDI disabled"
            in passed.stderr)
