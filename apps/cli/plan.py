"""`computedomain plan`: what the controller would create for some CD manifests, offline.

Each ComputeDomain is planned the way the controller reconciles it: plan, apply the actions to
an in-memory copy (the CD's own patches, the objects created), plan again, until nothing is
left to do (under channel isolation the channel is recorded first, the template second). What
would be created goes to stdout as YAML; refusals (`Admitted=False`) and overrides (warning
events) go to stderr. Exit 0: planned; 1: a ComputeDomain would be refused; 2: bad flags or
input (missing, unreadable or malformed files, no ComputeDomain at all).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.metadata
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from apps.shell import flags, logs
from core import decoding, errors, kinds, mergepatch, models
from core.computedomain import channels, controlling, modes

# A manifest has no uid before the API server assigns one; this shows where it goes.
PLACEHOLDER_UID = "<computedomain-uid>"
# As kubectl: a manifest without a namespace lands in the default one.
DEFAULT_NAMESPACE = "default"
# More rounds than any ComputeDomain needs (finalizer, channel, children, status).
MAX_ROUNDS = 16


def chart_daemon_image() -> str:
    """The chart's default daemon image: `image.repository`:appVersion (= this release)."""
    try:
        version = importlib.metadata.version("computedomain-driver")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        version = "0.1.0"
    return f"computedomain-driver:{version}"


