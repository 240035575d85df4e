"""The JSON edge: Kubernetes objects and opaque configs in, frozen `core.models` values out.

Everything that reads JSON from the API server, a claim's opaque parameters or a
checkpointed copy goes through here, so planners never see a dict. Every decoder
guarantees one thing above all: whatever JSON it is given, the only exception it raises is
`errors.DecodeError`, whose message names the offending field path (`spec.channel...`)
and what would be accepted there, because that text ends up in a pod event.

NB: the readers are hand-written rather than a mapping library's (dataclasses-json's
`from_dict`): that neither rejects unknown fields nor wrong JSON types with one typed error
naming the path, and both are exactly what this edge must guarantee. (The checkpoint's typed
records are hand-coded too: `from_dict` measured 300-700 us per record against 6 us, which
at 10,000 claims would add seconds to a plugin's start; the dependency was dropped.)
Decoding is deterministic: list-type-map lists (status nodes, clique daemons) come out
sorted by their key, label maps by key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn, TypeVar

from core import errors, models, names

_E = TypeVar("_E", models.AllocationMode, models.DomainStatus, models.ConfigSource)

CHANNEL_CONFIG_FIELDS: Final = ("apiVersion", "kind", "domainID", "allocationMode", "channelID")
DAEMON_CONFIG_FIELDS: Final = ("apiVersion", "kind", "domainID")
_OPAQUE_KINDS: Final = (names.KIND_CHANNEL_CONFIG, names.KIND_DAEMON_CONFIG)
_MAX_SHOWN: Final = 64


# ---------------------------------------------------------------- opaque configs


def decode_opaque_config(parameters: Mapping[str, Any], *, strict: bool) -> models.OpaqueConfig:
    """Decode the `parameters` of an opaque device config of this driver.

    strict=True (configs read from claims): an unknown field is an error naming it.
    strict=False (copies read back from the checkpoint): unknown fields are ignored, so a
    newer writer's additions do not break an older reader. In both modes apiVersion and
    kind must be ours and domainID a non-empty string; `allocationMode` is kept raw (its
    validity depends on the IMEX mode, decided by the prepare planner).
    Raises only DecodeError, for any JSON value whatsoever.
    """
    if not isinstance(parameters, Mapping):
        fail(
            "parameters",
            f"opaque config parameters must be a JSON object, got {json_type_name(parameters)}",
        )
    obj: Mapping[Any, Any] = parameters

    api_version = obj.get("apiVersion")
    if not (isinstance(api_version, str) and api_version == names.GROUP_VERSION):
        fail(
            "apiVersion",
            f"opaque config apiVersion {show_value(api_version)} is not supported: "
            f"use {names.GROUP_VERSION}",
        )
    kind = obj.get("kind")
    if not (isinstance(kind, str) and kind in _OPAQUE_KINDS):
        fail(
            "kind",
            f"opaque config kind {show_value(kind)} is not supported: "
            f"use {' or '.join(_OPAQUE_KINDS)}",
        )
    channel = kind == names.KIND_CHANNEL_CONFIG
    accepted = CHANNEL_CONFIG_FIELDS if channel else DAEMON_CONFIG_FIELDS

    if strict:
        unknown = sorted(str(key) for key in obj if not (isinstance(key, str) and key in accepted))
        if unknown:
            fail(unknown[0], unknown_fields_message(unknown, where=kind, accepted=accepted))

    domain_id = obj.get("domainID")
    if not isinstance(domain_id, str) or not domain_id:
        fail(
            "domainID",
            f"{kind}.domainID must be a non-empty string, got {show_value(domain_id)}: "
            "set it to the UID of the ComputeDomain",
        )
    if not channel:
        return models.DaemonConfig(domain_id=domain_id)

    allocation_mode = obj.get("allocationMode")
    if allocation_mode is None:
        allocation_mode = ""
    if not isinstance(allocation_mode, str):
        fail(
            "allocationMode",
            f"{kind}.allocationMode must be a string, got {show_value(allocation_mode)}: "
            f"use {models.AllocationMode.SINGLE.value} or {models.AllocationMode.ALL.value}",
        )
    return models.ChannelConfig(
        domain_id=domain_id,
        allocation_mode=allocation_mode,
        channel_id=_channel_id(obj, "channelID", kind),
    )


def opaque_config_to_k8s(cfg: models.OpaqueConfig) -> dict[str, Any]:
    """The `parameters` JSON of an opaque config (allocationMode omitted when empty)."""
    if isinstance(cfg, models.DaemonConfig):
        return {
            "apiVersion": names.GROUP_VERSION,
            "kind": names.KIND_DAEMON_CONFIG,
            "domainID": cfg.domain_id,
        }
    out: dict[str, Any] = {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": cfg.domain_id,
    }
    if cfg.allocation_mode:
        out["allocationMode"] = cfg.allocation_mode
    if cfg.channel_id is not None:
        out["channelID"] = cfg.channel_id
    return out


def _channel_id(obj: Mapping[Any, Any], key: str, path: str) -> int | None:
    """An optional IMEX channel ID (0..2047); None when absent."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (
        0 <= value <= names.MAX_CHANNEL_ID
    ):
        fail(
            _join(path, key),
            f"{_join(path, key)} must be an integer 0..{names.MAX_CHANNEL_ID}, got "
            f"{show_value(value)}: the controller sets it; recreate the object it came from",
        )
    return int(value)


