"""`computedomain plan`: what the controller would create for some CD manifests, offline."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from core import decoding, errors, kinds, models
from core.computedomain import controlling, modes


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "plan", help="print the objects the controller would create for ComputeDomain manifests"
    )
    parser.add_argument(
        "files", nargs="+", help="YAML files with ComputeDomain objects ('-' = stdin)"
    )
    parser.add_argument("--mode", default="driverManaged", help="driverManaged|hostManaged")
    parser.add_argument("--isolation", default="", help="domain|none|channel")
    parser.add_argument("--feature-gates", default="", help='e.g. "HostManagedIMEX=true"')
    parser.add_argument("--namespace", default="nvidia-dra-driver", help="driver namespace")
    parser.set_defaults(run=run)


def _documents(path: str) -> list[Mapping[str, Any]]:
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    try:
        resolved = modes.resolve_driver_config(
            mode=args.mode, isolation=args.isolation,
            feature_gates=args.feature_gates, namespace=args.namespace,
        )
    except errors.ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    out: list[Mapping[str, Any]] = []
    for path in args.files:
        for doc in _documents(path):
            if doc.get("kind") != kinds.COMPUTE_DOMAIN.kind:
                continue
            doc = _with_placeholder_uid(doc)
            try:
                cd = decoding.compute_domain_from_k8s(doc)
            except errors.DecodeError as exc:
                print(f"error: {path}: {exc.message}", file=sys.stderr)
                return 1
            out.extend(_created_objects(cd, resolved.config))
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return 0


def _with_placeholder_uid(doc: Mapping[str, Any]) -> dict[str, Any]:
    # Manifests have no uid before the API server assigns one; show where it goes.
    meta = dict(doc.get("metadata") or {})
    meta.setdefault("uid", "<computedomain-uid>")
    return {**doc, "metadata": meta}


def _created_objects(
    cd: models.ComputeDomain, config: models.DriverConfig
) -> list[Mapping[str, Any]]:
    """Plan against an empty cluster until the planner has nothing left to create."""
    observed = controlling.observe(cd, objects={}, config=config)
    actions = controlling.plan_compute_domain(cd, observed=observed, config=config)
    return [dict(a.obj) for a in actions if isinstance(a, models.CreateObject)]