COMMAND = flags.command(
    "computedomain plan",
    help="Print the objects the controller would create for ComputeDomain manifests, "
    "without a cluster. Refusals and overrides go to stderr. Exit 0: planned; 1: a "
    "ComputeDomain would be refused; 2: bad flags or input.",
    params=[
        flags.argument("files", nargs=-1, required=True),
        flags.imex_mode(),
        flags.imex_isolation(),
        flags.feature_gates(),
        flags.namespace(),
        flags.option("--daemon-image", env="DAEMON_IMAGE", default=chart_daemon_image(),
                     help="driverManaged: image of the IMEX daemon pods (the chart's default)"),
        flags.imex_channels_max(),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    return flags.parse_namespace(COMMAND, argv, env)


def main(argv: Sequence[str], *, env: Mapping[str, str], verbosity: int | None = None) -> int:
    args = parse(argv, env)
    logs.configure(verbosity)
    return run(args, env=env)


class _BadInput(Exception):
    """A file that cannot be read as YAML; the message is one line naming it."""


@dataclasses.dataclass(kw_only=True)
class _Planned:
    created: list[dict[str, Any]]
    events: list[models.EmitEvent]
    refusal: controlling.Condition | None


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    try:
        resolved = modes.resolve_driver_config(
            mode=args.imex_mode, isolation=args.imex_isolation,
            feature_gates=args.feature_gates, namespace=args.namespace,
            daemon_image=args.daemon_image, max_channels=args.imex_channels_max,
        )
        found = [(path, doc) for path in args.files for doc in _compute_domains(path)]
    except errors.ConfigError as exc:
        flags.fail(exc.message)
    except _BadInput as exc:
        flags.fail(str(exc))
    if not found:
        flags.fail(f"no ComputeDomain in {', '.join(args.files)}: nothing to plan (give "
                   "manifests of kind ComputeDomain, apiVersion resource.nvidia.com/v1beta1)")
    config = resolved.config
    assigned = _channels(
        [doc for _, doc in found], max_channels=config.max_channels
    ) if config.channel_isolation else {}
    out: list[dict[str, Any]] = []
    refused = 0
    for path, doc in found:
        where = f"ComputeDomain {doc['metadata']['namespace']}/{doc['metadata'].get('name', '')}"
        try:
            planned = _plan_to_fixpoint(doc, config=config, channel=assigned.get(_key(doc)))
        except errors.DecodeError as exc:
            flags.fail(f"{path}: {where}: {exc.message}")
        for event in planned.events:
            if planned.refusal is None or event.reason != planned.refusal.reason:
                print(f"warning: {where}: {event.reason}: {event.message}", file=sys.stderr)
        if planned.refusal is not None:
            refused += 1
            print(f"refused: {where}: {planned.refusal.type}=False "
                  f"({planned.refusal.reason}): {planned.refusal.message}", file=sys.stderr)
        out.extend(planned.created)
    sys.stderr.flush()
    flags.exit_quietly_on_broken_pipe(
        lambda: yaml.safe_dump_all(out, sys.stdout, sort_keys=False) if out else None
    )
    return 1 if refused else 0


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise _BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _BadInput(f"{path}: is a directory; give the YAML files in it") from None
    except PermissionError:
        raise _BadInput(f"{path}: permission denied") from None
    except UnicodeDecodeError:
        raise _BadInput(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise _BadInput(f"{path}: cannot be read: {exc.strerror}") from None


def _compute_domains(path: str) -> Iterator[dict[str, Any]]:
    """The ComputeDomain documents of one file (also inside `kind: List`), namespaced."""
    try:
        docs = list(yaml.safe_load_all(_read(path)))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        place = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _BadInput(f"{path}: not valid YAML: {exc.problem or exc.context}{place}") from None
    except yaml.YAMLError as exc:
        raise _BadInput(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    for doc in docs:
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items or ():
            if isinstance(item, dict) and item.get("kind") == kinds.COMPUTE_DOMAIN.kind:
                yield _with_defaults(item)


def _with_defaults(doc: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(doc.get("metadata") or {})
    meta.setdefault("uid", PLACEHOLDER_UID)
    if not meta.get("namespace"):
        meta["namespace"] = DEFAULT_NAMESPACE
    return {**copy.deepcopy(dict(doc)), "metadata": meta}


def _key(doc: Mapping[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{meta['namespace']}/{meta.get('name', '')}"


def _channels(docs: Sequence[Mapping[str, Any]], *, max_channels: int) -> dict[str, int | None]:
    """Channel isolation: the channel of each CD, as the controller hands them out (the
    channel its status names, else the lowest free one, in input order)."""
    recorded = [channels.domain_channel_from_k8s({**doc, "metadata": {
        **doc["metadata"], "uid": _key(doc)}}) for doc in docs]
    table = channels.build_table(domains=recorded, claims=(), max_channels=max_channels)
    out: dict[str, int | None] = {}
    for doc in docs:
        key = _key(doc)
        channel = table.channel_of(key) or table.lowest_free()
        if channel is not None:
            table = channels.with_assignment(table, domain_uid=key, channel_id=channel)
        out[key] = channel
    return out


def _plan_to_fixpoint(
    doc: Mapping[str, Any], *, config: models.DriverConfig, channel: int | None
) -> _Planned:
    """Plan, apply to an in-memory copy, plan again, until the controller has nothing left."""
    cd_doc: dict[str, Any] = copy.deepcopy(dict(doc))
    store: dict[str, list[dict[str, Any]]] = {}
    created: list[dict[str, Any]] = []
    events: list[models.EmitEvent] = []
    for _ in range(MAX_ROUNDS):
        cd = decoding.compute_domain_from_k8s(cd_doc)
        observed = controlling.observe(
            cd, objects=store, config=config,
            conditions=controlling.conditions_from_k8s(cd_doc),
        )
        if config.channel_isolation:
            why = "" if channel is not None else channels.exhausted_message(
                namespace=cd.meta.namespace, name=cd.meta.name,
                table=channels.table_from_taken(range(1, config.max_channels),
                                                max_channels=config.max_channels))
            observed = dataclasses.replace(observed, channel_id=channel, channel_refusal=why)
        actions = controlling.plan_compute_domain(cd, observed=observed, config=config)
        if not actions:
            break
        for action in actions:
            cd_doc = _apply(action, cd_doc=cd_doc, store=store, created=created, events=events)
    else:  # NB: a planner that never settles is a bug; say so rather than loop
        raise RuntimeError(f"the plan did not settle in {MAX_ROUNDS} rounds")
    conditions = controlling.conditions_from_k8s(cd_doc)
    refusal = next((c for c in conditions if c.status == "False" and c.type in (
        controlling.ADMITTED_CONDITION, controlling.CHANNEL_ASSIGNED_CONDITION)), None)
    return _Planned(created=created, events=events, refusal=refusal)


def _apply(
    action: models.ClusterAction,
    *,
    cd_doc: dict[str, Any],
    store: dict[str, list[dict[str, Any]]],
    created: list[dict[str, Any]],
    events: list[models.EmitEvent],
) -> dict[str, Any]:
    """Apply one action to the in-memory copy; returns the (patched) ComputeDomain."""
    if isinstance(action, models.CreateObject):
        obj = copy.deepcopy(dict(action.obj))
        store.setdefault(action.kind, []).append(obj)
        created.append(copy.deepcopy(obj))
    elif isinstance(action, models.PatchObject):
        if action.kind == kinds.COMPUTE_DOMAIN.kind:
            return dict(mergepatch.merge_patch(cd_doc, action.patch))
        for i, obj in enumerate(store.get(action.kind, [])):
            meta = obj.get("metadata", {})
            if (meta.get("namespace", ""), meta.get("name")) == (action.namespace, action.name):
                store[action.kind][i] = dict(mergepatch.merge_patch(obj, action.patch))
    elif isinstance(action, models.DeleteObject):
        store[action.kind] = [
            o for o in store.get(action.kind, [])
            if (o["metadata"].get("namespace", ""), o["metadata"].get("name"))
            != (action.namespace, action.name)
        ]
    elif action not in events:
        events.append(action)
    return cd_doc
