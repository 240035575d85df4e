"""fabricTopologyConfig under a real API server and scheduler: no constraints written by the user.

One simulated HGX H100 node (8 GPUs behind NVSwitches, the simulated Fabric Manager's real
partition table), the chart with only the GPU half and gates FabricManagerPartitioning +
FabricTopologySupport. The webhook runs as its own process over TLS (a self-signed
certificate made by `openssl`); the chart's MutatingWebhookConfiguration is registered with the
API server, pointed at it on loopback. A pod first takes the GPU with module id 2 (in 4-GPU
partition 2); then a claim asking for 4 GPUs with `fabricTopologyConfig: {strategy: Auto,
partitionSize: 4}` and no constraints is created: the API server has the webhook add
`matchAttribute: gpu.nvidia.com/partition4`, and the real scheduler gives it the GPUs of
partition 3 (modules 3, 4, 7, 8), where without the constraint it would have taken the first
four free GPUs (modules 1, 3, 4, 5), which form no partition (the control test shows it). A
Manual claim listing partition 7 gets a selector instead, and the two GPUs of that pair.
Templates written in resource.k8s.io v1beta1 and v1beta2 (served for this module) get the same
in their own shape.
"""

from __future__ import annotations

import base64
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest
import realkube_driver
import workloads
from cluster_driver import NODE, REPO_ROOT, Cluster
from kubernetes import client
from realkube_server import ChildProcess, free_port
from workloads import WORKLOAD_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

GPU_DRIVER = "gpu.nvidia.com"
FEATURE_GATES = {"FabricManagerPartitioning": True, "FabricTopologySupport": True}
# The GPU half alone: these tests need no ComputeDomain plugin.
VALUES: dict[str, Any] = {
    "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
    "featureGates": FEATURE_GATES,
}

@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # The beta APIs too (off by default): claims written in them are mutated in their shape.
    yield from cluster_driver.started(
        "driverManaged", values=VALUES, gpu_profile="hgx-h100",
        kube_apis={"resource.k8s.io/v1beta1": True, "resource.k8s.io/v1beta2": True})


@pytest.fixture(scope="module")
def partitions(cluster: Cluster) -> dict[str, dict[str, int]]:
    """device name -> its Fabric Manager attributes, once the plugin published them."""
    workloads.ensure_namespace(cluster)

    def published() -> dict[str, dict[str, int]] | None:
        found = {}
        for s in workloads.list_objects(cluster, "resource.k8s.io/v1", "ResourceSlice"):
            if s["spec"]["driver"] != GPU_DRIVER or s["spec"].get("nodeName") != NODE:
                continue
            for device in s["spec"]["devices"]:
                attributes = device.get("attributes", {})
                if "partition4" in attributes:
                    found[device["name"]] = {
                        key: attributes[key]["int"]
                        for key in ("gpuModuleID", "partition1", "partition2", "partition4")
                    }
        return found if len(found) == 8 else None

    return dict(cluster.eventually(published, what="8 GPUs publishing partition4",
                                   timeout_s=180))


class Webhook:
    """`computedomain webhook` over TLS on loopback, as the chart runs it (same gates)."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.cert, self.key = workdir / "webhook.crt", workdir / "webhook.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(self.key), "-out", str(self.cert), "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update({"PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1",
                    "FEATURE_GATES": ",".join(f"{k}=true" for k in FEATURE_GATES)})
        self.process = ChildProcess(
            [sys.executable, "-m", "apps.cli", "webhook", "--address", "127.0.0.1",
             "--port", str(self.port), "--tls-cert-file", str(self.cert),
             "--tls-key-file", str(self.key)],
            log_path=workdir / "webhook.log", env=env, cwd=REPO_ROOT,
        )

    def listening(self) -> bool:
        if not self.process.running:
            raise AssertionError(f"webhook exited:\n{self.process.output()[-4000:]}")
        return re.search(r"event=listening .*tls=true", self.process.output()) is not None

    def configuration(self, cluster: Cluster) -> dict[str, Any]:
        """The chart's MutatingWebhookConfiguration, its Service replaced by our URL."""
        values = cluster_driver.merge(cluster.values, {"webhook": {"enabled": True, "tls": {
            "mode": "secret", "secret": {
                "name": "webhook-tls",
                "caBundle": base64.b64encode(self.cert.read_bytes()).decode()}}}})
        rendered = realkube_driver.render(values)
        configuration = next(o for o in rendered if o["kind"] == "MutatingWebhookConfiguration")
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            del hook["clientConfig"]["service"]
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{self.port}{path}"
        return dict(configuration)

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture(scope="module")
def webhook(cluster: Cluster) -> Iterator[Webhook]:
    """The webhook, registered and answering: the API server picks up a new webhook
    configuration through an informer, so probe claims (fresh names, deleted at once) are
    created until one comes back mutated."""
    workloads.ensure_namespace(cluster)
    hook = Webhook(cluster.workdir)
    tries: list[str] = []

    def mutating() -> bool:
        tries.append(f"probe-{len(tries)}")
        made = workloads.create(cluster, gpu_claim(tries[-1], count=4, topology=AUTO_4))
        delete_claim(cluster, tries[-1])
        return bool(made["spec"]["devices"].get("constraints"))

    try:
        cluster.eventually(hook.listening, what="the webhook listening", timeout_s=60)
        cluster.plane.kube.apply([hook.configuration(cluster)])
        cluster.eventually(mutating, what="the API server calling the webhook", timeout_s=60)
        yield hook
    finally:
        hook.stop()