def config_for_request(
    claim: models.ResourceClaim, *, request: str, driver: str = names.DRIVER_NAME
) -> models.OpaqueConfig | None:
    """The opaque config that applies to `request` of `claim`, or None when there is none.

    Precedence as DRA defines it: only entries for `driver` whose `requests` is empty or
    names `request` count; class configs apply before claim configs; within a source the
    later entry wins. Every applicable entry is decoded strictly, so an invalid one is
    reported even when a later one overrides it (DecodeError propagates).
    """
    applicable = [
        cfg
        for cfg in claim.configs
        if cfg.driver == driver and (not cfg.requests or request in cfg.requests)
    ]
    # NB: sorted() is stable, so entries keep their order within each source.
    applicable.sort(key=lambda cfg: 0 if cfg.source is models.ConfigSource.CLASS else 1)
    chosen: models.OpaqueConfig | None = None
    for cfg in applicable:
        chosen = decode_opaque_config(cfg.parameters, strict=True)
    return chosen


# ---------------------------------------------------------------- object metadata


def object_meta_from_k8s(obj: Mapping[str, Any], *, strict: bool = True) -> models.ObjectMeta:
    """`metadata` of any Kubernetes object.

    strict=True (objects the driver acts on: ComputeDomains, cliques, claims): name is
    required and a mistyped field is a DecodeError naming it, like every decoder here.
    strict=False (objects the controller only observes, such as the RCTs, DaemonSets and
    Nodes it lists, and `preflight`'s look at existing ComputeDomains): never raises; a
    missing or mistyped field reads as empty (a mistyped list or map keeps only its string
    entries), so one malformed object someone else wrote cannot stop a reconcile or a check.
    """
    if not strict:
        return _tolerant_object_meta(obj)
    root = _root(obj)
    meta = _required_mapping(root, "metadata", "")
    deletion = meta.get("deletionTimestamp")
    if deletion is not None and not isinstance(deletion, str):
        fail(
            "metadata.deletionTimestamp",
            "metadata.deletionTimestamp must be a string (RFC 3339 time) or null, "
            f"got {json_type_name(deletion)}",
        )
    return models.ObjectMeta(
        name=_required_str(meta, "name", "metadata"),
        namespace=_optional_str(meta, "namespace", "metadata"),
        uid=_optional_str(meta, "uid", "metadata"),
        resource_version=_optional_str(meta, "resourceVersion", "metadata"),
        deletion_timestamp=deletion,
        finalizers=tuple(_str_list(meta, "finalizers", "metadata")),
        labels=_str_map(meta, "labels", "metadata"),
        annotations=_str_map(meta, "annotations", "metadata"),
    )


