"""Writes a claim's `status.devices` entries in the background, off the kubelet's answer.

A prepare hands over what `core.device_status.planned` decided and returns; an unprepare
hands over an empty list (clear ours). One worker thread writes them in order: read the
claim, merge (`core.device_status.merged_devices`, other drivers' entries kept), patch the
status subresource with the read resourceVersion as precondition, read again on a conflict.
A newer request for a claim replaces an older one not yet written. A write that fails is kept
and retried when `retry_failed` is called (the stale-claim sweep does, every interval): a
prepare is never failed or delayed by it. A claim that is gone (or recreated under another
UID) needs nothing.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from core import device_status, errors, kinds, models, names, ports

log = logging.getLogger(__name__)

# A claim and the entries to write for it (none: clear ours).
_Write = tuple[models.ClaimRef, tuple[device_status.DeviceStatus, ...]]

# Reads and conflicting patches one write tries before it is left for the next retry.
_ATTEMPTS = 5


def _rfc3339(epoch_s: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(epoch_s), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class DeviceStatusWriter:
    """Keeps this driver's entries of claims' `status.devices` as prepares left them."""

    def __init__(
        self,
        cluster: ports.Cluster,
        *,
        driver_name: str,
        node_name: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster = cluster
        self._driver = driver_name
        self._node = node_name
        self._wall_clock = wall_clock
        self._cond = threading.Condition()
        self._pending: dict[names.ClaimUID, _Write] = {}
        self._failed: dict[names.ClaimUID, _Write] = {}
        self._busy = False
        self._worker: threading.Thread | None = None

    def publish(
        self, ref: models.ClaimRef, statuses: tuple[device_status.DeviceStatus, ...]
    ) -> None:
        """Write `statuses` as this driver's entries of the claim (replacing earlier ones)."""
        self._submit(ref, statuses)

    def clear(self, ref: models.ClaimRef) -> None:
        """Remove this driver's entries of the claim."""
        self._submit(ref, ())

    def retry_failed(self) -> int:
        """Queue again every write that failed; returns how many."""
        with self._cond:
            retried = 0
            for uid, item in self._failed.items():
                if uid not in self._pending:
                    self._pending[uid] = item
                    retried += 1
            self._failed.clear()
            self._cond.notify_all()
        return retried

    @property
    def failed(self) -> frozenset[names.ClaimUID]:
        """Claims whose last write failed and waits for `retry_failed`."""
        with self._cond:
            return frozenset(self._failed)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._pending and not self._busy, timeout=timeout_s
            )

    # ------------------------------------------------------------ the worker

    def _submit(
        self, ref: models.ClaimRef, statuses: tuple[device_status.DeviceStatus, ...]
    ) -> None:
        with self._cond:
            self._failed.pop(ref.uid, None)
            self._pending[ref.uid] = (ref, statuses)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="claim-device-status", daemon=True
                )
                self._worker.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                uid = next(iter(self._pending))
                ref, statuses = self._pending.pop(uid)
                self._busy = True
            written = False
            try:
                written = self._write(ref, statuses)
            except Exception:  # never let the worker die: the write is retried later
                log.exception(
                    "event=claim_device_status_failed claim=%s/%s uid=%s node=%s",
                    ref.namespace, ref.name, ref.uid, self._node,
                )
            with self._cond:
                self._busy = False
                if not written and uid not in self._pending:
                    self._failed[uid] = (ref, statuses)
                self._cond.notify_all()

    def _write(
        self, ref: models.ClaimRef, statuses: tuple[device_status.DeviceStatus, ...]
    ) -> bool:
        """One write with its conflict retries; True when done (or nothing to do)."""
        for _ in range(_ATTEMPTS):
            try:
                claim = self._cluster.get(
                    kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name
                )
                meta = claim.get("metadata") or {}
                if meta.get("uid") != ref.uid:
                    return True  # another claim of that name now: ours is gone
                current = (claim.get("status") or {}).get("devices") or []
                merged = device_status.merged_devices(
                    current, driver=self._driver, ours=statuses,
                    now=_rfc3339(self._wall_clock()),
                    message=f"prepared on node {self._node}",
                )
                if merged is None:
                    return True
                self._cluster.patch(
                    kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name,
                    patch={"status": {"devices": merged or None}}, subresource="status",
                    resource_version=str(meta.get("resourceVersion") or ""),
                )
            except errors.NotFoundError:
                return True  # the claim is gone, and its status with it
            except errors.ConflictError:
                continue
            except errors.ClusterError as exc:
                log.warning(
                    "event=claim_device_status_failed claim=%s/%s uid=%s node=%s devices=%d "
                    "retry=next_sweep reason=%r",
                    ref.namespace, ref.name, ref.uid, self._node, len(statuses), str(exc),
                )
                return False
            log.info(
                "event=claim_device_status_written claim=%s/%s uid=%s node=%s devices=%d",
                ref.namespace, ref.name, ref.uid, self._node, len(statuses),
            )
            return True
        log.warning(
            "event=claim_device_status_failed claim=%s/%s uid=%s node=%s devices=%d "
            "retry=next_sweep reason=%r",
            ref.namespace, ref.name, ref.uid, self._node, len(statuses),
            f"still conflicting after {_ATTEMPTS} attempts",
        )
        return False