def gpu_claim(name: str, *, count: int, topology: dict[str, Any] | None = None,
              selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if topology is not None:
        devices["config"] = [{"requests": ["gpus"], "opaque": {"driver": GPU_DRIVER, "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "fabricTopologyConfig": topology}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
            "spec": {"devices": devices}}


def read_claim(cluster: Cluster, name: str) -> dict[str, Any]:
    api = workloads.resources(cluster, "resource.k8s.io/v1", "ResourceClaim")
    return dict(api.get(name=name, namespace=WORKLOAD_NAMESPACE).to_dict())


def delete_claim(cluster: Cluster, name: str) -> None:
    api = workloads.resources(cluster, "resource.k8s.io/v1", "ResourceClaim")
    try:
        api.delete(name=name, namespace=WORKLOAD_NAMESPACE)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def allocated(claim: dict[str, Any]) -> list[str]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted(r["device"] for r in results if r["driver"] == GPU_DRIVER)


AUTO_4 = {"strategy": "Auto", "partitionSize": 4, "virtualizationModel": "BareMetal"}


def test_a_fabric_topology_claim_without_constraints_gets_one_4_gpu_partition(
    cluster: Cluster, partitions: dict[str, dict[str, int]], webhook: Webhook,
) -> None:
    by_module = {attrs["gpuModuleID"]: name for name, attrs in partitions.items()}
    # Module 2 first: the first four free GPUs are then modules 1, 3, 4, 5 (no partition).
    workloads.create(cluster, gpu_claim(
        "module-2", count=1, selector='device.attributes["gpu.nvidia.com"].gpuModuleID == 2'))
    workloads.create(cluster, workloads.pod("one", claims=[("gpu", {
        "resourceClaimName": "module-2"})]))
    workloads.running(cluster, "one")
    assert allocated(read_claim(cluster, "module-2")) == [by_module[2]]
    assert cluster_driver.active_fabric_partitions(cluster) == {9}  # module 2 alone

    name = "fabric-4"
    claim = workloads.create(cluster, gpu_claim(name, count=4, topology=AUTO_4))
    assert claim["spec"]["devices"]["constraints"] == [
        {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/partition4"}]
    assert "event=admission_mutated" in webhook.process.output()

    workloads.create(cluster, workloads.pod("four", claims=[("gpus", {
        "resourceClaimName": name})]))
    workloads.running(cluster, "four")
    devices = allocated(read_claim(cluster, name))
    assert sorted(partitions[d]["gpuModuleID"] for d in devices) == [3, 4, 7, 8]
    assert {partitions[d]["partition4"] for d in devices} == {3}
    # Prepared with its partition active (Auto on BareMetal: the driver activates it).
    assert cluster_driver.active_fabric_partitions(cluster) == {3, 9}

    for pod_name in ("four", "one"):
        workloads.delete_pod(cluster, pod_name)
    for claim_name in (name, "module-2"):
        delete_claim(cluster, claim_name)
    cluster.eventually(lambda: cluster_driver.active_fabric_partitions(cluster) == set() or None,
                       what="both partitions deactivated")


def test_the_same_claim_without_the_webhook_would_get_gpus_of_no_partition(
    cluster: Cluster, partitions: dict[str, dict[str, int]], webhook: Webhook,
) -> None:
    """The control: with module 2 taken and no constraint (a claim without the config, which
    the webhook leaves alone), the scheduler takes modules 1, 3, 4, 5."""
    by_module = {attrs["gpuModuleID"]: name for name, attrs in partitions.items()}
    workloads.create(cluster, gpu_claim(
        "module-2-again", count=1,
        selector='device.attributes["gpu.nvidia.com"].gpuModuleID == 2'))
    workloads.create(cluster, workloads.pod("one-again", claims=[("gpu", {
        "resourceClaimName": "module-2-again"})]))
    workloads.running(cluster, "one-again")
    assert allocated(read_claim(cluster, "module-2-again")) == [by_module[2]]
    plain = workloads.create(cluster, gpu_claim("plain-4", count=4))
    assert "constraints" not in plain["spec"]["devices"] or not plain["spec"]["devices"][
        "constraints"]
    # Allocation happens when a pod needs the claim; the prepare of GPUs that form no
    # partition is then refused by the plugin, which is what the webhook spares the user.
    workloads.create(cluster, workloads.pod("plain", claims=[("gpus", {
        "resourceClaimName": "plain-4"})]))

    def allocation() -> list[str] | None:
        status = read_claim(cluster, "plain-4").get("status") or {}
        return allocated(read_claim(cluster, "plain-4")) if status.get("allocation") else None

    devices = cluster.eventually(allocation, what="plain-4 allocated")
    assert sorted(partitions[d]["gpuModuleID"] for d in devices) == [1, 3, 4, 5]
    for pod_name in ("plain", "one-again"):
        workloads.delete_pod(cluster, pod_name)
    for claim_name in ("plain-4", "module-2-again"):
        delete_claim(cluster, claim_name)


def test_a_manual_claim_gets_a_selector_and_the_gpus_of_the_listed_partition(
    cluster: Cluster, partitions: dict[str, dict[str, int]], webhook: Webhook,
) -> None:
    manual = {"strategy": "Manual", "partitionIDs": ["7"]}
    claim = workloads.create(cluster, gpu_claim("manual-7", count=2, topology=manual))
    (selector,) = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert "partition2 in [7]" in selector["cel"]["expression"]
    workloads.create(cluster, workloads.pod("manual", claims=[("gpus", {
        "resourceClaimName": "manual-7"})]))
    workloads.running(cluster, "manual")
    devices = allocated(read_claim(cluster, "manual-7"))
    assert sorted(partitions[d]["gpuModuleID"] for d in devices) == [6, 8]
    workloads.delete_pod(cluster, "manual")
    delete_claim(cluster, "manual-7")


def _served(cluster: Cluster, version: str) -> bool:
    api = client.ApisApi(cluster.admin_client())
    groups = {g.name: g for g in api.get_api_versions().groups}
    group = groups.get("resource.k8s.io")
    return group is not None and any(v.version == version for v in group.versions)


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_templates_written_in_the_beta_apis_are_mutated_in_their_own_shape(
    cluster: Cluster, webhook: Webhook, version: str,
) -> None:
    if not _served(cluster, version):
        pytest.skip(f"resource.k8s.io/{version} is not served by this API server")
    if version == "v1beta1":
        request: dict[str, Any] = {"name": "gpus", "deviceClassName": "gpu.nvidia.com",
                                   "count": 2}
    else:
        request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
    pair = gpu_claim("x", count=2, topology={"strategy": "Manual", "partitionIDs": [4]})
    auto = gpu_claim("x", count=2, topology={"strategy": "Auto", "partitionSize": 2})
    configs = [*pair["spec"]["devices"]["config"], *auto["spec"]["devices"]["config"]]
    name = f"fabric-{version}"
    made = workloads.create(cluster, {
        "apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [request], "config": configs}}},
    })
    devices = made["spec"]["spec"]["devices"]
    assert devices["constraints"] == [
        {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/partition2"}]
    (got,) = devices["requests"]
    selectors = got["selectors"] if version == "v1beta1" else got["exactly"]["selectors"]
    assert [s["cel"]["expression"].count("in [4]") for s in selectors] == [4]
    workloads.resources(cluster, f"resource.k8s.io/{version}", "ResourceClaimTemplate").delete(
        name=name, namespace=WORKLOAD_NAMESPACE)
