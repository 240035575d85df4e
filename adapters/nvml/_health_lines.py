"""The JSON lines the GPU health watch child prints, and the events they carry.

`adapters.nvml.health_watch` runs NVML's event loop in a child process (an NVML crash or
hang there is only a restart here); this module is the contract between the two sides and
the format of the simulated events file (`adapters.nvml.health_events.raise_simulated_event`).
Pure: no I/O, no pynvml.

One JSON object per line:
    {"ready": true, "monitored": ["GPU-...", ...]}    first, once the watch is registered
    {"kind": "xid" | "gpu-lost" | "unmonitored", "gpuUUID": "GPU-..." | "",
     "giID": N, "ciID": N, "xid": N}                   one per event

An event line may leave out everything but "kind": the fields then take `HealthEvent`'s
defaults (the whole node, the whole GPU, XID 0), which keeps hand-written lines short.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from core.gpu import health

_UINT32_MAX: Final = 0xFFFFFFFF
# NVML's eventData is an unsigned long long.
_UINT64_MAX: Final = 2**64 - 1


class HealthLineError(ValueError):
    """A line that is not a health watch line of this format (the message says why)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ready:
    """The watch is registered; events on `monitored` GPUs will be seen from now on."""

    monitored: tuple[str, ...] = ()


def encode_event(event: health.HealthEvent) -> str:
    """One event as a line (without the newline)."""
    return json.dumps({
        "kind": event.kind.value,
        "gpuUUID": event.gpu_uuid,
        "giID": event.gi_id,
        "ciID": event.ci_id,
        "xid": event.xid,
    })


def encode_ready(monitored: Iterable[str]) -> str:
    """The ready line (without the newline)."""
    return json.dumps({"ready": True, "monitored": list(monitored)})


def decode_line(line: str) -> health.HealthEvent | Ready:
    """An event or the ready line; HealthLineError saying what is wrong otherwise."""
    try:
        raw = json.loads(line)
    except ValueError as exc:  # NB: also catches the UnicodeDecodeError of odd input
        raise HealthLineError(f"not JSON ({exc}): {line[:200]!r}") from None
    if not isinstance(raw, Mapping):
        raise HealthLineError(f"want a JSON object, got {line[:200]!r}")
    if "ready" in raw:
        return _ready(raw)
    return _event(raw)


def decode_event(line: str) -> health.HealthEvent:
    """An event line (a ready line is refused: only the watch itself says it is ready)."""
    decoded = decode_line(line)
    if isinstance(decoded, Ready):
        raise HealthLineError(f"want an event line, got a ready line: {line[:200]!r}")
    return decoded


def _ready(raw: Mapping[str, Any]) -> Ready:
    monitored = raw.get("monitored", [])
    if raw["ready"] is not True or not isinstance(monitored, list) or not all(
        isinstance(uuid, str) for uuid in monitored
    ):
        raise HealthLineError(
            f"a ready line needs \"ready\": true and \"monitored\" (a list of UUID strings), "
            f"got {json.dumps(raw)[:200]}"
        )
    return Ready(monitored=tuple(monitored))


def _event(raw: Mapping[str, Any]) -> health.HealthEvent:
    try:
        kind = health.HealthEventKind(raw.get("kind"))
    except ValueError:
        known = ", ".join(repr(k.value) for k in health.HealthEventKind)
        raise HealthLineError(
            f"\"kind\" must be one of {known}, got {json.dumps(raw)[:200]}"
        ) from None
    gpu_uuid = raw.get("gpuUUID", "")
    if not isinstance(gpu_uuid, str):
        raise HealthLineError(f"\"gpuUUID\" must be a string, got {gpu_uuid!r}")
    return health.HealthEvent(
        kind=kind,
        gpu_uuid=gpu_uuid,
        gi_id=_uint(raw, "giID", default=health.WHOLE_GPU, top=_UINT32_MAX),
        ci_id=_uint(raw, "ciID", default=health.WHOLE_GPU, top=_UINT32_MAX),
        xid=_uint(raw, "xid", default=0, top=_UINT64_MAX),
    )


def _uint(raw: Mapping[str, Any], key: str, *, default: int, top: int) -> int:
    value = raw.get(key, default)
    # NB: JSON true/false decode as bool, a subclass of int: not a number here.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise HealthLineError(f"{key!r} must be an integer from 0 to {top}, got {value!r}")
    return value
