"""`computedomain preflight`: the Helm pre-upgrade check of a mode/isolation change."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from adapters.kube import cluster as kube_cluster
from core import controlling, errors, kinds, models, modes, modeswitch, ports


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "preflight",
        help="refuse a mode/isolation change while ComputeDomains admitted under another exist",
    )
    parser.add_argument("--mode", required=True)
    parser.add_argument("--isolation", default="")
    parser.add_argument("--feature-gates", default="")
    parser.add_argument("--kubeconfig", default=None)
    parser.set_defaults(run=run)


def check(cluster: ports.Cluster, *, mode: str, isolation: str, feature_gates: str) -> str:
    """"" when the change is safe, else the refusal message (also for an invalid target mode)."""
    try:
        resolved = modes.resolve_driver_config(
            mode=mode, isolation=isolation, feature_gates=feature_gates, namespace=""
        )
    except errors.ConfigError as exc:
        return exc.message
    try:
        listed = cluster.list(kinds.COMPUTE_DOMAIN.kind).items
    except errors.ClusterError as exc:
        return (
            f"cannot list ComputeDomains to check the IMEX mode change: {exc.message}; check "
            "that the API server is reachable and the preflight ServiceAccount may list "
            "computedomains.resource.nvidia.com in all namespaces"
        )
    # Only the admission annotations matter here, so read the metadata alone: a CD the API
    # server accepted but our decoder rejects must not fail every upgrade.
    domains = [_metadata_only(obj) for obj in listed]
    config = resolved.config
    blockers = modeswitch.find_blockers(domains, mode=config.mode, isolation=config.isolation)
    if not blockers:
        return ""
    return modeswitch.refusal_message(
        blockers, wanted=f"{config.mode.value}/{config.isolation.value}"
    )


def _metadata_only(obj: Mapping[str, Any]) -> models.ComputeDomain:
    """A ComputeDomain carrying `obj`'s metadata and an empty spec (never read here)."""
    return models.ComputeDomain(
        meta=controlling.meta_from_k8s(obj),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="")
        ),
    )


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    try:
        cluster = kube_cluster.KubeCluster.from_config(args.kubeconfig or env.get("KUBECONFIG"))
    except errors.DriverError as exc:
        print(f"error: cannot reach the API server: {exc.message}", file=sys.stderr)
        return 1
    refusal = check(
        cluster, mode=args.mode, isolation=args.isolation, feature_gates=args.feature_gates
    )
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    print("ok: no ComputeDomain blocks this IMEX mode/isolation")
    return 0
