"""Builders of the Kubernetes objects the controller owns, as plain JSON dicts.

The controller planner (`controlling`) decides *whether* an object must exist; this module
decides *what it looks like*. Every builder is deterministic (same inputs, same dict, keys in a
fixed order) so that plans compare equal across reconciles, and every object validates strictly
against the Kubernetes 1.34+ OpenAPI schemas (pinned by tests/integration/objects/).
"""

from __future__ import annotations

from typing import Any, Final

from core import decoding, gates, kinds, models, names
from core.computedomain import membership

DAEMON_CONTAINER_NAME: Final = "compute-domain-daemon"
DAEMON_COMMAND: Final = ("compute-domain-daemon", "run")
DAEMON_READINESS_COMMAND: Final = ("compute-domain-daemon", "check")

_CHANNEL_CEL: Final = (
    f"device.driver == '{names.DRIVER_NAME}' && "
    f"device.attributes['{names.DRIVER_NAME}'].type == '{names.DEVICE_TYPE_CHANNEL}' && "
    f"device.attributes['{names.DRIVER_NAME}'].id == 0"
)
# Channel isolation: exactly the node's slot devices (the channel comes from the claim's config).
_SLOT_CEL: Final = (
    f"device.driver == '{names.DRIVER_NAME}' && "
    f"device.attributes['{names.DRIVER_NAME}'].type == '{names.DEVICE_TYPE_SLOT}'"
)
_DAEMON_CEL: Final = (
    f"device.driver == '{names.DRIVER_NAME}' && "
    f"device.attributes['{names.DRIVER_NAME}'].type == '{names.DEVICE_TYPE_DAEMON}'"
)


def channel_allocation_mode(
    cd: models.ComputeDomain, *, config: models.DriverConfig
) -> models.AllocationMode:
    """The allocationMode the workload RCT carries.

    NB: host-managed forces `Single`: every CD on a fabric shares host channel 0 (isolation
    `none`), or gets exactly one channel of its own (isolation `channel`); "all channels" of a
    host-run IMEX domain would hand one workload every other workload's channels.
    """
    if config.host_managed:
        return models.AllocationMode.SINGLE
    return cd.spec.channel.allocation_mode


def owned_labels(cd_uid: str, *, target: str) -> dict[str, str]:
    """Labels that tie an object to its ComputeDomain and say which side of it it serves."""
    return {names.COMPUTE_DOMAIN_LABEL: cd_uid, names.COMPUTE_DOMAIN_TARGET_LABEL: target}


def workload_rct(
    cd: models.ComputeDomain, *, config: models.DriverConfig, channel_id: int | None = None
) -> dict[str, Any]:
    """The ResourceClaimTemplate workloads reference, in the CD's namespace (both modes).

    Channel isolation: it requests one slot device and carries the CD's channel (`channel_id`,
    required then) in its opaque config, so each claim made from it names its channel.
    Claims made from it carry its labels too (`spec.metadata.labels`, which Kubernetes'
    resourceclaim controller copies onto each claim): the controller watches claims by them.
    """
    isolated = config.channel_isolation
    if isolated and channel_id is None:
        raise ValueError("channel isolation: the workload RCT needs the CD's channel ID")
    parameters = decoding.opaque_config_to_k8s(
        models.ChannelConfig(
            domain_id=cd.uid,
            allocation_mode=channel_allocation_mode(cd, config=config).value,
            channel_id=channel_id if isolated else None,
        )
    )
    return _rct(
        name=cd.spec.channel.resource_claim_template_name,
        namespace=cd.meta.namespace,
        labels=owned_labels(cd.uid, target=names.TARGET_WORKLOAD),
        request=names.CHANNEL_REQUEST_NAME,
        device_class=names.SLOT_DEVICE_CLASS if isolated else names.CHANNEL_DEVICE_CLASS,
        parameters=parameters,
        claim_labels=owned_labels(cd.uid, target=names.TARGET_WORKLOAD),
    )


def daemon_rct(cd: models.ComputeDomain, *, config: models.DriverConfig) -> dict[str, Any]:
    """The ResourceClaimTemplate of the per-CD IMEX daemon pods (driver-managed only)."""
    return _rct(
        name=names.daemonset_name(cd.uid),
        namespace=config.namespace,
        labels=owned_labels(cd.uid, target=names.TARGET_DAEMON),
        request=names.DAEMON_REQUEST_NAME,
        device_class=names.DAEMON_DEVICE_CLASS,
        parameters=decoding.opaque_config_to_k8s(models.DaemonConfig(domain_id=cd.uid)),
    )


