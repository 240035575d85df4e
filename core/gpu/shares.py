"""Consumable shares (KEP-5075 consumable capacity; gate ConsumableShares): one GPU, several claims.

With `--consumable-shares` on, the GPU plugin publishes full GPUs and MIG devices with
`allowMultipleAllocations: true`, so the scheduler may allocate one device to several claims,
each result carrying a `shareID` and the capacity it consumes. What bounds the number of
claims per device is a capacity with a `requestPolicy`, as upstream publishes it:

| value       | `memory` capacity (rounded down to 1Mi)       | `shares` capacity          |
|-------------|-----------------------------------------------|----------------------------|
| `disabled`  | unchanged, no policy (exclusive devices)      | none                       |
| `memory`    | default all of it, range 1Mi..all, step 1Mi   | none                       |
| `unlimited` | default 0, range 0..all, step 1Mi             | none                       |
| `N` (> 0)   | default 0, range 0..all, step 1Mi             | N: default 1, range 1..N   |

VFIO passthrough functions are never shared. At prepare, a result with a `shareID` is held as
a consumable share: another claim may hold the same device only as a share with an equal
normalized config (`gpu.overlap`), and MPS is refused for it (as upstream refuses MPS under
consumable shares).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from core import errors, models
from core import gates as feature_gates
from core.gpu import configs

FLAG: Final = "--consumable-shares"
ENV: Final = "CONSUMABLE_SHARES"
MEMORY_CAPACITY: Final = "memory"
SHARES_CAPACITY: Final = "shares"
# The granularity of the memory policy (Kubernetes wants max and default multiples of step).
MEMORY_STEP_BYTES: Final = 1024 * 1024
_STEP: Final = "1Mi"


class ShareMode(enum.Enum):
    """What bounds the claims sharing one device."""

    DISABLED = "disabled"
    MEMORY = "memory"
    UNLIMITED = "unlimited"
    COUNT = "count"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsumableShares:
    """The parsed `--consumable-shares` value; `count` is N for ShareMode.COUNT, else 0."""

    mode: ShareMode = ShareMode.DISABLED
    count: int = 0

    @property
    def enabled(self) -> bool:
        return self.mode is not ShareMode.DISABLED

    def __str__(self) -> str:
        return str(self.count) if self.mode is ShareMode.COUNT else self.mode.value


DISABLED: Final = ConsumableShares()


def parse_consumable_shares(text: str, *, gates: models.FeatureGates) -> ConsumableShares:
    """`disabled` (or empty), `memory`, `unlimited` or a positive whole number, as upstream.

    Raises ConfigError for any other value, and for a value other than `disabled` while gate
    ConsumableShares is off (upstream refuses both at start).
    """
    value = text.strip()
    if value in ("", ShareMode.DISABLED.value):
        return DISABLED
    if value in (ShareMode.MEMORY.value, ShareMode.UNLIMITED.value):
        parsed = ConsumableShares(mode=ShareMode(value))
    else:
        digits = value.removeprefix("+")
        if not (digits.isascii() and digits.isdigit()) or int(digits) <= 0:
            raise errors.ConfigError(
                f"invalid value for {FLAG} ({ENV}, Helm consumableShares): {text!r}; it must "
                "be 'disabled', 'memory', 'unlimited' or a positive whole number (the shares "
                "each GPU is split into)"
            )
        parsed = ConsumableShares(mode=ShareMode.COUNT, count=int(digits))
    if not gates.enabled(feature_gates.CONSUMABLE_SHARES):
        raise errors.ConfigError(
            f"{FLAG}={parsed} ({ENV}, Helm consumableShares) requires feature gate "
            f"{feature_gates.CONSUMABLE_SHARES}=true; enable it "
            f"(featureGates.{feature_gates.CONSUMABLE_SHARES}=true) or set {FLAG}=disabled"
        )
    return parsed


def shareable(
    device: models.JSONObject,
    shares: ConsumableShares,
    *,
    memory_bytes: int,
    quantity: Callable[[int], str],
) -> models.JSONObject:
    """`device` (a full GPU or MIG device of the slice, with `memory_bytes` of memory) as
    published under `shares`; `quantity` formats bytes as the slice's other capacities are.

    Unchanged when shares are disabled, so the slices stay upstream's byte for byte.
    Deterministic; the input is not modified.
    """
    if not shares.enabled:
        return device
    capacity: dict[str, Any] = dict(device.get("capacity") or {})
    top = quantity((memory_bytes // MEMORY_STEP_BYTES) * MEMORY_STEP_BYTES)
    if shares.mode is ShareMode.MEMORY:
        policy = _range_policy(default=top, low=_STEP, high=top, step=_STEP)
    else:
        policy = _range_policy(default="0", low="0", high=top, step=_STEP)
    capacity[MEMORY_CAPACITY] = {"value": top, "requestPolicy": policy}
    if shares.mode is ShareMode.COUNT:
        count = str(shares.count)
        capacity[SHARES_CAPACITY] = {
            "value": count,
            "requestPolicy": _range_policy(default="1", low="1", high=count, step="1"),
        }
    return {
        **device,
        "capacity": {key: capacity[key] for key in sorted(capacity)},
        "allowMultipleAllocations": True,
    }


def check_share_config(
    result: models.DeviceResult, config: configs.DeviceConfig, *, claim: str
) -> None:
    """Refuse MPS for a consumable share (as upstream refuses MPS under consumable shares):
    MPS control daemons are per claim, and a shared device cannot run one for each."""
    if isinstance(config, configs.VfioDeviceConfig) or not result.share_id:
        return
    if config.sharing is not None and config.sharing.strategy is configs.SharingStrategy.MPS:
        raise errors.PermanentError(
            f"request {result.request} of claim {claim} holds device {result.device} as a "
            f"consumable share (shareID {result.share_id}), and MPS sharing is not supported "
            "with consumable shares; use strategy TimeSlicing or no sharing config, or turn "
            f"consumable shares off ({FLAG}=disabled)"
        )


def normalized_config(config: configs.DeviceConfig) -> str:
    """The config two claims sharing a device must both have, as canonical JSON (every
    default written out, keys sorted): equal strings mean equal configs."""
    return json.dumps(configs.device_config_to_k8s(config), sort_keys=True, separators=(",", ":"))


def _range_policy(*, default: str, low: str, high: str, step: str) -> models.JSONObject:
    return {"default": default, "validRange": {"min": low, "max": high, "step": step}}


def check_one_config_per_device(
    planned: Sequence[tuple[models.DeviceResult, configs.DeviceConfig]], *, claim: str
) -> None:
    """Refuse a claim holding several shares of one device under different configs: one
    device runs one config, within a claim as between claims."""
    first: dict[str, tuple[models.DeviceResult, str]] = {}
    for result, config in planned:
        normalized = normalized_config(config)
        seen = first.setdefault(result.device, (result, normalized))
        if seen[1] != normalized:
            raise errors.PermanentError(
                f"claim {claim} holds device {result.device} for requests {seen[0].request} "
                f"and {result.request} under different configs ({seen[1]} and {normalized}); "
                "one device runs one config: give both requests the same opaque config"
            )
