"""`computedomain preflight`: the Helm pre-install/pre-upgrade check (DESIGN §6)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.kube import cluster as kube_cluster
from apps.shell import flags, logs
from core import decoding, errors, kinds, models, names, ports, runtime_cdi
from core.computedomain import modes, modeswitch

COMMAND = flags.command(
    "computedomain preflight",
    help="Refuse an install or a mode/isolation change that would strand ComputeDomains or "
    "claims in use (the Helm pre-install/pre-upgrade hook). Exit 0: safe; 1: refused or the "
    "API server cannot be read; 2: bad flags.",
    params=[
        flags.imex_mode(),
        flags.imex_isolation(),
        flags.feature_gates(),
        flags.namespace(),
        flags.kubeconfig(),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    args = flags.parse_namespace(COMMAND, argv, env)
    if not args.imex_mode:
        flags.fail("--imex-mode (env IMEX_MODE) is required: the IMEX mode being installed")
    return args


def main(argv: Sequence[str], *, env: Mapping[str, str], verbosity: int | None = None) -> int:
    args = parse(argv, env)
    logs.configure(verbosity)
    return run(args, env=env)


def check(
    cluster: ports.Cluster, *, mode: str, isolation: str, feature_gates: str, namespace: str = ""
) -> str:
    """"" when the change is safe, else the refusal message (also for an invalid target mode)."""
    try:
        resolved = modes.resolve_driver_config(
            mode=mode, isolation=isolation, feature_gates=feature_gates, namespace=namespace
        )
    except errors.ConfigError as exc:
        return exc.message
    try:
        listed = _list(cluster, kinds.COMPUTE_DOMAIN, "ComputeDomains")
        claims = _list(cluster, kinds.RESOURCE_CLAIM, "ResourceClaims")
        slices = _list(cluster, kinds.RESOURCE_SLICE, "ResourceSlices")
    except _CannotList as exc:
        return str(exc)
    # Only the admission annotations and finalizers matter here, so read the metadata alone:
    # a CD the API server accepted but our decoder rejects must not fail every upgrade.
    domains = [_metadata_only(obj) for obj in listed]
    config = resolved.config
    daemonsets: list[Any] = []
    if (config.mode is models.IMEXMode.DRIVER_MANAGED
            and any(modeswitch.made_by_another_driver(cd) for cd in domains)):
        # Only then: where upstream's per-CD IMEX DaemonSets run decides whether they can be
        # adopted (they must be in the namespace being installed).
        try:
            daemonsets = _list(cluster, kinds.DAEMON_SET, "DaemonSets",
                               label_selector={names.COMPUTE_DOMAIN_LABEL: None})
        except _CannotList as exc:
            return str(exc)
    blockers = modeswitch.find_blockers(
        domains, mode=config.mode, isolation=config.isolation,
        claims=[c for c in (_claim(obj) for obj in claims) if c is not None],
        installed=modeswitch.installed_modes(_published(obj) for obj in slices
                                             if _is_ours(obj)),
        installed_isolation=modeswitch.installed_isolations(
            _published(obj) for obj in slices if _is_ours(obj)),
        daemonsets=[d for d in (_daemonset(obj) for obj in daemonsets) if d is not None],
        namespace=config.namespace,
    )
    if not blockers:
        return ""
    return modeswitch.refusal_message(
        blockers, wanted=f"{config.mode.value}/{config.isolation.value}"
    )


def runtime_cdi_notes(cluster: ports.Cluster) -> tuple[str, ...]:
    """Nodes whose plugins found that the container runtime ignores our CDI specs (their
    condition `ContainerRuntimeCDIDisabled`): reported, never refused (the plugins refuse the
    prepares there, and the fix is on the node, not in this install)."""
    try:
        nodes = cluster.list(kinds.NODE.kind).items
    except errors.ClusterError as exc:
        return (
            f"cannot list Nodes to report the container runtime CDI check: {exc.message}; "
            "the preflight ServiceAccount needs list on nodes",
        )
    return tuple(
        f"node {name}: prepares are refused there: {message}"
        for name, message in runtime_cdi.refusing_nodes(nodes)
    )


class _CannotList(Exception):
    """Listing one kind failed; the message says which and what to check."""


def _list(cluster: ports.Cluster, kind: kinds.ResourceKind, plural: str,
          label_selector: ports.LabelSelector | None = None) -> list[Any]:
    try:
        return list(cluster.list(kind.kind, label_selector=label_selector).items)
    except errors.ClusterError as exc:
        raise _CannotList(
            f"cannot list {plural} to check the IMEX mode change: {exc.message}; check that "
            "the API server is reachable and the preflight ServiceAccount may list "
            f"{kind.plural}.{kind.group or 'core'} in all namespaces"
        ) from exc


def _claim(obj: Mapping[str, Any]) -> models.ResourceClaim | None:
    """The claim, or None for a malformed one (unknown fields are fine; the API server
    validates the fields read here, so only a broken stand-in could send one)."""
    try:
        return decoding.resource_claim_from_k8s(obj)
    except errors.DecodeError:
        return None


def _daemonset(obj: Mapping[str, Any]) -> modeswitch.DaemonSetSeen | None:
    """Where one CD's IMEX DaemonSet runs (None without a computeDomain label value)."""
    meta = decoding.object_meta_from_k8s(obj, strict=False)
    cd_uid = meta.labels.get(names.COMPUTE_DOMAIN_LABEL, "")
    return modeswitch.DaemonSetSeen(namespace=meta.namespace, cd_uid=cd_uid) if cd_uid else None


def _is_ours(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("driver") == names.DRIVER_NAME


def _published(obj: Mapping[str, Any]) -> modeswitch.PublishedSlice:
    """The node and device types of one of our ResourceSlices (malformed parts ignored)."""
    spec = obj.get("spec") or {}
    types: set[str] = set()
    for device in spec.get("devices") or ():
        attrs = device.get("attributes") if isinstance(device, Mapping) else None
        kind = attrs.get("type") if isinstance(attrs, Mapping) else None
        if isinstance(kind, Mapping) and isinstance(kind.get("string"), str):
            types.add(kind["string"])
    return modeswitch.PublishedSlice(device_types=frozenset(types))


def _metadata_only(obj: Mapping[str, Any]) -> models.ComputeDomain:
    """A ComputeDomain carrying `obj`'s metadata and an empty spec (never read here)."""
    return models.ComputeDomain(
        meta=decoding.object_meta_from_k8s(obj, strict=False),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="")
        ),
    )


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    try:
        cluster = kube_cluster.KubeCluster.from_config(args.kubeconfig)
    except errors.DriverError as exc:
        print(f"error: cannot reach the API server: {exc.message}", file=sys.stderr)
        return 1
    refusal = check(
        cluster, mode=args.imex_mode, isolation=args.imex_isolation,
        feature_gates=args.feature_gates, namespace=args.namespace,
    )
    for note in runtime_cdi_notes(cluster):
        print(f"warning: {note}", file=sys.stderr)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    print("ok: no ComputeDomain or claim in use blocks this IMEX mode/isolation")
    return 0