def _tolerant_object_meta(obj: object) -> models.ObjectMeta:
    raw = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta: Mapping[Any, Any] = raw if isinstance(raw, Mapping) else {}
    finalizers = meta.get("finalizers")
    deletion = meta.get("deletionTimestamp")
    return models.ObjectMeta(
        name=_str_or_empty(meta.get("name")),
        namespace=_str_or_empty(meta.get("namespace")),
        uid=_str_or_empty(meta.get("uid")),
        resource_version=_str_or_empty(meta.get("resourceVersion")),
        # NB: an empty timestamp counts as absent here, where strict mode keeps it.
        deletion_timestamp=str(deletion) if deletion else None,
        finalizers=tuple(f for f in finalizers if isinstance(f, str))
        if isinstance(finalizers, list)
        else (),
        labels=_str_entries(meta.get("labels")),
        annotations=_str_entries(meta.get("annotations")),
    )


def _str_or_empty(value: object) -> str:
    return value if isinstance(value, str) else ""


def _str_entries(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


# ---------------------------------------------------------------- ComputeDomain


def compute_domain_from_k8s(obj: Mapping[str, Any]) -> models.ComputeDomain:
    """A `resource.nvidia.com/v1beta1` ComputeDomain, with the CRD's defaults applied."""
    root = _root(obj)
    _check_kind(root, names.KIND_COMPUTE_DOMAIN)
    meta = object_meta_from_k8s(root)
    spec = _required_mapping(root, "spec", "")
    channel = _required_mapping(spec, "channel", "spec")
    template = _required_mapping(channel, "resourceClaimTemplate", "spec.channel")
    channel_spec = models.ChannelSpec(
        resource_claim_template_name=_required_str(
            template, "name", "spec.channel.resourceClaimTemplate"
        ),
        allocation_mode=_enum(
            channel, "allocationMode", "spec.channel", models.AllocationMode,
            default=models.AllocationMode.SINGLE,
        ),
    )
    num_nodes = _int(spec, "numNodes", "spec", default=0, minimum=0)

    status: models.ComputeDomainStatus | None = None
    raw_status = root.get("status")
    if raw_status is not None:
        status_obj = _mapping(raw_status, "status")
        nodes = [
            _compute_domain_node(_mapping(item, path), path)
            for path, item in _indexed(status_obj, "nodes", "status")
        ]
        status = models.ComputeDomainStatus(
            status=_enum(
                status_obj, "status", "status", models.DomainStatus,
                default=models.DomainStatus.NOT_READY,
            ),
            nodes=tuple(sorted(nodes, key=lambda n: n.name)),
            channel_id=_channel_id(status_obj, "channelID", "status"),
            channel_conflict=_channel_conflict(status_obj),
        )
    return models.ComputeDomain(
        meta=meta,
        spec=models.ComputeDomainSpec(channel=channel_spec, num_nodes=num_nodes),
        status=status,
    )


def _channel_conflict(status: Mapping[str, Any]) -> str:
    """The message of a `ChannelUnique=False` condition ("" if none), read tolerantly: the
    conditions are the controller's report, not input to validate."""
    conditions = status.get("conditions")
    for item in conditions if isinstance(conditions, list) else ():
        if (isinstance(item, Mapping) and item.get("type") == "ChannelUnique"
                and item.get("status") == "False"):
            return str(item.get("message") or "its IMEX channel is held by another "
                       "ComputeDomain")
    return ""


# The fields of the ComputeDomain CRD (ours and upstream's) at each level we read.
_CD_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
    "spec": frozenset({"numNodes", "channel"}),
    "spec.channel": frozenset({"resourceClaimTemplate", "allocationMode"}),
    "spec.channel.resourceClaimTemplate": frozenset({"name"}),
    "status": frozenset({"status", "nodes", "channelID", "conditions"}),
}


