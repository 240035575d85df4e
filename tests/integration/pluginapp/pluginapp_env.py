"""Builders for plugin-app tests on a one-node embedded deployment."""

from __future__ import annotations

from typing import Any

from apps.cli import embedded
from core import kinds, models, names

NAMESPACE = "team"


def create_domain(env: embedded.Embedded, name: str = "cd") -> str:
    env.cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })
    env.settle()
    obj = env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=name)
    return str(obj["metadata"]["uid"])


def create_claim(
    env: embedded.Embedded, name: str, *, domain_id: str, allocation_mode: str = "",
    allocated: bool = True,
) -> models.ClaimRef:
    node = next(iter(env.nodes))
    created = env.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": names.CHANNEL_DEVICE_CLASS}}]}},
    })
    if allocated:
        pod = create_pod(env, f"{name}-pod", node_name=node)
        params: dict[str, Any] = {"apiVersion": names.GROUP_VERSION,
                                  "kind": names.KIND_CHANNEL_CONFIG, "domainID": domain_id}
        if allocation_mode:
            params["allocationMode"] = allocation_mode
        env.cluster.patch(
            kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=name, subresource="status",
            patch={"status": {"allocation": {"devices": {
                "results": [{"request": "channel", "driver": names.DRIVER_NAME, "pool": node,
                             "device": "channel-0"}],
                "config": [{"source": "FromClaim", "requests": ["channel"],
                            "opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
            }}, "reservedFor": [consumer(pod)]}},
        )
    return models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]), namespace=NAMESPACE,
                           name=name)


def create_pod(env: embedded.Embedded, name: str, *, node_name: str) -> dict[str, Any]:
    """A pod bound to `node_name`, as the scheduler leaves the pod a claim is reserved for."""
    return dict(env.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]},
    }))


def consumer(pod: dict[str, Any]) -> dict[str, str]:
    """The `status.reservedFor` entry naming `pod`."""
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def node(env: embedded.Embedded) -> embedded.SimulatedNode:
    return next(iter(env.nodes.values()))


def prepare(env: embedded.Embedded, ref: models.ClaimRef) -> models.ClaimResult:
    return node(env).kubelet.prepare(names.DRIVER_NAME, (ref,))[ref.uid]


def unprepare(env: embedded.Embedded, ref: models.ClaimRef) -> models.ClaimResult:
    return node(env).kubelet.unprepare(names.DRIVER_NAME, (ref,))[ref.uid]


def restart(env: embedded.Embedded) -> embedded.SimulatedNode:
    current = node(env)
    current.plugin.stop(grace_s=0)
    return embedded.start_node(env, current.name, profile="gb200-nvl72", retry_budget_s=0.2)
