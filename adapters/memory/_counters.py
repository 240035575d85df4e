"""KEP-4815 partitionable devices for the in-memory allocator: shared counters.

A pool's ResourceSlices may publish `sharedCounters` (counter sets, each a map of counter
name to `{"value": quantity}`), and its devices `consumesCounters` (per counter set, the
amounts they take). The scheduler never allocates devices whose consumption together
exceeds a counter: a full GPU and a MIG partition of it, or two overlapping partitions, are
never both allocated. A device allocated to several claims (consumable capacity) consumes
its counters once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from adapters.memory import _capacity

# (driver, pool, counter set, counter)
CounterKey = tuple[str, str, str, str]
# What one device consumes, by counter.
Consumption = Mapping[CounterKey, int]


def counters_of(slices: Iterable[Mapping[str, Any]]) -> dict[CounterKey, int]:
    """Every counter the given slices publish, with its value (the slices of newest
    generations only: the caller filters)."""
    found: dict[CounterKey, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        driver = str(spec.get("driver", ""))
        pool = str((spec.get("pool") or {}).get("name", ""))
        for counter_set in spec.get("sharedCounters") or ():
            set_name = str(counter_set.get("name", ""))
            for name, counter in (counter_set.get("counters") or {}).items():
                value = _capacity.parse_quantity((counter or {}).get("value", "0"))
                found[(driver, pool, set_name, str(name))] = value
    return found


def consumption_of(driver: str, pool: str, device: Mapping[str, Any]) -> dict[CounterKey, int]:
    """What `device` (of `pool` of `driver`) takes from its pool's counter sets."""
    taken: dict[CounterKey, int] = {}
    for consumes in device.get("consumesCounters") or ():
        set_name = str(consumes.get("counterSet", ""))
        for name, counter in (consumes.get("counters") or {}).items():
            key = (driver, pool, set_name, str(name))
            amount = _capacity.parse_quantity((counter or {}).get("value", "0"))
            taken[key] = taken.get(key, 0) + amount
    return taken


def exceeded(
    consumption: Consumption, used: Mapping[CounterKey, int], available: Mapping[CounterKey, int]
) -> str:
    """The first counter `consumption` would overrun beside `used` ("" when it fits). A
    counter no slice publishes has nothing to give."""
    for key, amount in sorted(consumption.items()):
        if amount and used.get(key, 0) + amount > available.get(key, 0):
            return f"counter {key[3]} of counter set {key[2]}"
    return ""


def add(used: dict[CounterKey, int], consumption: Consumption) -> None:
    """Count `consumption` as taken in `used`."""
    for key, amount in consumption.items():
        used[key] = used.get(key, 0) + amount
