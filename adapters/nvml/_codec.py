"""The JSON the NVML probe child prints, and its translation into core fabric records.

NVML runs in a child process (`adapters.nvml.probe`) so that a segfault or hang in the
library cannot take the plugin down; this module is the contract between the two
sides. Pure: no I/O, no pynvml, tested on its own.

Shape (one JSON object on stdout):
    {"schema": 1, "ok": true, "driver_version": "...", "gpus": [{"index", "uuid",
     "name", "call", "state", "cluster_uuid" (32 hex digits), "clique_id", "status",
     "note"}, ...]}
    {"schema": 1, "ok": false, "reason": "nvml-unavailable" | "nvml-error" |
     "probe-error", "message": "..."}
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from core import models

SCHEMA_VERSION = 1
CLUSTER_UUID_LEN = 16
NVML_SUCCESS = 0


class ProbeOutputError(ValueError):
    """The probe printed something that is not a probe report of this schema."""


class FabricCall(enum.StrEnum):
    """Which NVML entry point produced a GPU's fabric info."""

    LEGACY = "legacy"  # nvmlDeviceGetGpuFabricInfo
    VERSIONED = "v"  # nvmlDeviceGetGpuFabricInfoV (opt-in: NVML_FABRIC_INFO_V=1)
    NONE = "none"  # neither answered: reported as NOT_SUPPORTED


class FailureReason(enum.StrEnum):
    UNAVAILABLE = "nvml-unavailable"  # no libnvidia-ml / driver not loaded / no pynvml
    NVML_ERROR = "nvml-error"  # an NVML call returned an error
    PROBE_ERROR = "probe-error"  # the probe itself failed unexpectedly


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeGpu:
    """One GPU as the probe saw it; `state`/`status` are NVML's raw integers."""

    index: int
    uuid: str
    name: str
    call: FabricCall
    state: int
    cluster_uuid: bytes = b"\x00" * CLUSTER_UUID_LEN
    clique_id: int = 0
    status: int = NVML_SUCCESS
    note: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeReport:
    driver_version: str
    gpus: tuple[ProbeGpu, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeFailure:
    reason: FailureReason
    message: str


def encode_report(report: ProbeReport) -> str:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "ok": True,
            "driver_version": report.driver_version,
            "gpus": [_gpu_to_json(gpu) for gpu in report.gpus],
        },
        sort_keys=True,
    )


def encode_failure(failure: ProbeFailure) -> str:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "ok": False,
            "reason": failure.reason.value,
            "message": failure.message,
        },
        sort_keys=True,
    )


def decode_probe_output(text: str) -> ProbeReport | ProbeFailure:
    """Parse the probe's stdout; ProbeOutputError if it is not one report of this schema."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeOutputError(f"not JSON ({exc.msg} at char {exc.pos})") from exc
    obj = _mapping(raw, "probe output")
    if obj.get("schema") != SCHEMA_VERSION:
        raise ProbeOutputError(f"schema {obj.get('schema')!r}, expected {SCHEMA_VERSION}")
    ok = obj.get("ok")
    if ok is False:
        reason = _str(obj, "reason")
        try:
            failure_reason = FailureReason(reason)
        except ValueError as exc:
            raise ProbeOutputError(f"unknown failure reason {reason!r}") from exc
        return ProbeFailure(reason=failure_reason, message=_str(obj, "message"))
    if ok is not True:
        raise ProbeOutputError(f"field 'ok' must be true or false, got {ok!r}")
    gpus = obj.get("gpus")
    if not isinstance(gpus, list):
        raise ProbeOutputError("field 'gpus' must be a list")
    return ProbeReport(
        driver_version=_str(obj, "driver_version"),
        gpus=tuple(_gpu_from_json(_mapping(gpu, "gpus[]")) for gpu in gpus),
    )


def fabric_records(report: ProbeReport) -> tuple[models.FabricRecord, ...]:
    """Core fabric records of every GPU, sorted by GPU UUID (deterministic)."""
    return tuple(
        sorted((fabric_record(gpu) for gpu in report.gpus), key=lambda record: record.gpu_uuid)
    )


def fabric_record(gpu: ProbeGpu) -> models.FabricRecord:
    try:
        state = models.FabricState(gpu.state)
    except ValueError as exc:
        raise ProbeOutputError(
            f"GPU {gpu.uuid} reports unknown NVML fabric state {gpu.state}"
        ) from exc
    return models.FabricRecord(
        gpu_uuid=gpu.uuid,
        state=state,
        cluster_uuid=gpu.cluster_uuid,
        clique_id=gpu.clique_id,
        status_ok=gpu.status == NVML_SUCCESS,
    )


def _gpu_to_json(gpu: ProbeGpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "call": gpu.call.value,
        "state": gpu.state,
        "cluster_uuid": gpu.cluster_uuid.hex(),
        "clique_id": gpu.clique_id,
        "status": gpu.status,
        "note": gpu.note,
    }


def _gpu_from_json(obj: Mapping[str, Any]) -> ProbeGpu:
    cluster_hex = _str(obj, "cluster_uuid")
    try:
        cluster_uuid = bytes.fromhex(cluster_hex)
    except ValueError as exc:
        raise ProbeOutputError(f"cluster_uuid {cluster_hex!r} is not hex") from exc
    if len(cluster_uuid) != CLUSTER_UUID_LEN:
        raise ProbeOutputError(
            f"cluster_uuid {cluster_hex!r} has {len(cluster_uuid)} bytes, "
            f"expected {CLUSTER_UUID_LEN}"
        )
    call = _str(obj, "call")
    try:
        fabric_call = FabricCall(call)
    except ValueError as exc:
        raise ProbeOutputError(f"unknown fabric call {call!r}") from exc
    return ProbeGpu(
        index=_int(obj, "index"),
        uuid=_str(obj, "uuid"),
        name=_str(obj, "name"),
        call=fabric_call,
        state=_int(obj, "state"),
        cluster_uuid=cluster_uuid,
        clique_id=_int(obj, "clique_id"),
        status=_int(obj, "status"),
        note=_str(obj, "note"),
    )


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProbeOutputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ProbeOutputError(f"field {key!r} must be a string, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProbeOutputError(f"field {key!r} must be an integer, got {value!r}")
    return value
