"""A small fake KubeletPluginService for the gRPC adapter tests (implements the port)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from core import models, names, ports

DRIVER = "compute-domain.nvidia.com"


class FakePluginService:
    """Implements the port: prepares every claim with one channel device, except

    uid starting "bad" -> per-claim error; uid starting "boom" -> the whole call raises;
    uid starting "skip" -> left out of the answer (the kubelet retries it).
    """

    def __init__(self) -> None:
        self.prepared: set[names.ClaimUID] = set()
        self.calls: list[tuple[str, tuple[models.ClaimRef, ...]]] = []
        self._lock = threading.Lock()

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return self._answer("prepare", claims)

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return self._answer("unprepare", claims)

    @staticmethod
    def device_for(uid: str) -> models.PreparedDevice:
        return models.PreparedDevice(
            request_names=("channel",),
            pool_name="node-a",
            device_name="channel-0",
            cdi_device_ids=(f"k8s.{DRIVER}/claim={uid}-channel-0",),
        )

    def _answer(
        self, verb: str, claims: tuple[models.ClaimRef, ...]
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        with self._lock:
            self.calls.append((verb, claims))
        if any(c.uid.startswith("boom") for c in claims):
            raise RuntimeError("simulated bug")
        out: dict[names.ClaimUID, models.ClaimResult] = {}
        for claim in claims:
            if claim.uid.startswith("skip"):
                continue
            if claim.uid.startswith("bad"):
                out[claim.uid] = models.ClaimResult(
                    error=f"claim {claim.namespace}/{claim.name} needs an NVLink clique"
                )
            elif verb == "prepare":
                self.prepared.add(claim.uid)
                out[claim.uid] = models.ClaimResult(devices=(self.device_for(claim.uid),))
            else:
                self.prepared.discard(claim.uid)
                out[claim.uid] = models.ClaimResult()
        return out
