"""KEP-5055 device taints as the embedded scheduler honours them (as kube-scheduler does): a
device with a `NoSchedule` or `NoExecute` taint is not allocated to a request unless one of the
request's tolerations tolerates it; effect `None` only informs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """core/v1's rule, as DeviceToleration uses it: an empty key with Exists matches every
        key, an empty effect every effect; Equal also compares the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def taints_of(device: Mapping[str, Any]) -> tuple[Taint, ...]:
    return tuple(Taint(key=str(t.get("key") or ""), value=str(t.get("value") or ""),
                       effect=str(t.get("effect") or ""))
                 for t in device.get("taints") or () if isinstance(t, Mapping))


def tolerations_of(exactly: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(Toleration(key=str(t.get("key") or ""),
                            operator=str(t.get("operator") or "Equal"),
                            value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
                 for t in exactly.get("tolerations") or () if isinstance(t, Mapping))


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> tuple[Taint, ...]:
    """The taints that keep the device from the request (blocking and not tolerated)."""
    kept = tuple(tolerations)
    return tuple(t for t in taints
                 if t.effect in _BLOCKING and not any(x.tolerates(t) for x in kept))
