"""Leader election on a `coordination.k8s.io/v1` Lease, so only one controller replica acts.

Same record and rules as Kubernetes' own leader election (client-go `leaderelection`):
`spec.holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime` (RFC 3339 with
microseconds) and `leaseTransitions`. Expiry is judged on this process's monotonic clock
from the moment it last saw the record change, never by comparing wall clocks across
machines. Every write carries the resourceVersion it read, so two candidates racing for an
expired lease cannot both win: the loser gets a 409 and keeps waiting.

Leadership is bounded by `renew_deadline_s` from the *start* of the last successful renewal,
whatever the API server does: each renewal attempt runs on a thread of its own and is waited
on only until that deadline, so a call blocked on HTTP timeouts (10 s connect, 60 s read,
retries) cannot keep this replica leading while another takes the expired lease. `is_leader`
is judged on the same clock, so a caller (readiness, a write fence) gets "no" at the deadline
even before the elector's own thread notices.

NB: not `kubernetes.leaderelection` from the official client: its renew loop checks the
deadline only between calls (the defect above), uses the process-wide default API client and
wall-clock times, sleeps with no way to stop, and never releases the lease on shutdown.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters.kube import _codec
from core import errors, kinds, ports

log = logging.getLogger(__name__)

# client-go's JitterFactor for the acquire loop.
_ACQUIRE_JITTER = 0.2


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Acquire, renew and release one Lease through any `core.ports.Cluster`."""

    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime.datetime] = _utc_now,
        release_on_stop: bool = True,
    ) -> None:
        if not identity:
            raise errors.ConfigError("leader election needs a non-empty identity (the pod name)")
        if not lease_duration_s > renew_deadline_s > retry_period_s * (1 + _ACQUIRE_JITTER):
            raise errors.ConfigError(
                "leader election timings must satisfy lease duration > renew deadline > "
                f"1.2 x retry period; got {lease_duration_s}s, {renew_deadline_s}s, "
                f"{retry_period_s}s"
            )
        self._cluster = cluster
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._lease_duration_s = lease_duration_s
        self._renew_deadline_s = renew_deadline_s
        self._retry_period_s = retry_period_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._release_on_stop = release_on_stop
        self._observed_spec: Mapping[str, Any] | None = None
        self._observed_at = 0.0
        self._resource_version = ""
        self._leading = False
        # Our clock at the start of the attempt that last created or renewed the lease.
        self._renewed_at = 0.0

    @property
    def is_leader(self) -> bool:
        """Leading, and the last successful renewal started less than `renew_deadline_s` ago
        (the lease cannot have been taken by another candidate yet)."""
        return self._leading and self._clock() - self._renewed_at < self._renew_deadline_s

    @property
    def observed_holder(self) -> str:
        """Holder identity in the last lease record this elector saw ('' if none)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def _observe(self, lease: Mapping[str, Any], now: float) -> None:
        spec = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = now
        self._resource_version = str((lease.get("metadata") or {}).get("resourceVersion") or "")

    def _record(self, *, acquire_time: str, renew_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self._lease_duration_s)),
            "acquireTime": acquire_time,
            "renewTime": renew_time,
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create the lease, renew ours, or take over an expired one.

        Returns whether this elector holds the lease now. API errors count as "not now"
        (logged); the caller's renew deadline decides when leadership is lost.
        """
        now = self._clock()
        stamp = _codec.rfc3339(self._wall_clock(), micro=True)
        try:
            lease = self._cluster.get(kinds.LEASE.kind, namespace=self._namespace, name=self._name)
        except errors.NotFoundError:
            return self._create(now=now, stamp=stamp)
        except errors.ClusterError as exc:
            log.warning("lease read failed lease=%s/%s error=%s", self._namespace, self._name, exc)
            return self._set_leading(False)
        self._observe(lease, now)
        spec = self._observed_spec or {}
        holder = str(spec.get("holderIdentity") or "")
        duration = float(spec.get("leaseDurationSeconds") or self._lease_duration_s)
        if holder and holder != self.identity and self._observed_at + duration > now:
            return self._set_leading(False)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            record = self._record(
                acquire_time=str(spec.get("acquireTime") or stamp),
                renew_time=stamp,
                transitions=transitions,
            )
        else:
            record = self._record(acquire_time=stamp, renew_time=stamp, transitions=transitions + 1)
        try:
            updated = self._cluster.patch(
                kinds.LEASE.kind,
                namespace=self._namespace,
                name=self._name,
                patch={"spec": record},
                resource_version=self._resource_version,
            )
        except errors.ConflictError:
            log.info("lease changed under us lease=%s/%s", self._namespace, self._name)
            return self._set_leading(False)
        except errors.ClusterError as exc:
            log.warning(
                "lease update failed lease=%s/%s error=%s", self._namespace, self._name, exc
            )
            return self._set_leading(False)
        self._observe(updated, now)
        self._renewed_at = now
        if holder != self.identity:
            log.info(
                "acquired lease lease=%s/%s identity=%s previous=%s",
                self._namespace,
                self._name,
                self.identity,
                holder or "<none>",
            )
        return self._set_leading(True)

    def _create(self, *, now: float, stamp: str) -> bool:
        lease = {
            "apiVersion": kinds.LEASE.api_version,
            "kind": kinds.LEASE.kind,
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": self._record(acquire_time=stamp, renew_time=stamp, transitions=0),
        }
        try:
            created = self._cluster.create(kinds.LEASE.kind, lease)
        except (errors.AlreadyExistsError, errors.ConflictError):
            return self._set_leading(False)
        except errors.ClusterError as exc:
            log.warning(
                "lease create failed lease=%s/%s error=%s", self._namespace, self._name, exc
            )
            return self._set_leading(False)
        self._observe(created, now)
        self._renewed_at = now
        log.info(
            "created lease lease=%s/%s identity=%s", self._namespace, self._name, self.identity
        )
        return self._set_leading(True)

    def _set_leading(self, leading: bool) -> bool:
        self._leading = leading
        return leading

    def release(self) -> None:
        """Give the lease up at once (holder cleared, 1 s duration) if we still hold it."""
        try:
            lease = self._cluster.get(kinds.LEASE.kind, namespace=self._namespace, name=self._name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            stamp = _codec.rfc3339(self._wall_clock(), micro=True)
            self._cluster.patch(
                kinds.LEASE.kind,
                namespace=self._namespace,
                name=self._name,
                patch={
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": stamp}
                },
                resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
            )
        except errors.ClusterError as exc:
            log.warning(
                "lease release failed lease=%s/%s error=%s", self._namespace, self._name, exc
            )
        finally:
            self._leading = False

    def _attempt_until(self, deadline: float) -> bool | None:
        """One `try_acquire_or_renew` on a thread of its own, waited on until `deadline` (our
        clock) at most: its answer, or None when it has not answered by then.

        NB: a call still blocked past the deadline is abandoned, not cancelled; if it succeeds
        later it only renews a lease this replica no longer acts on (the caller stops leading,
        and the process exits), which delays a successor by one lease duration at most.
        """
        answer: list[bool] = []
        done = threading.Event()

        def attempt() -> None:
            try:
                answer.append(self.try_acquire_or_renew())
            finally:
                done.set()

        threading.Thread(target=attempt, name="lease-renewal", daemon=True).start()
        done.wait(max(0.0, deadline - self._clock()))
        return answer[0] if answer else None

    def run(
        self,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        stop_event: threading.Event,
    ) -> None:
        """Block: wait to lead, call `on_started_leading`, renew until stopped or lost.

        Both callbacks run on this thread and must return promptly (start work elsewhere).
        `on_stopped_leading` runs exactly once if leading started, whether leadership was
        lost (no renewal succeeded within `renew_deadline_s` of the start of the last good
        one, even if a renewal call is still blocked, or another holder took over) or
        `stop_event` was set; in the latter case the lease is released first when
        `release_on_stop` is set, so a successor need not wait for expiry.
        """
        while not self.try_acquire_or_renew():
            jitter = random.uniform(0, _ACQUIRE_JITTER * self._retry_period_s)
            if stop_event.wait(self._retry_period_s + jitter):
                return
        on_started_leading()
        try:
            while not stop_event.wait(self._retry_period_s):
                deadline = self._renewed_at + self._renew_deadline_s
                renewed = self._attempt_until(deadline)
                if renewed:
                    continue
                if renewed is not None and self.observed_holder not in ("", self.identity):
                    log.warning(
                        "lost lease lease=%s/%s new_holder=%s",
                        self._namespace,
                        self._name,
                        self.observed_holder,
                    )
                    return
                if self._clock() >= deadline:
                    log.warning(
                        "lease renew deadline passed lease=%s/%s deadline_s=%s answered=%s",
                        self._namespace,
                        self._name,
                        self._renew_deadline_s,
                        renewed is not None,
                    )
                    return
            if self._release_on_stop:
                self.release()
        finally:
            self._leading = False
            on_stopped_leading()
