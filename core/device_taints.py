"""KEP-5055 device taints as both kubelet plugins publish them in their ResourceSlices.

A taint on a published device (`spec.devices[].taints`) keeps the scheduler from allocating it
to a claim that does not tolerate it (`NoSchedule`), or only shows it (`None`). Both halves
taint: the GPU plugin for GPUs NVML reports sick (`core.gpu.health`), the ComputeDomain plugin
for channel and daemon devices of a node whose NVLink fabric degraded
(`core.computedomain.fabric_health`). This module holds what they share: the taint value, its
wire shape, and laying taints onto the devices about to be published.

Pure: no clocks, no I/O (`timeAdded` is left to the API server).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence

from core import models


class TaintEffect(enum.Enum):
    """The KEP-5055 effects the driver sets (`None` exists from Kubernetes 1.35)."""

    NO_SCHEDULE = "NoSchedule"
    NONE = "None"


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class DeviceTaint:
    """One taint of one device: `key=value:effect`."""

    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @property
    def blocks_scheduling(self) -> bool:
        return self.effect is TaintEffect.NO_SCHEDULE

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect.value}"


def taint_to_k8s(taint: DeviceTaint) -> models.JSONObject:
    """A `DeviceTaint` of resource.k8s.io (timeAdded left to the API server)."""
    body: models.JSONObject = {"key": taint.key, "effect": taint.effect.value}
    if taint.value:
        body["value"] = taint.value
    return body


def with_taints(
    published: Sequence[models.JSONObject],
    taints: Mapping[str, Sequence[DeviceTaint]],
    *,
    effect_none: bool = True,
) -> list[models.JSONObject]:
    """The ResourceSlice devices with the taints of each (`taints` by device name) added to
    `devices[].taints`; a device without any is returned as it was. Deterministic: a device's
    taints are sorted.

    `effect_none`: the API server knows effect `None` (Kubernetes 1.35 and later); without
    it such taints are left out (they only inform) rather than have the slice refused.
    """
    result: list[models.JSONObject] = []
    for device in published:
        mine = sorted(taints.get(str(device.get("name")), ()))
        added = [taint_to_k8s(t) for t in mine
                 if effect_none or t.effect is not TaintEffect.NONE]
        if not added:
            result.append(dict(device))
            continue
        existing = list(device.get("taints") or ())
        result.append({**device, "taints": existing + added})
    return result


def effect_none_supported(server_version: str) -> bool:
    """Whether an API server of `server_version` ("v1.34.4") accepts taint effect `None`
    (added in Kubernetes 1.35); ValueError for a version without major.minor."""
    found = re.match(r"v?(\d+)\.(\d+)", server_version)
    if found is None:
        raise ValueError(f"{server_version!r} is not a Kubernetes version (want e.g. v1.35.2)")
    return (int(found.group(1)), int(found.group(2))) >= (1, 35)
