"""What the upstream Go driver's controller leaves in a cluster for one ComputeDomain.

Written from the shapes upstream documents and creates (its controller's templates for the
workload and daemon ResourceClaimTemplates and the per-CD DaemonSet, read for facts only), not
copied: the fields our adoption depends on, and the ones where upstream differs from ours
(DaemonSet labels and selector without the target label, another ServiceAccount, claim name,
probes and tolerations; workload RCT without labels for its claims).
"""

from __future__ import annotations

from typing import Any

from core import names

UPSTREAM_DAEMON_ACCOUNT = "compute-domain-daemon-service-account"
UPSTREAM_DAEMON_CLAIM = "compute-domain-daemon"


def compute_domain(*, name: str, namespace: str, num_nodes: int = 0) -> dict[str, Any]:
    """A CD as upstream's controller leaves it: its finalizer, no admitted-mode stamp."""
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace,
                     "finalizers": [names.COMPUTE_DOMAIN_FINALIZER]},
        "spec": {"numNodes": num_nodes, "channel": {
            "resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": "Single"}},
    }


def _rct(*, name: str, namespace: str, cd_uid: str, target: str, request: str,
         device_class: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": names.DRA_GROUP_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name, "namespace": namespace,
            "finalizers": [names.COMPUTE_DOMAIN_FINALIZER],
            "labels": {names.COMPUTE_DOMAIN_LABEL: cd_uid,
                       names.COMPUTE_DOMAIN_TARGET_LABEL: target},
        },
        # NB: no spec.metadata: claims made from upstream's templates carry no labels.
        "spec": {"spec": {"devices": {
            "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
            "config": [{"requests": [request], "opaque": {
                "driver": names.DRIVER_NAME, "parameters": parameters}}],
        }}},
    }


def workload_rct(*, cd_name: str, namespace: str, cd_uid: str) -> dict[str, Any]:
    return _rct(
        name=f"{cd_name}-channel", namespace=namespace, cd_uid=cd_uid,
        target=names.TARGET_WORKLOAD, request=names.CHANNEL_REQUEST_NAME,
        device_class=names.CHANNEL_DEVICE_CLASS,
        parameters={"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                    "domainID": cd_uid, "allocationMode": "Single"},
    )


def daemon_rct(*, driver_namespace: str, cd_uid: str) -> dict[str, Any]:
    return _rct(
        name=names.daemonset_name(cd_uid), namespace=driver_namespace, cd_uid=cd_uid,
        target=names.TARGET_DAEMON, request=names.DAEMON_REQUEST_NAME,
        device_class=names.DAEMON_DEVICE_CLASS,
        parameters={"apiVersion": names.GROUP_VERSION, "kind": names.KIND_DAEMON_CONFIG,
                    "domainID": cd_uid},
    )


def daemonset(*, driver_namespace: str, cd_uid: str) -> dict[str, Any]:
    """Upstream's per-CD IMEX DaemonSet: our name and namespace, the computeDomain label only."""
    labels = {names.COMPUTE_DOMAIN_LABEL: cd_uid}
    check = ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": names.daemonset_name(cd_uid), "namespace": driver_namespace,
                     "finalizers": [names.COMPUTE_DOMAIN_FINALIZER], "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": UPSTREAM_DAEMON_ACCOUNT,
                    "serviceAccount": UPSTREAM_DAEMON_ACCOUNT,
                    "imagePullSecrets": [{"name": "upstream-pull"}],
                    "nodeSelector": dict(labels),
                    "containers": [{
                        "name": "compute-domain-daemon",
                        "image": "upstream/dra-driver:v25",
                        "command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"],
                        "env": [{"name": "LOG_VERBOSITY", "value": "4"}],
                        "resources": {"claims": [{"name": UPSTREAM_DAEMON_CLAIM}]},
                        "startupProbe": {"exec": {"command": check}, "failureThreshold": 1200},
                        "readinessProbe": {"exec": {"command": check}},
                    }],
                    "tolerations": [{"operator": "Exists", "effect": effect} for effect in
                                    ("NoSchedule", "NoExecute", "PreferNoSchedule")],
                    "resourceClaims": [{"name": UPSTREAM_DAEMON_CLAIM,
                                        "resourceClaimTemplateName":
                                            names.daemonset_name(cd_uid)}],
                },
            },
        },
    }


def daemon_pod(*, driver_namespace: str, cd_uid: str, node: str) -> dict[str, Any]:
    """A running daemon pod of upstream's DaemonSet (the computeDomain label only)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{names.daemonset_name(cd_uid)}-{node}",
                     "namespace": driver_namespace,
                     "labels": {names.COMPUTE_DOMAIN_LABEL: cd_uid}},
        "spec": {"nodeName": node, "serviceAccountName": UPSTREAM_DAEMON_ACCOUNT,
                 "containers": [{"name": "compute-domain-daemon", "image": "upstream"}]},
    }


def workload_claim(*, name: str, namespace: str, cd_uid: str, node: str) -> dict[str, Any]:
    """A claim the resourceclaim controller made from upstream's workload RCT (no labels)."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {
            "requests": [{"name": names.CHANNEL_REQUEST_NAME,
                          "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}],
            "config": [{"requests": [names.CHANNEL_REQUEST_NAME], "opaque": {
                "driver": names.DRIVER_NAME, "parameters": {
                    "apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                    "domainID": cd_uid, "allocationMode": "Single"}}}],
        }},
    }


def allocation(*, node: str, pod_uid: str) -> dict[str, Any]:
    """The status of that claim once allocated on `node`'s channel 0 and reserved by a pod."""
    return {"status": {
        "allocation": {"devices": {"results": [{
            "request": names.CHANNEL_REQUEST_NAME, "driver": names.DRIVER_NAME,
            "pool": node, "device": names.channel_device_name(0)}]}},
        "reservedFor": [{"resource": "pods", "name": "worker-0", "uid": pod_uid}],
    }}
