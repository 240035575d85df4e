"""The bytes of opaque DRA configs, as kube-apiserver keeps and compares them (pure).

An opaque config's `parameters` is a RawExtension: the API server stores the exact bytes the
creator sent and compares bytes when an update reaches the immutable `spec` of a
ResourceClaimTemplate. A PUT brings its own bytes; a JSON merge patch is applied to the
object's JSON and re-encoded, compactly with the key order kept. So an object created with
spaced JSON (the `kubernetes` client's default) refuses every merge patch, metadata-only ones
included, with 422 "field is immutable"; `adapters.kube` answers that with GET + PUT.

`apiserver.py` keeps the bytes per object and decides; this module only finds and encodes them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


@dataclasses.dataclass(frozen=True)
class _Span:
    """Where one JSON value lies in the text, with the spans of its members or items."""

    start: int
    end: int
    members: Mapping[str, _Span] | None = None
    items: Sequence[_Span] | None = None

    def member(self, key: str) -> _Span | None:
        return (self.members or {}).get(key)


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _scan(text: str, at: int) -> tuple[_Span, int]:
    """The span of the JSON value at `at` (after whitespace) and the index just past it.

    NB: the json module tells no positions, so containers are walked here and only their
    scalars (and keys) are handed to the decoder.
    """
    start = _skip(text, at)
    opener = text[start]
    if opener not in "{[":
        _, end = _DECODER.raw_decode(text, start)
        return _Span(start, end), end
    closer = "}" if opener == "{" else "]"
    members: dict[str, _Span] = {}
    items: list[_Span] = []
    at = _skip(text, start + 1)
    if text[at] == closer:
        at += 1
    else:
        while True:
            if opener == "{":
                key, at = _DECODER.raw_decode(text, _skip(text, at))
                at = _skip(text, at)
                if text[at] != ":":
                    raise ValueError(f"expected ':' at {at}")
                members[str(key)], at = _scan(text, at + 1)
            else:
                item, at = _scan(text, at)
                items.append(item)
            at = _skip(text, at)
            if text[at] == closer:
                at += 1
                break
            if text[at] != ",":
                raise ValueError(f"expected ',' or {closer!r} at {at}")
            at += 1
    if opener == "{":
        return _Span(start, at, members=members), at
    return _Span(start, at, items=items), at


def _configs(spec_spans: _Span | None) -> Sequence[_Span]:
    devices = spec_spans.member("devices") if spec_spans is not None else None
    config = devices.member("config") if devices is not None else None
    return (config.items or ()) if config is not None else ()


def parameters_as_sent(body: bytes) -> tuple[bytes, ...]:
    """The exact bytes of each opaque config's `parameters` in a ResourceClaimTemplate body,
    in order; () when the body has none (or is not a JSON object)."""
    try:
        text = body.decode("utf-8")
        root, _ = _scan(text, 0)
    except (UnicodeDecodeError, ValueError, IndexError):
        return ()
    outer = root.member("spec")
    found = []
    for config in _configs(outer.member("spec") if outer is not None else None):
        opaque = config.member("opaque")
        parameters = opaque.member("parameters") if opaque is not None else None
        if parameters is not None:
            found.append(text[parameters.start : parameters.end].encode("utf-8"))
    return tuple(found)


def parameters_reencoded(obj: Mapping[str, Any]) -> tuple[bytes, ...]:
    """What the API server's re-encode of a ResourceClaimTemplate gives for each opaque
    config's `parameters`, in order: compact JSON with the key order kept."""
    outer = obj.get("spec")
    inner = outer.get("spec") if isinstance(outer, Mapping) else None
    devices = inner.get("devices") if isinstance(inner, Mapping) else None
    configs = devices.get("config") if isinstance(devices, Mapping) else None
    found = []
    for config in configs if isinstance(configs, Sequence) else ():
        opaque = config.get("opaque") if isinstance(config, Mapping) else None
        if isinstance(opaque, Mapping) and "parameters" in opaque:
            found.append(json.dumps(
                opaque["parameters"], separators=(",", ":"), ensure_ascii=False
            ).encode("utf-8"))
    return tuple(found)
