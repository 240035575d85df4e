"""Plain-value builders for the plugin planner tests: claims, ComputeDomains, configs, nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import node_facts, preparing

CD_UID = names.ComputeDomainUID("5b2f0e1c-cd01-4b7a-9d3e-000000000001")
OTHER_CD_UID = names.ComputeDomainUID("5b2f0e1c-cd02-4b7a-9d3e-000000000002")
CLAIM_UID = names.ClaimUID("0a1b2c3d-1111-4222-8333-444455556666")
OTHER_CLAIM_UID = names.ClaimUID("9f8e7d6c-aaaa-4bbb-8ccc-ddddeeeeffff")
NAMESPACE = "team-a"
NODE_NAME = names.NodeName("gb200-rack1-node07")
CLIQUE = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7.32766"
NOW = 1_700_000_000.0

GATES = models.FeatureGates(values={})
HOST = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE, gates=GATES
)
HOST_CHANNEL = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.CHANNEL, gates=GATES
)
DRIVER = models.DriverConfig(
    mode=models.IMEXMode.DRIVER_MANAGED, isolation=models.Isolation.DOMAIN, gates=GATES
)
NODE = node_facts.ImexNodeFacts(
    node_name=NODE_NAME, clique_id=CLIQUE, channel_major=242, boot_id="b-1"
)


def domain(
    uid: str = CD_UID,
    *,
    namespace: str = NAMESPACE,
    name: str = "cd-train",
    ready_nodes: tuple[str, ...] = (),
    annotations: Mapping[str, str] | None = None,
    deleting: bool = False,
) -> models.ComputeDomain:
    nodes = tuple(
        models.ComputeDomainNode(
            name=n, ip_address="10.0.0.7", clique_id=CLIQUE, status=models.DomainStatus.READY
        )
        for n in ready_nodes
    )
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid,
            annotations=dict(annotations or {}),
            deletion_timestamp="2025-01-01T00:00:00Z" if deleting else None,
        ),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name=f"{name}-channel")
        ),
        status=models.ComputeDomainStatus(nodes=nodes),
    )


def channel_params(domain_id: str = CD_UID, allocation_mode: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": domain_id,
    }
    if allocation_mode is not None:
        params["allocationMode"] = allocation_mode
    return params


def daemon_params(domain_id: str = CD_UID) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_DAEMON_CONFIG,
        "domainID": domain_id,
    }


def claim(
    uid: str = CLAIM_UID,
    *,
    namespace: str = NAMESPACE,
    name: str = "job-0-channel",
    params: Mapping[str, Any] | None = None,
    request: str = names.CHANNEL_REQUEST_NAME,
    device: str = "channel-0",
    allocated: bool = True,
    results: tuple[models.DeviceResult, ...] | None = None,
) -> models.ResourceClaim:
    if results is None:
        results = (
            models.DeviceResult(
                request=request, driver=names.DRIVER_NAME, pool=NODE_NAME, device=device
            ),
        )
    return models.ResourceClaim(
        uid=names.ClaimUID(uid),
        namespace=namespace,
        name=name,
        allocated=allocated,
        results=results,
        configs=(
            models.RawOpaqueConfig(
                source=models.ConfigSource.CLAIM,
                requests=(request,),
                driver=names.DRIVER_NAME,
                parameters=channel_params() if params is None else params,
            ),
        ),
    )


def daemon_claim(
    uid: str = CLAIM_UID, *, namespace: str = "nvidia-dra-driver"
) -> models.ResourceClaim:
    return claim(
        uid,
        namespace=namespace,
        name="cd-train-daemon",
        params=daemon_params(),
        request=names.DAEMON_REQUEST_NAME,
        device="daemon-0",
    )


def empty_checkpoint(config: models.DriverConfig = HOST) -> cd_records.Checkpoint:
    """A node with nothing prepared (the checkpoint no longer records the mode: `config` is
    what the plugin runs with)."""
    return cd_records.empty(boot_id=NODE.boot_id)


def prepare(
    the_claim: models.ResourceClaim,
    *,
    checkpoint: models.Checkpoint | None = None,
    config: models.DriverConfig = HOST,
    node: models.NodeFacts = NODE,
    domains: Mapping[names.ComputeDomainUID, models.ComputeDomain] | None = None,
    labels: Mapping[str, str] | None = None,
    now: float = NOW,
) -> models.ClaimOutcome:
    if domains is None:
        domains = {CD_UID: domain(ready_nodes=(NODE_NAME,))}
    return preparing.plan_prepare(
        the_claim,
        checkpoint=empty_checkpoint(config) if checkpoint is None else checkpoint,
        node=node,
        config=config,
        domains=domains,
        node_labels={} if labels is None else labels,
        now=now,
    )


def ref(the_claim: models.ResourceClaim) -> models.ClaimRef:
    return models.ClaimRef(uid=the_claim.uid, namespace=the_claim.namespace, name=the_claim.name)


def writes(outcome: models.ClaimOutcome) -> list[models.PluginAction]:
    """Steps that change node-local state (checkpoint or CDI files)."""
    return [
        s
        for s in outcome.steps
        if isinstance(s, models.WriteCheckpoint | models.WriteCDISpec | models.DeleteCDISpec)
    ]