def compute_domain_tolerantly(
    obj: Mapping[str, Any],
) -> tuple[models.ComputeDomain, tuple[str, ...]]:
    """Decode a ComputeDomain as the controller serves it, with what it ignores in it.

    Unknown fields are ignored (the API server prunes them from a structural CRD) and a
    `status` that cannot be read is ignored (the controller owns it and writes it anew); each
    is named in the returned problems (in a fixed order), so that it can be reported.
    Anything wrong in `metadata` or `spec` still raises DecodeError. Pure and deterministic.
    """
    problems: list[str] = []
    root = _root(obj)
    for path, allowed in _CD_FIELDS.items():
        node: object = root
        for part in path.split(".") if path else ():
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        for key in sorted(str(k) for k in node if k not in allowed):
            field = f"{path}.{key}" if path else key
            problems.append(f"unknown field {field[:100]!r} is ignored")
    try:
        cd = compute_domain_from_k8s(root)
    except errors.DecodeError as exc:
        if not exc.field.startswith("status"):
            raise
        without_status = {k: v for k, v in root.items() if k != "status"}
        cd = compute_domain_from_k8s(without_status)
        problems.append(f"status cannot be read ({exc.message[:200]}); it is ignored and "
                        "written anew")
    return cd, tuple(problems)


def compute_domain_status_to_k8s(status: models.ComputeDomainStatus) -> dict[str, Any]:
    """The `status` JSON of a ComputeDomain, nodes sorted by name.

    `nodes` is always present (possibly empty) so that a merge patch of this value
    replaces the node list rather than leaving a stale one in place.
    """
    return {
        "status": status.status.value,
        "nodes": [
            {
                "name": node.name,
                "ipAddress": node.ip_address,
                "cliqueID": node.clique_id,
                "index": node.index,
                "status": node.status.value,
            }
            for node in sorted(status.nodes, key=lambda n: n.name)
        ],
        # Additive: absent (not null) when unassigned, so other modes' patches stay as before.
        **({"channelID": status.channel_id} if status.channel_id is not None else {}),
    }


def compute_domain_clique_from_k8s(obj: Mapping[str, Any]) -> models.ComputeDomainClique:
    """A ComputeDomainClique; `daemons` is top-level in this kind (not under status)."""
    root = _root(obj)
    _check_kind(root, names.KIND_COMPUTE_DOMAIN_CLIQUE)
    daemons = [
        _clique_daemon(_mapping(item, path), path) for path, item in _indexed(root, "daemons", "")
    ]
    return models.ComputeDomainClique(
        meta=object_meta_from_k8s(root),
        daemons=tuple(sorted(daemons, key=lambda d: d.node_name)),
    )


def clique_daemon_to_k8s(daemon: models.CliqueDaemon) -> dict[str, Any]:
    """One `daemons[]` entry of a ComputeDomainClique, as the daemons write it."""
    return {
        "nodeName": daemon.node_name,
        "ipAddress": daemon.ip_address,
        "cliqueID": daemon.clique_id,
        "index": daemon.index,
        "status": daemon.status.value,
    }


def _compute_domain_node(item: Mapping[Any, Any], path: str) -> models.ComputeDomainNode:
    return models.ComputeDomainNode(
        name=_required_str(item, "name", path),
        ip_address=_required_str(item, "ipAddress", path, allow_empty=True),
        clique_id=_required_str(item, "cliqueID", path, allow_empty=True),
        index=_int(item, "index", path, default=0),
        status=_enum(item, "status", path, models.DomainStatus,
                     default=models.DomainStatus.NOT_READY),
    )


def _clique_daemon(item: Mapping[Any, Any], path: str) -> models.CliqueDaemon:
    return models.CliqueDaemon(
        node_name=_required_str(item, "nodeName", path),
        ip_address=_required_str(item, "ipAddress", path, allow_empty=True),
        clique_id=_required_str(item, "cliqueID", path, allow_empty=True),
        index=_int(item, "index", path, default=0),
        status=_enum(item, "status", path, models.DomainStatus,
                     default=models.DomainStatus.NOT_READY),
    )


# ---------------------------------------------------------------- ResourceClaim


