"""The request the Fabric Manager child (`fmctl`) gets and the one JSON line it answers.

libnvfm runs in a child process so that a crash or hang in it cannot take the plugin down;
this module is the contract between the two sides. Pure: no I/O, no ctypes, tested on its own.

Request (argv[1] of `python -m adapters.fabricmanager.fmctl`):
    {"schema": 1, "library": "libnvfm.so.1" | "<path>", "address": "...", "unix_socket": bool,
     "connect_timeout_ms": int, "action": "library" | "list" | "activate" | "deactivate",
     "partition_id": int | null}
Answer (the last line of stdout):
    {"schema": 1, "outcome": "done" | "library-unavailable" | "fm-status" |
     "unknown-partition" | "bad-count", "partitions": [{"id", "active", "gpus": [{"physical_id",
     "uuid", "pci_bus_id"}]}] | null (as read before any change), "changed": bool,
     "call": "fmConnect" | ..., "status": <fmReturn_t>, "message": "..."}
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Final

from core.gpu import fm_partitions

SCHEMA_VERSION: Final = 1


class AnswerError(ValueError):
    """A request or answer that is not one of this schema (the child misbehaved)."""


class ContradictoryPartition(ValueError):
    """Fabric Manager reported a partition naming one GPU twice."""


class Action(enum.StrEnum):
    LIBRARY = "library"  # load the library and find its calls; no connection
    LIST = "list"
    ACTIVATE = "activate"  # NB: reads the state first; an active partition is left as it is
    DEACTIVATE = "deactivate"  # likewise for an inactive one


class Outcome(enum.StrEnum):
    DONE = "done"
    LIBRARY_UNAVAILABLE = "library-unavailable"  # no such library, or one without our calls
    FM_STATUS = "fm-status"  # `call` returned `status` (not FM_ST_SUCCESS)
    UNKNOWN_PARTITION = "unknown-partition"  # not in what fmGetSupportedFabricPartitions listed
    BAD_COUNT = "bad-count"  # a count beyond the struct's array: a layout we do not know


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    library: str
    address: str
    unix_socket: bool
    connect_timeout_ms: int
    action: Action
    partition_id: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU of a partition as libnvfm lists it (physical id = module id)."""

    physical_id: int
    uuid: str = ""
    pci_bus_id: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListedPartition:
    partition_id: int
    active: bool
    gpus: tuple[Gpu, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    outcome: Outcome
    partitions: tuple[ListedPartition, ...] | None = None
    changed: bool = False
    call: str = ""
    status: int = 0
    message: str = ""


def encode_request(request: Request) -> str:
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            **{f.name: getattr(request, f.name) for f in dataclasses.fields(request)},
        },
        sort_keys=True,
    )


def decode_request(text: str) -> Request:
    """AnswerError if `text` is not a request of this schema."""
    obj = _object(text)
    action = _str(obj, "action")
    try:
        parsed = Action(action)
    except ValueError as exc:
        raise AnswerError(f"unknown action {action!r}") from exc
    partition_id = obj.get("partition_id")
    if parsed in (Action.ACTIVATE, Action.DEACTIVATE):
        partition_id = _int(obj, "partition_id")
    elif partition_id is not None:
        raise AnswerError(f"action {action!r} takes no partition_id")
    return Request(
        library=_str(obj, "library"),
        address=_str(obj, "address"),
        unix_socket=_bool(obj, "unix_socket"),
        connect_timeout_ms=_int(obj, "connect_timeout_ms"),
        action=parsed,
        partition_id=partition_id,
    )


def encode_answer(answer: Answer) -> str:
    partitions = None if answer.partitions is None else [
        {
            "id": p.partition_id,
            "active": p.active,
            "gpus": [dataclasses.asdict(g) for g in p.gpus],
        }
        for p in answer.partitions
    ]
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "outcome": answer.outcome.value,
            "partitions": partitions,
            "changed": answer.changed,
            "call": answer.call,
            "status": answer.status,
            "message": answer.message,
        },
        sort_keys=True,
    )


def decode_answer(obj: Mapping[str, object]) -> Answer:
    """The answer in `obj` (the child's last JSON line); AnswerError if it is not one."""
    if obj.get("schema") != SCHEMA_VERSION:
        raise AnswerError(f"schema {obj.get('schema')!r}, expected {SCHEMA_VERSION}")
    outcome = _str(obj, "outcome")
    try:
        parsed = Outcome(outcome)
    except ValueError as exc:
        raise AnswerError(f"unknown outcome {outcome!r}") from exc
    raw = obj.get("partitions")
    partitions = None
    if raw is not None:
        if not isinstance(raw, list):
            raise AnswerError("field 'partitions' must be a list or null")
        partitions = tuple(_listed(_mapping(p, "partitions[]")) for p in raw)
    return Answer(
        outcome=parsed,
        partitions=partitions,
        changed=_bool(obj, "changed"),
        call=_str(obj, "call"),
        status=_int(obj, "status"),
        message=_str(obj, "message"),
    )


def to_partitions(listed: tuple[ListedPartition, ...]) -> tuple[fm_partitions.Partition, ...]:
    """The port's partitions (module ids = physical ids); ContradictoryPartition where one
    names a GPU twice (a frozenset would hide it, and the partition's size with it)."""
    result = []
    for partition in listed:
        module_ids = [gpu.physical_id for gpu in partition.gpus]
        twice = sorted({m for m in module_ids if module_ids.count(m) > 1})
        if twice:
            raise ContradictoryPartition(
                f"Fabric Manager reported partition {partition.partition_id} with GPU module "
                f"ids {twice} twice; restart Fabric Manager (nv-fabricmanager) and then the "
                "plugin"
            )
        result.append(
            fm_partitions.Partition(
                partition_id=partition.partition_id,
                module_ids=frozenset(module_ids),
                active=partition.active,
            )
        )
    return tuple(result)


def _listed(obj: Mapping[str, object]) -> ListedPartition:
    gpus = obj.get("gpus")
    if not isinstance(gpus, list):
        raise AnswerError("field 'gpus' must be a list")
    return ListedPartition(
        partition_id=_int(obj, "id"),
        active=_bool(obj, "active"),
        gpus=tuple(
            Gpu(
                physical_id=_int(g, "physical_id"),
                uuid=_str(g, "uuid"),
                pci_bus_id=_str(g, "pci_bus_id"),
            )
            for g in (_mapping(gpu, "gpus[]") for gpu in gpus)
        ),
    )


def _object(text: str) -> Mapping[str, object]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnswerError(f"not JSON ({exc.msg} at char {exc.pos})") from exc
    obj = _mapping(raw, "request")
    if obj.get("schema") != SCHEMA_VERSION:
        raise AnswerError(f"schema {obj.get('schema')!r}, expected {SCHEMA_VERSION}")
    return obj


def _mapping(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise AnswerError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, object], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise AnswerError(f"field {key!r} must be a string, got {value!r}")
    return value


def _int(obj: Mapping[str, object], key: str) -> int:
    value = obj.get(key)
    if type(value) is not int:
        raise AnswerError(f"field {key!r} must be an integer, got {value!r}")
    return value


def _bool(obj: Mapping[str, object], key: str) -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise AnswerError(f"field {key!r} must be true or false, got {value!r}")
    return value
