"""Admission review of ResourceClaims and ResourceClaimTemplates: reject bad configs at apply time.

Without this, an opaque ComputeDomain config with a typo, a wrong kind or an allocation mode
the installed IMEX mode cannot serve is only noticed when the kubelet prepares the claim, as
a pod event on a pod that is already scheduled. The optional webhook (Helm `webhook.*`) runs
the same strict decoding and the same mode rules at `kubectl apply`, so the person applying
the manifest reads the error at once. The same holds for the GPU half's configs (driver
`gpu.nvidia.com`: GpuConfig, MigDeviceConfig, VfioDeviceConfig), decoded by the decoder
prepare uses, under the feature gates the webhook runs with.

Pure: an `admission.k8s.io/v1` AdmissionReview (already parsed JSON) and the driver config in,
the `response` object out. Whatever JSON it is given, it never raises: a malformed review is
a denial whose message says what is malformed.

The mutating endpoint (`mutate`) judges nothing: it writes into a claim the constraints its
GpuConfigs' `fabricTopologyConfig` imply (`core.gpu.fabric_constraints`), since the scheduler
reads constraints and selectors, never opaque configs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from core import decoding, errors, models, names
from core.computedomain import allocation_mode
from core.gpu import configs as gpu_configs
from core.gpu import fabric_constraints

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
ADMISSION_REVIEW_KIND: Final = "AdmissionReview"
# The path of the ValidatingWebhookConfiguration in the Helm chart (templates/webhook.yaml).
VALIDATE_PATH: Final = "/validate-resource-claim-parameters"
# The path of the MutatingWebhookConfiguration (templates/webhook.yaml).
MUTATE_PATH: Final = "/mutate-resource-claim-parameters"
PATCH_TYPE: Final = "JSONPatch"

CODE_BAD_REQUEST: Final = 400
CODE_INVALID: Final = 422
REASON_BAD_REQUEST: Final = "BadRequest"
REASON_INVALID: Final = "Invalid"

_VALIDATED_OPERATIONS: Final = ("CREATE", "UPDATE")
# NB: a claim's and a template's spec are immutable: only a new object can be given constraints.
_MUTATED_OPERATIONS: Final = ("CREATE",)
# Where each kind keeps its device configs (`spec.devices.config[]` of a claim spec).
_CONFIG_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "ResourceClaim": ("spec", "devices", "config"),
    "ResourceClaimTemplate": ("spec", "spec", "devices", "config"),
}


def review(request: Mapping[str, Any], *, config: models.DriverConfig) -> dict[str, Any]:
    """The AdmissionReview `response` for one `request`: {uid, allowed, status?}.

    Denies (HTTP-style code 422, reason Invalid) a ResourceClaim or ResourceClaimTemplate
    being created or updated when any opaque config of this driver fails strict decoding or
    cannot be served in the installed IMEX mode, or any opaque config of the GPU half
    (gpu.nvidia.com) fails its strict decoding under the installed feature gates; one
    message lists every bad config by its field path. An UPDATE that leaves the configs as
    they were is allowed, so an object admitted before the webhook existed can still get its
    finalizers removed. Other kinds, other operations and other drivers' configs are
    allowed. A malformed request is denied with code 400. Deterministic; never raises.
    """
    header = _header(request)
    if isinstance(header, dict):
        return header
    uid, group, kind_name, operation = header

    config_path = _CONFIG_PATHS.get(kind_name)
    if group != names.DRA_GROUP or config_path is None or operation not in _VALIDATED_OPERATIONS:
        return _allowed(uid)

    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return _bad_request(
            uid, f"AdmissionReview.request.object must be the {kind_name} to admit, "
            f"got {decoding.json_type_name(obj)}"
        )
    entries = _config_entries(obj, config_path)
    if isinstance(entries, str):
        return _invalid(
            uid, _describe(request, obj, kind_name), [entries], drivers={names.DRIVER_NAME}
        )

    if operation == "UPDATE":
        old = request.get("oldObject")
        if isinstance(old, Mapping) and _config_entries(old, config_path) == entries:
            return _allowed(uid)

    field_path = ".".join(config_path)
    problems: list[str] = []
    drivers: set[str] = set()
    for index, entry in enumerate(entries):
        problem = check_config_entry(entry, path=f"{field_path}[{index}]", config=config)
        if problem:
            problems.append(problem)
            drivers.add(_driver_of(entry))
    if problems:
        return _invalid(uid, _describe(request, obj, kind_name), problems, drivers=drivers)
    return _allowed(uid)


def mutate(request: Mapping[str, Any], *, config: models.DriverConfig) -> dict[str, Any]:
    """The AdmissionReview `response` of the mutating endpoint for one `request`.

    A ResourceClaim or ResourceClaimTemplate being created whose gpu.nvidia.com GpuConfigs
    carry a fabricTopologyConfig gets, as a base64 JSON Patch (patchType JSONPatch), the
    constraints and selectors `core.gpu.fabric_constraints.plan_patch` derives; anything
    else is allowed unchanged (no patch). It never denies a well-formed request: judging
    configs is `review`'s. A malformed request is denied with code 400, as there.
    Deterministic; never raises.
    """
    header = _header(request)
    if isinstance(header, dict):
        return header
    uid, group, kind_name, operation = header
    config_path = _CONFIG_PATHS.get(kind_name)
    if group != names.DRA_GROUP or config_path is None or operation not in _MUTATED_OPERATIONS:
        return _allowed(uid)
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return _bad_request(
            uid, f"AdmissionReview.request.object must be the {kind_name} to admit, "
            f"got {decoding.json_type_name(obj)}"
        )
    devices_path = config_path[:-1]
    devices: Any = obj
    for key in devices_path:
        devices = devices.get(key) if isinstance(devices, Mapping) else None
    kind = request.get("kind")
    version = kind.get("version") if isinstance(kind, Mapping) else None
    ops = fabric_constraints.plan_patch(
        devices,
        pointer="/" + "/".join(devices_path),
        api_version=version if isinstance(version, str) else "",
        gates=config.gates,
    )
    if not ops:
        return _allowed(uid)
    patch = json.dumps([op.to_json() for op in ops], separators=(",", ":")).encode()
    return {
        "uid": uid,
        "allowed": True,
        "patchType": PATCH_TYPE,
        "patch": base64.b64encode(patch).decode(),
    }


def review_document(document: object, *, config: models.DriverConfig) -> dict[str, Any]:
    """The full AdmissionReview to send back for a received AdmissionReview document.

    The reply always has apiVersion admission.k8s.io/v1, kind AdmissionReview and a
    `response`; a document that is not an AdmissionReview gets a denial saying so.
    Never raises.
    """
    return _answer(document, review, config=config)


def mutate_document(document: object, *, config: models.DriverConfig) -> dict[str, Any]:
    """`review_document` for the mutating endpoint: the AdmissionReview `mutate` answers."""
    return _answer(document, mutate, config=config)


def _answer(
    document: object,
    judge: Callable[..., dict[str, Any]],
    *,
    config: models.DriverConfig,
) -> dict[str, Any]:
    response: dict[str, Any]
    if not isinstance(document, Mapping):
        response = _bad_request("", "the request body must be an AdmissionReview JSON object")
    elif (
        document.get("apiVersion") != ADMISSION_API_VERSION
        or document.get("kind") != ADMISSION_REVIEW_KIND
    ):
        response = _bad_request(
            _uid_of(document.get("request")),
            f"expected apiVersion {ADMISSION_API_VERSION} kind {ADMISSION_REVIEW_KIND}: "
            "set admissionReviewVersions: [\"v1\"] in the webhook configuration",
        )
    elif not isinstance(document.get("request"), Mapping):
        response = _bad_request("", "AdmissionReview.request is missing")
    else:
        response = judge(document["request"], config=config)
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_REVIEW_KIND,
        "response": response,
    }


def _header(request: object) -> tuple[str, str, str, str] | dict[str, Any]:
    """(uid, kind group, kind name, operation) of a request, or the 400 response saying
    which of them is malformed."""
    if not isinstance(request, Mapping):
        return _bad_request("", "AdmissionReview.request must be a JSON object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return _bad_request("", "AdmissionReview.request.uid must be a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        return _bad_request(uid, "AdmissionReview.request.kind must be an object")
    group, kind_name = kind.get("group"), kind.get("kind")
    if not isinstance(group, str) or not isinstance(kind_name, str):
        return _bad_request(
            uid, "AdmissionReview.request.kind.group and .kind must be strings"
        )
    operation = request.get("operation")
    if not isinstance(operation, str):
        return _bad_request(uid, "AdmissionReview.request.operation must be a string")
    return uid, group, kind_name, operation


def check_config_entry(entry: object, *, path: str, config: models.DriverConfig) -> str:
    """"" when a `devices.config[]` entry is acceptable, else one message naming `path`.

    Opaque configs whose driver is compute-domain.nvidia.com are decoded strictly (the same
    decoder prepare uses) and then held to the IMEX mode; those whose driver is
    gpu.nvidia.com are decoded strictly by the GPU half's decoder with `config.gates`.
    Other drivers' configs are not ours to judge.
    """
    if not isinstance(entry, Mapping):
        return f"{path}: must be an object, got {decoding.json_type_name(entry)}"
    opaque = entry.get("opaque")
    if opaque is None:
        return ""
    if not isinstance(opaque, Mapping):
        return f"{path}.opaque: must be an object, got {decoding.json_type_name(opaque)}"
    driver = opaque.get("driver")
    if driver != names.DRIVER_NAME and driver != gpu_configs.DRIVER_NAME:
        return ""
    params_path = f"{path}.opaque.parameters"
    # NB: a missing `parameters` reaches the decoder as None, which it reports by name.
    parameters: Any = opaque.get("parameters")
    try:
        if driver == gpu_configs.DRIVER_NAME:
            gpu_configs.decode_device_config(parameters, gates=config.gates)
            return ""
        decoded = decoding.decode_opaque_config(parameters, strict=True)
    except errors.DecodeError as exc:
        field = params_path if exc.field in ("", "parameters") else f"{params_path}.{exc.field}"
        return f"{field}: {exc.message}"

    if isinstance(decoded, models.DaemonConfig):
        if config.host_managed:
            return (
                f"{params_path}: {names.KIND_DAEMON_CONFIG} requests an IMEX daemon, but the "
                "driver runs in host-managed IMEX mode (the host runs nvidia-imex and the driver "
                f"runs no daemons); remove this config and its {names.DAEMON_REQUEST_NAME} request"
            )
        return ""
    refusal = allocation_mode.refusal(decoded.allocation_mode, config=config)
    return f"{params_path}.allocationMode: {refusal}" if refusal else ""


def _config_entries(obj: Mapping[Any, Any], path: Sequence[str]) -> list[Any] | str:
    """The config entries at `path` ([] when any level is absent), or a message."""
    node: Any = obj
    for depth, key in enumerate(path):
        if not isinstance(node, Mapping):
            where = ".".join(path[:depth]) or "object"
            return f"{where}: must be an object, got {decoding.json_type_name(node)}"
        node = node.get(key)
        if node is None:
            return []
    if not isinstance(node, list):
        return f"{'.'.join(path)}: must be an array, got {decoding.json_type_name(node)}"
    return node


def _describe(request: Mapping[str, Any], obj: Mapping[Any, Any], kind: str) -> str:
    """`ResourceClaim ns/name` for the message, from the request or the object metadata."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = request.get("name") or meta.get("name") or meta.get("generateName") or ""
    namespace = request.get("namespace") or meta.get("namespace") or ""
    if not isinstance(name, str) or not isinstance(namespace, str):
        return kind
    ref = f"{namespace}/{name}" if namespace and name else name
    return f"{kind} {ref}" if ref else kind