# Set by the resource claim controller on claims it makes from a ResourceClaimTemplate.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def resource_claim_from_k8s(obj: Mapping[str, Any]) -> models.ResourceClaim:
    """The plugin's view of a `resource.k8s.io/v1` ResourceClaim.

    `allocated` is whether `status.allocation` is present. Results and configs keep their
    order (config order decides precedence). Config entries without `opaque` (kinds this
    driver does not know) are skipped; opaque `parameters` stay raw JSON objects, decoded
    later by `config_for_request`. Unknown fields are ignored, as for any API object.
    """
    root = _root(obj)
    _check_kind(root, "ResourceClaim")
    meta = object_meta_from_k8s(root)
    if not meta.uid:
        fail("metadata.uid", "metadata.uid is required")

    results: list[models.DeviceResult] = []
    configs: list[models.RawOpaqueConfig] = []
    consumers: list[models.ClaimConsumer] = []
    allocated = False
    raw_status = root.get("status")
    if raw_status is not None:
        status = _mapping(raw_status, "status")
        for path, item in _indexed(status, "reservedFor", "status"):
            consumers.append(_claim_consumer(_mapping(item, path), path))
        raw_allocation = status.get("allocation")
        if raw_allocation is not None:
            allocated = True
            allocation = _mapping(raw_allocation, "status.allocation")
            devices_path = "status.allocation.devices"
            raw_devices = allocation.get("devices")
            devices = {} if raw_devices is None else _mapping(raw_devices, devices_path)
            for path, item in _indexed(devices, "results", devices_path):
                results.append(_device_result(_mapping(item, path), path))
            for path, item in _indexed(devices, "config", devices_path):
                raw = _raw_opaque_config(_mapping(item, path), path)
                if raw is not None:
                    configs.append(raw)
    return models.ResourceClaim(
        uid=names.ClaimUID(meta.uid),
        namespace=meta.namespace,
        name=meta.name,
        allocated=allocated,
        results=tuple(results),
        configs=tuple(configs),
        reserved_for=tuple(consumers),
        pod_claim_name=meta.annotations.get(POD_CLAIM_NAME_ANNOTATION, ""),
    )


def _claim_consumer(item: Mapping[Any, Any], path: str) -> models.ClaimConsumer:
    return models.ClaimConsumer(
        resource=_required_str(item, "resource", path),
        name=_required_str(item, "name", path),
        uid=_required_str(item, "uid", path),
        api_group=_optional_str(item, "apiGroup", path),
    )


def _device_result(item: Mapping[Any, Any], path: str) -> models.DeviceResult:
    return models.DeviceResult(
        request=_required_str(item, "request", path),
        driver=_required_str(item, "driver", path),
        pool=_required_str(item, "pool", path),
        device=_required_str(item, "device", path),
        admin_access=_optional_bool(item, "adminAccess", path),
        share_id=_optional_str(item, "shareID", path),
    )


def _raw_opaque_config(item: Mapping[Any, Any], path: str) -> models.RawOpaqueConfig | None:
    source = _enum(item, "source", path, models.ConfigSource, default=None)
    requests = tuple(_str_list(item, "requests", path))
    raw_opaque = item.get("opaque")
    if raw_opaque is None:
        return None
    opaque_path = f"{path}.opaque"
    opaque = _mapping(raw_opaque, opaque_path)
    return models.RawOpaqueConfig(
        source=source,
        requests=requests,
        driver=_required_str(opaque, "driver", opaque_path),
        parameters=_required_mapping(opaque, "parameters", opaque_path),
    )


# ---------------------------------------------------------------- field readers


