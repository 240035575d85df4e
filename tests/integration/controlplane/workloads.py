"""Users' objects on the control-plane tier: pods with claims, as a user would write them.

Pods are created, never bound by a test: the scheduler places them, the resourceclaim controller
makes their claims from templates, the kubelet prepares them and starts their containers on the
stand-in runtime, which records the CDI device names the kubelet passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import stand_in_runtime
from cluster_driver import Cluster
from kubernetes import client, dynamic

WORKLOAD_NAMESPACE = "team-a"
WORKLOAD_IMAGE = "registry.invalid/workload:1"

Obj = dict[str, Any]


def ensure_namespace(cluster: Cluster, name: str = WORKLOAD_NAMESPACE) -> None:
    """The namespace, once its `default` ServiceAccount exists (pods are refused before)."""
    cluster.plane.kube.ensure_namespace(name)

    def has_default_account() -> bool:
        try:
            cluster.core().read_namespaced_service_account("default", name)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    cluster.eventually(has_default_account, what=f"the default ServiceAccount of {name}")


def resources(cluster: Cluster, api_version: str, kind: str) -> Any:
    return dynamic.DynamicClient(cluster.admin_client()).resources.get(
        api_version=api_version, kind=kind)


def create(cluster: Cluster, obj: Mapping[str, Any]) -> Obj:
    """Create `obj` as a user would (`kubectl create`)."""
    api = resources(cluster, str(obj["apiVersion"]), str(obj["kind"]))
    namespace = obj.get("metadata", {}).get("namespace")
    made = api.create(body=dict(obj), namespace=namespace)
    return dict(made.to_dict())


def pod(name: str, *, claims: Sequence[tuple[str, Mapping[str, str]]],
        containers: int = 1, namespace: str = WORKLOAD_NAMESPACE) -> Obj:
    """A pod whose containers each use every claim; `claims`: (name, {resourceClaimName|
    resourceClaimTemplateName: ...})."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": claim, **source} for claim, source in claims],
            "containers": [
                {"name": f"ctr{i}", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"],
                 "resources": {"claims": [{"name": claim} for claim, _ in claims]}}
                for i in range(containers)
            ],
        },
    }


def read_pod(cluster: Cluster, name: str, namespace: str = WORKLOAD_NAMESPACE) -> Obj | None:
    core = cluster.core()
    try:
        found = core.read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(cluster.admin_client().sanitize_for_serialization(found))


def running(cluster: Cluster, name: str, namespace: str = WORKLOAD_NAMESPACE,
            *, timeout_s: float = 120.0) -> Obj:
    """Wait until the pod is Running with every container ready; its object."""

    def probe() -> Obj | None:
        found = read_pod(cluster, name, namespace)
        if found is None or found.get("status", {}).get("phase") != "Running":
            return None
        statuses = found["status"].get("containerStatuses", [])
        return found if statuses and all(s.get("ready") for s in statuses) else None

    return dict(cluster.eventually(probe, what=f"pod {namespace}/{name} Running",
                                   timeout_s=timeout_s))


def delete_pod(cluster: Cluster, name: str, namespace: str = WORKLOAD_NAMESPACE,
               *, timeout_s: float = 120.0) -> None:
    """Delete the pod and wait until it is gone (the kubelet confirmed its containers ended)."""
    try:
        cluster.core().delete_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    cluster.eventually(lambda: read_pod(cluster, name, namespace) is None,
                       what=f"pod {namespace}/{name} gone", timeout_s=timeout_s)


def claims_of(cluster: Cluster, pod_obj: Mapping[str, Any]) -> list[Obj]:
    """The ResourceClaims the pod's status names (made from templates or referenced)."""
    api = resources(cluster, "resource.k8s.io/v1", "ResourceClaim")
    namespace = pod_obj["metadata"]["namespace"]
    found = []
    for status in pod_obj.get("status", {}).get("resourceClaimStatuses", []):
        if status.get("resourceClaimName"):
            found.append(dict(api.get(name=status["resourceClaimName"],
                                      namespace=namespace).to_dict()))
    for claim in pod_obj["spec"].get("resourceClaims", []):
        if claim.get("resourceClaimName"):
            found.append(dict(api.get(name=claim["resourceClaimName"],
                                      namespace=namespace).to_dict()))
    return found


def list_objects(cluster: Cluster, api_version: str, kind: str,
                 namespace: str | None = None) -> list[Obj]:
    api = resources(cluster, api_version, kind)
    items = api.get(namespace=namespace).to_dict().get("items", [])
    return [dict(i) for i in items]


def container_records(cluster: Cluster, pod_name: str,
                      namespace: str = WORKLOAD_NAMESPACE) -> list[Obj]:
    """What the runtime was asked to create for the pod's containers (CDI device names too)."""
    assert cluster.runtime is not None
    return [r for r in stand_in_runtime.records(cluster.runtime.state_dir)
            if r["pod_name"] == pod_name and r["pod_namespace"] == namespace]


def unschedulable_reason(cluster: Cluster, name: str,
                         namespace: str = WORKLOAD_NAMESPACE) -> str | None:
    """The scheduler's message once it gave up placing the pod, else None."""
    found = read_pod(cluster, name, namespace)
    for condition in (found or {}).get("status", {}).get("conditions", []):
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"):
            return str(condition.get("message", ""))
    return None
