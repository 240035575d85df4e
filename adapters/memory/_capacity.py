"""Consumable capacity (KEP-5075) for the embedded scheduler: how much of a device a request takes.

The rules of resource.k8s.io/v1 as kube-scheduler applies them to a device with
`allowMultipleAllocations: true`: a request names amounts in `capacity.requests`; a capacity
the request leaves out consumes its policy's `default`, or all of it without one; an amount
below `validRange.min` is raised to it and rounded up to a multiple of `step` above `min`, or
up to the next of `validValues`; above `max` (or every valid value) the device does not fit.
The device fits while no capacity's consumption goes beyond its value. Quantities are whole
numbers here (no milli-units: no GPU capacity has them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

_QUANTITY: Final = re.compile(r"\+?([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_FACTORS: Final = {
    None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def parse_quantity(text: object) -> int:
    """A whole Kubernetes quantity (`80Gi`, `1Mi`, `2`, `4k`) as an integer; ValueError else."""
    found = _QUANTITY.fullmatch(str(text).strip())
    if found is None:
        raise ValueError(f"{text!r} is not a whole quantity (e.g. 2Gi, 1Mi or 4)")
    return int(found.group(1)) * _FACTORS[found.group(2)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capacity:
    """One capacity of a device with its request policy (None: consumed whole)."""

    value: int
    default: int | None = None
    low: int | None = None
    high: int | None = None
    step: int | None = None
    valid_values: tuple[int, ...] = ()


def capacities_of(device: Mapping[str, Any]) -> dict[str, Capacity]:
    """The capacities of a ResourceSlice device, by name."""
    out: dict[str, Capacity] = {}
    for name, raw in (device.get("capacity") or {}).items():
        policy = raw.get("requestPolicy") or {}
        valid_range = policy.get("validRange") or {}

        def opt(value: object) -> int | None:
            return None if value is None else parse_quantity(value)

        out[str(name)] = Capacity(
            value=parse_quantity(raw.get("value", 0)),
            default=opt(policy.get("default")),
            low=opt(valid_range.get("min")),
            high=opt(valid_range.get("max")),
            step=opt(valid_range.get("step")),
            valid_values=tuple(sorted(parse_quantity(v) for v in policy.get("validValues") or ())),
        )
    return out


def consumed(requested: int | None, capacity: Capacity) -> int | None:
    """What a request for `requested` (None: not named) consumes of `capacity`; None when the
    policy allows no such amount."""
    if requested is None:
        return capacity.value if capacity.default is None else capacity.default
    if capacity.valid_values:
        return next((v for v in capacity.valid_values if v >= requested), None)
    amount = requested
    if capacity.low is not None and amount < capacity.low:
        amount = capacity.low
    if capacity.step:
        base = capacity.low or 0
        amount = base + -(-(amount - base) // capacity.step) * capacity.step
    if capacity.high is not None and amount > capacity.high:
        return None
    return amount