def fail(path: str, message: str) -> NoReturn:
    """Refuse the input: a DecodeError naming the field at `path`."""
    raise errors.DecodeError(message, field=path)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def json_type_name(value: object) -> str:
    """The JSON name of a value's type, for error messages ("object", "array", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def unknown_fields_message(
    paths: Sequence[str], *, where: str, accepted: Sequence[str]
) -> str:
    """The error of a strict decode that met unknown fields (by path, in order).

    It starts with the phrase of Kubernetes' strict decoding that upstream's driver logs and
    its tests look for (`strict decoding error: unknown field "x"`, one per field), then says
    where and which fields are accepted.
    """
    shown = ", ".join(f"unknown field {_go_quoted(path)}" for path in paths)
    return f"strict decoding error: {shown} in {where}: accepted fields are {', '.join(accepted)}"


def _go_quoted(text: str) -> str:
    """A double-quoted, escaped string (as Go's %q writes field names), truncated."""
    shown = text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
    return json.dumps(shown, ensure_ascii=False)


def show_value(value: object) -> str:
    """A value for a message: quoted and truncated strings, the JSON type otherwise."""
    if value is None:
        return "(missing)"
    if isinstance(value, str):
        text = value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "..."
        return f"'{text}'"
    return f"(a {json_type_name(value)})"


def _root(obj: object) -> Mapping[Any, Any]:
    if not isinstance(obj, Mapping):
        fail("", f"a Kubernetes object must be a JSON object, got {json_type_name(obj)}")
    return obj


def _check_kind(root: Mapping[Any, Any], expected: str) -> None:
    kind = root.get("kind")
    if kind is not None and kind != expected:
        fail("kind", f"expected an object of kind {expected}, got kind {show_value(kind)}")


def _mapping(value: object, path: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        fail(path, f"{path} must be an object, got {json_type_name(value)}")
    return value


def _required_mapping(obj: Mapping[Any, Any], key: str, path: str) -> Mapping[Any, Any]:
    field = _join(path, key)
    value = obj.get(key)
    if value is None:
        fail(field, f"{field} is required")
    return _mapping(value, field)


def _required_str(
    obj: Mapping[Any, Any], key: str, path: str, *, allow_empty: bool = False
) -> str:
    field = _join(path, key)
    value = obj.get(key)
    if value is None or (value == "" and not allow_empty):
        fail(field, f"{field} is required")
    if not isinstance(value, str):
        fail(field, f"{field} must be a string, got {json_type_name(value)}")
    return value


def _optional_str(obj: Mapping[Any, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        field = _join(path, key)
        fail(field, f"{field} must be a string, got {json_type_name(value)}")
    return value


def _optional_bool(obj: Mapping[Any, Any], key: str, path: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        field = _join(path, key)
        fail(field, f"{field} must be true or false, got {json_type_name(value)}")
    return value


def _int(
    obj: Mapping[Any, Any], key: str, path: str, *, default: int, minimum: int | None = None
) -> int:
    field = _join(path, key)
    value = obj.get(key)
    if value is None:
        return default
    # NB: bool is an int subclass in Python, but not a JSON integer.
    if isinstance(value, bool) or not isinstance(value, int):
        fail(field, f"{field} must be an integer, got {json_type_name(value)}")
    if minimum is not None and value < minimum:
        fail(field, f"{field} must be {minimum} or greater, got {value}")
    return value


def _enum(
    obj: Mapping[Any, Any], key: str, path: str, enum_type: type[_E], *, default: _E | None
) -> _E:
    field = _join(path, key)
    value = obj.get(key)
    accepted = " or ".join(member.value for member in enum_type)
    if value is None:
        if default is None:
            fail(field, f"{field} is required: use {accepted}")
        return default
    if isinstance(value, str):
        for member in enum_type:
            if member.value == value:
                return member
    fail(field, f"{field} {show_value(value)} is not valid: use {accepted}")


def _indexed(obj: Mapping[Any, Any], key: str, path: str) -> list[tuple[str, Any]]:
    """Items of an optional JSON array, each with its field path (`a.b[3]`)."""
    field = _join(path, key)
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        fail(field, f"{field} must be an array, got {json_type_name(value)}")
    return [(f"{field}[{i}]", item) for i, item in enumerate(value)]


def _str_list(obj: Mapping[Any, Any], key: str, path: str) -> list[str]:
    out: list[str] = []
    for item_path, item in _indexed(obj, key, path):
        if not isinstance(item, str):
            fail(item_path, f"{item_path} must be a string, got {json_type_name(item)}")
        out.append(item)
    return out


def _str_map(obj: Mapping[Any, Any], key: str, path: str) -> dict[str, str]:
    field = _join(path, key)
    value = obj.get(key)
    if value is None:
        return {}
    mapping = _mapping(value, field)
    out: dict[str, str] = {}
    for k, v in mapping.items():
        if not isinstance(k, str):
            fail(field, f"{field} keys must be strings, got {json_type_name(k)}")
        if not isinstance(v, str):
            fail(_join(field, k), f"{_join(field, k)} must be a string, got {json_type_name(v)}")
        out[k] = v
    return dict(sorted(out.items()))