def _driver_of(entry: object) -> str:
    """The driver a refused entry is for (ours when the entry is too malformed to say)."""
    if isinstance(entry, Mapping):
        opaque = entry.get("opaque")
        if isinstance(opaque, Mapping) and opaque.get("driver") == gpu_configs.DRIVER_NAME:
            return gpu_configs.DRIVER_NAME
    return names.DRIVER_NAME


def _uid_of(request: object) -> str:
    if isinstance(request, Mapping):
        uid = request.get("uid")
        if isinstance(uid, str):
            return uid
    return ""


def _allowed(uid: str) -> dict[str, Any]:
    return {"uid": uid, "allowed": True}


def _bad_request(uid: str, message: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "allowed": False,
        "status": {"code": CODE_BAD_REQUEST, "reason": REASON_BAD_REQUEST, "message": message},
    }


def _invalid(
    uid: str, what: str, problems: Sequence[str], *, drivers: set[str]
) -> dict[str, Any]:
    # NB: "and"-joined, sorted, so a mix of both halves' configs names both drivers.
    driver = " and ".join(sorted(drivers))
    if len(problems) == 1:
        message = f"{what} has an invalid {driver} device config: {problems[0]}"
    else:
        listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, start=1))
        message = f"{what} has {len(problems)} invalid {driver} device configs: {listed}"
    return {
        "uid": uid,
        "allowed": False,
        "status": {"code": CODE_INVALID, "reason": REASON_INVALID, "message": message},
    }
