"""`computedomain preflight`: the Helm pre-upgrade check of a mode/isolation change."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from adapters.kube import cluster as kube_cluster
from core import decoding, errors, kinds, modes, modeswitch, ports


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
    domains = [
        decoding.compute_domain_from_k8s(obj)
        for obj in cluster.list(kinds.COMPUTE_DOMAIN.kind).items
    ]
    config = resolved.config
    blockers = modeswitch.find_blockers(domains, mode=config.mode, isolation=config.isolation)
    if not blockers:
        return ""
    return modeswitch.refusal_message(
        blockers, wanted=f"{config.mode.value}/{config.isolation.value}"
    )


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    cluster = kube_cluster.KubeCluster.from_config(args.kubeconfig or env.get("KUBECONFIG"))
    refusal = check(
        cluster, mode=args.mode, isolation=args.isolation, feature_gates=args.feature_gates
    )
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    print("ok: no ComputeDomain blocks this IMEX mode/isolation")
    return 0
