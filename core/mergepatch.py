"""JSON merge patch (RFC 7386), the one the API server applies to our patches.

The kube adapter merges locally before a replace, the embedded cluster merges every patch it
is sent, and `computedomain plan` merges the controller's patches into its copy of the
objects: all three must agree with the API server and with each other, so they share this.
`copy_json` lives here too because it is what a merged result is made of: plain dicts and
lists that share nothing with either input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-shaped value as plain dicts and lists.

    Mappings become dicts (keys as strings) and sequences other than strings and bytes become
    lists, so a caller's tuples or frozen mappings can be stored and mutated afterwards
    without reaching back into what was copied.
    """
    if isinstance(value, Mapping):
        return {str(k): copy_json(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return [copy_json(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply the merge patch `patch` to `target` and return the result (RFC 7386).

    A `None` (JSON null) member removes the key; objects merge recursively; lists and scalars
    replace whatever was there. Key order of `target` is kept and new keys go last, as the
    API server keeps it. Neither input is modified and the result shares nothing with them
    (see `copy_json`), so callers may mutate it.
    """
    if not isinstance(patch, Mapping):
        return copy_json(patch)
    result: dict[str, Any] = copy_json(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
