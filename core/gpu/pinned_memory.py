"""MPS pinned device memory limits: Kubernetes quantities in, `nvidia-cuda-mps-control` values out.

An `MpsConfig` sets `defaultPinnedDeviceMemoryLimit` (every device of the claim) and
`defaultPerDevicePinnedMemoryLimit` (a map from a device's UUID, or its index among the
claim's devices sorted by UUID, to a limit that overrides the default). Both are
`resource.Quantity` values (`"10Gi"`, `"512Mi"`, `"1e9"`). The control daemon takes whole
megabytes (MiB): a quantity is rounded up to a whole byte, then divided down to MiB, and
written `<n>M`, as upstream's `MpsPerDevicePinnedMemoryLimit.Normalize` does. A limit below
1 MiB means nothing to the daemon and is refused.
"""

from __future__ import annotations

import fractions
import re
from collections.abc import Mapping, Sequence
from typing import Final

from core import errors

_QUANTITY: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY: Final[Mapping[str, int]] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_DECIMAL: Final[Mapping[str, fractions.Fraction]] = {
    "n": fractions.Fraction(1, 10**9), "u": fractions.Fraction(1, 10**6),
    "m": fractions.Fraction(1, 10**3), "k": fractions.Fraction(10**3),
    "M": fractions.Fraction(10**6), "G": fractions.Fraction(10**9),
    "T": fractions.Fraction(10**12), "P": fractions.Fraction(10**15),
    "E": fractions.Fraction(10**18),
}
MIB: Final = 2**20
# Exponents beyond this are not quantities anyone means (and would be slow to compute).
_MAX_EXPONENT: Final = 30


def parse_quantity(text: str) -> fractions.Fraction:
    """The exact value of a Kubernetes quantity string (`"10Gi"` -> 10737418240).

    Raises ValueError naming the accepted forms for anything else.
    """
    found = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if found is None:
        raise ValueError(
            f"{text!r} is not a quantity: use a number with an optional suffix "
            "(Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, or e<exponent>), e.g. 10Gi or 512Mi"
        )
    number = fractions.Fraction(found["number"])
    suffix = found["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    if suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"{text!r}: exponent {exponent} is out of range")
        return number * fractions.Fraction(10) ** exponent
    return number


def megabytes(text: str) -> int:
    """Whole MiB of a quantity, as the control daemon takes it: rounded up to a byte
    (away from zero), then truncated to MiB. ValueError when not a quantity."""
    value = parse_quantity(text)
    whole = -((-value.numerator) // value.denominator) if value > 0 else int(value)
    return int(whole / MIB) if whole >= 0 else -((-whole) // MIB)


def limit_value(text: str) -> str:
    """The daemon's form of a limit (`"10Gi"` -> `"10240M"`); ValueError below 1 MiB."""
    amount = megabytes(text)
    if amount <= 0:
        raise ValueError(f"{text!r} is below 1Mi, the smallest limit the MPS daemon takes")
    return f"{amount}M"


def normalize(
    uuids: Sequence[str],
    *,
    default: str | None,
    per_device: Sequence[tuple[str, str]],
) -> tuple[tuple[str, str], ...]:
    """The limit of each device of a daemon, as `(uuid, "<n>M")` sorted by UUID.

    `uuids` are the daemon's device UUIDs; `default` applies to each, then `per_device`
    entries override it, each keyed by a UUID of `uuids` or an index into them sorted.
    PermanentError (naming the key and the devices) for a key that names no device.
    """
    ordered = sorted(uuids)
    limits: dict[str, str] = {}
    if default is not None:
        value = _value(default, where="defaultPinnedDeviceMemoryLimit")
        limits = {uuid: value for uuid in ordered}
    for key, quantity in per_device:
        uuid = _device(key, ordered)
        limits[uuid] = _value(quantity, where=f"defaultPerDevicePinnedMemoryLimit[{key}]")
    return tuple(sorted(limits.items()))


def _value(quantity: str, *, where: str) -> str:
    try:
        return limit_value(quantity)
    except ValueError as exc:
        raise errors.PermanentError(f"MpsConfig.{where}: {exc}") from None


def _device(key: str, uuids: Sequence[str]) -> str:
    if key in uuids:
        return key
    if key.isascii() and key.isdigit() and int(key) < len(uuids):
        return uuids[int(key)]
    raise errors.PermanentError(
        f"MpsConfig.defaultPerDevicePinnedMemoryLimit key {key!r} names none of the claim's "
        f"devices of this config ({', '.join(uuids) or 'none'}): use one of those UUIDs, or "
        f"an index from 0 to {len(uuids) - 1} into them sorted"
    )