def daemonset(cd: models.ComputeDomain, *, config: models.DriverConfig) -> dict[str, Any]:
    """The per-CD IMEX daemon DaemonSet (driver-managed only).

    It runs on nodes the kubelet plugin labelled with the CD's UID (when a workload channel was
    prepared there); each pod claims the node's daemon device through the daemon RCT.
    """
    name = names.daemonset_name(cd.uid)
    labels = owned_labels(cd.uid, target=names.TARGET_DAEMON)
    # The names `compute-domain-daemon` reads. The daemon claim's CDI edits set the domain's
    # identity again (and CLIQUE_ID, which differs per node); the DaemonSet's copy lets the
    # daemon say clearly when those edits did not apply.
    env: list[dict[str, Any]] = [
        {"name": "COMPUTE_DOMAIN_UUID", "value": cd.uid},
        {"name": "COMPUTE_DOMAIN_NAME", "value": cd.meta.name},
        {"name": "COMPUTE_DOMAIN_NAMESPACE", "value": cd.meta.namespace},
        {"name": "MAX_NODES_PER_IMEX_DOMAIN",
         "value": str(membership.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN)},
        {"name": "FEATURE_GATES", "value": gates.format_feature_gates(config.gates)},
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_IP", "status.podIP"),
        _field_env("POD_UID", "metadata.uid"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        # The GPU-less IMEX daemon gets its device through the claim; keep the NVIDIA container
        # runtime from injecting GPUs as well.
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    container: dict[str, Any] = {
        "name": DAEMON_CONTAINER_NAME,
        "image": config.daemon_image,
        "command": list(DAEMON_COMMAND),
        "env": env,
        "resources": {"claims": [{"name": names.DAEMON_REQUEST_NAME}]},
        # NB: root, not privileged: the daemon writes /etc/hosts and the root-owned per-domain
        # /imexd host directory; its only device comes through the claim.
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False},
        "readinessProbe": {
            "exec": {"command": list(DAEMON_READINESS_COMMAND)},
            "periodSeconds": 5,
            "failureThreshold": 1,
        },
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": {names.COMPUTE_DOMAIN_LABEL: cd.uid},
        "resourceClaims": [{"name": names.DAEMON_REQUEST_NAME, "resourceClaimTemplateName": name}],
        "containers": [container],
        # The daemon must run wherever a workload was prepared, tainted (GPU) nodes included.
        "tolerations": [{"operator": "Exists"}],
    }
    if config.daemon_service_account:
        pod_spec["serviceAccountName"] = config.daemon_service_account
    return {
        "apiVersion": kinds.DAEMON_SET.api_version,
        "kind": kinds.DAEMON_SET.kind,
        "metadata": _metadata(name=name, namespace=config.namespace, labels=labels),
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def daemonset_takeover(cd: models.ComputeDomain, *, config: models.DriverConfig) -> dict[str, Any]:
    """The merge patch that makes another driver's (upstream's) DaemonSet of `cd` ours in
    place: our labels, our pod template, and `updateStrategy: OnDelete`.

    NB: OnDelete, so that no running IMEX daemon is restarted: the daemons upstream started
    keep serving the workloads of their IMEX domain; a node gets our daemon only when its old
    pod goes (the node leaves the domain, the pod is deleted). One DaemonSet, one pod per node:
    never two daemons of one CD on a node. The selector is immutable and stays upstream's
    (the computeDomain label alone), which our template labels still match. Keys upstream's
    pod spec has and ours has not are nulled, since a merge patch would keep them.
    """
    ours = daemonset(cd, config=config)
    template = ours["spec"]["template"]
    pod_spec: dict[str, Any] = dict(template["spec"])
    account = pod_spec.get("serviceAccountName")
    pod_spec["serviceAccountName"] = account
    # The deprecated alias: left in place, the API server would copy it back into the name.
    pod_spec["serviceAccount"] = account
    pod_spec["imagePullSecrets"] = None
    return {
        "metadata": {"labels": dict(ours["metadata"]["labels"])},
        "spec": {
            "updateStrategy": {"type": "OnDelete", "rollingUpdate": None},
            "template": {"metadata": {"labels": dict(template["metadata"]["labels"])},
                         "spec": pod_spec},
        },
    }


def device_classes(config: models.DriverConfig) -> tuple[dict[str, Any], ...]:
    """The DeviceClasses of the driver: the default channel class, plus the daemon class unless
    the host runs IMEX (no daemon device is published in host-managed mode), plus the slot class
    under channel isolation."""
    classes = [_device_class(names.CHANNEL_DEVICE_CLASS, _CHANNEL_CEL)]
    if config.channel_isolation:
        classes.append(_device_class(names.SLOT_DEVICE_CLASS, _SLOT_CEL))
    if not config.host_managed:
        classes.append(_device_class(names.DAEMON_DEVICE_CLASS, _DAEMON_CEL))
    return tuple(sorted(classes, key=lambda c: str(c["metadata"]["name"])))


# ---------------------------------------------------------------- private

def _metadata(*, name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels),
        "finalizers": [names.COMPUTE_DOMAIN_FINALIZER],
    }


def _rct(
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    request: str,
    device_class: str,
    parameters: dict[str, Any],
    claim_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": kinds.RESOURCE_CLAIM_TEMPLATE.api_version,
        "kind": kinds.RESOURCE_CLAIM_TEMPLATE.kind,
        "metadata": _metadata(name=name, namespace=namespace, labels=labels),
        "spec": {
            **({"metadata": {"labels": claim_labels}} if claim_labels else {}),
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters},
                        }
                    ],
                }
            }
        },
    }


def _device_class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.DEVICE_CLASS.api_version,
        "kind": kinds.DEVICE_CLASS.kind,
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}
