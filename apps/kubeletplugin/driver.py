"""The kubelet plugin's orchestration: kubelet calls in, core planners decide, ports act.

`PluginDriver` implements `core.ports.KubeletPluginService` (what the gRPC servicer calls).
For each claim it gathers the observations the planner needs (the claim, the
ComputeDomains, the node's labels, the checkpoint), asks `core.preparing`, and runs the
returned steps in order under the node-wide checkpoint lock. It decides nothing itself.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

import tenacity

from apps.kubeletplugin import domains as plugin_domains
from apps.kubeletplugin import metrics as plugin_metrics
from core import checkpoint as checkpoint_codec
from core import decoding, errors, executing, kinds, models, names, ports, preparing

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# The ComputeDomains a prepare may look up, by UID (a cache view, or a fresh list).
DomainsView = Callable[[], Mapping[names.ComputeDomainUID, models.ComputeDomain]]
# Returns None when the host IMEX daemon is ready, else the error to report.
HostIMEXProbe = Callable[[], errors.RetryableError | None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginPorts:
    cluster: ports.Cluster
    checkpoints: ports.CheckpointStore
    cdi: ports.CDIStore


class PluginDriver:
    """Prepares and unprepares claims on one node; safe to call from many gRPC threads."""

    def __init__(
        self,
        *,
        ports: PluginPorts,
        node: models.NodeFacts,
        config: models.DriverConfig,
        clock: Clock = time.time,
        metrics: plugin_metrics.PluginMetrics | None = None,
        host_imex_probe: HostIMEXProbe | None = None,
        retry_budget_s: float = 30.0,
        domains: DomainsView | None = None,
    ) -> None:
        self._ports = ports
        self._node = node
        self._config = config
        self._clock = clock
        self._metrics = metrics
        self._host_imex_probe = host_imex_probe
        self._retry_budget_s = retry_budget_s
        self._domains = domains or (lambda: plugin_domains.list_domains(ports.cluster))
        self._recording = _RecordingCheckpointStore(ports.checkpoints)
        self._written: _Written | None = None

    # ------------------------------------------------------------ startup

    def load_checkpoint(self) -> models.Checkpoint:
        """Read the checkpoint; a corrupt one is moved aside and rebuilt from CDI files.

        Also applies the boot-ID rule (a reboot drops prepared state) and expires old
        tombstones. Call with the checkpoint lock held.
        """
        raw = self._ports.checkpoints.read()
        if raw is None:
            current = checkpoint_codec.empty(boot_id=self._node.boot_id, config=self._config)
        else:
            try:
                current = self._decode(raw)
            except errors.CheckpointCorruptError as exc:
                current = self._recover_corrupt_checkpoint(exc)
        fresh = checkpoint_codec.after_boot(current, boot_id=self._node.boot_id)
        if fresh.entries.keys() != current.entries.keys():
            log.warning(
                "event=node_rebooted node=%s dropped_claims=%d",
                self._node.node_name, len(current.entries) - len(fresh.entries),
            )
        return checkpoint_codec.expire_tombstones(fresh, now=self._clock())

    def _decode(self, raw: bytes) -> models.Checkpoint:
        # NB: we are the only writer (under the node lock), so bytes equal to what we last
        # wrote are that checkpoint: skip re-parsing it (O(claims) per prepare otherwise).
        if self._written is not None and self._written.data == raw:
            return self._written.checkpoint
        return checkpoint_codec.decode(raw)

    def _recover_corrupt_checkpoint(
        self, exc: errors.CheckpointCorruptError
    ) -> models.Checkpoint:
        moved_to = self._ports.checkpoints.quarantine(suffix=f"{int(self._clock())}")
        specs = {
            uid: spec
            for uid in sorted(self._ports.cdi.claim_uids())
            if (spec := self._ports.cdi.read(uid)) is not None
        }
        rebuilt = checkpoint_codec.rebuild_from_cdi(
            boot_id=self._node.boot_id, config=self._config, claim_specs=specs, now=self._clock()
        )
        self._ports.checkpoints.write(checkpoint_codec.encode(rebuilt))
        log.error(
            "event=checkpoint_corrupt node=%s moved_to=%s rebuilt_claims=%d reason=%r",
            self._node.node_name, moved_to, len(rebuilt.entries), exc.message,
        )
        self._ports.cluster.emit_event(
            involved=models.ObjectRef(kind="Node", name=self._node.node_name, api_version="v1"),
            reason="CheckpointCorrupt",
            message=(
                f"checkpoint was corrupt and moved to {moved_to}; prepared state rebuilt "
                f"from {len(rebuilt.entries)} CDI spec file(s)"
            ),
        )
        return rebuilt

    def recover(self) -> models.Checkpoint:
        """Startup pass: load (and repair) the checkpoint and persist the result."""
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            self._ports.checkpoints.write(checkpoint_codec.encode(current))
        self._publish_prepared_count(current)
        return current

    # ------------------------------------------------------------ kubelet calls

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...]
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return self._per_claim("prepare", claims, self._prepare_with_retries)

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...]
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return self._per_claim("unprepare", claims, self._unprepare_one)

    def _per_claim(
        self,
        operation: str,
        claims: tuple[models.ClaimRef, ...],
        handle: Callable[[models.ClaimRef], tuple[models.PreparedDevice, ...]],
    ) -> dict[names.ClaimUID, models.ClaimResult]:
        started = time.perf_counter()
        results: dict[names.ClaimUID, models.ClaimResult] = {}
        for ref in claims:
            try:
                results[ref.uid] = models.ClaimResult(devices=handle(ref))
            except errors.DriverError as exc:
                kind = "permanent" if isinstance(exc, errors.PermanentError) else "retryable"
                log.warning(
                    "event=%s_failed claim=%s/%s uid=%s kind=%s error=%r",
                    operation, ref.namespace, ref.name, ref.uid, kind, exc.message,
                )
                self._count_error(operation, kind)
                results[ref.uid] = models.ClaimResult(error=exc.message)
        self._observe_call(operation, time.perf_counter() - started)
        return results

    def _prepare_with_retries(self, ref: models.ClaimRef) -> tuple[models.PreparedDevice, ...]:
        # Transient conditions (daemon not ready yet, channel still held) may clear within the
        # kubelet's 45 s budget; permanent ones are reported at once.
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(errors.RetryableError),
            stop=tenacity.stop_after_delay(self._retry_budget_s),
            wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._prepare_one(ref)
        raise AssertionError("unreachable: tenacity reraises")

    def _prepare_one(self, ref: models.ClaimRef) -> tuple[models.PreparedDevice, ...]:
        claim = self._fetch_claim(ref)
        domains = self._domains()
        node_labels = self._fetch_node_labels()
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            outcome = preparing.plan_prepare(
                claim,
                checkpoint=current,
                node=self._node,
                config=self._config,
                domains=domains,
                node_labels=node_labels,
                now=self._clock(),
            )
            if outcome.error is None and self._host_imex_probe is not None and any(
                isinstance(step, models.WriteCDISpec) for step in outcome.steps
            ):
                not_ready = self._host_imex_probe()
                if not_ready is not None:
                    raise not_ready
            self._run(outcome.steps)
        self._publish_prepared_count(outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info(
            "event=claim_prepared claim=%s/%s uid=%s devices=%s",
            ref.namespace, ref.name, ref.uid,
            ",".join(d.device_name for d in outcome.devices),
        )
        return outcome.devices

    def _unprepare_one(self, ref: models.ClaimRef) -> tuple[models.PreparedDevice, ...]:
        with self._ports.checkpoints.locked():
            current = self.load_checkpoint()
            outcome = preparing.plan_unprepare(ref, checkpoint=current, now=self._clock())
            self._run(outcome.steps)
        self._publish_prepared_count(outcome.checkpoint)
        if outcome.error is not None:
            self._report(ref, outcome.error)
        log.info("event=claim_unprepared claim=%s/%s uid=%s", ref.namespace, ref.name, ref.uid)
        return ()

    # ------------------------------------------------------------ observations

    def _fetch_claim(self, ref: models.ClaimRef) -> models.ResourceClaim:
        try:
            raw = self._ports.cluster.get(
                kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name
            )
        except errors.NotFoundError:
            raise errors.RetryableError(
                f"ResourceClaim {ref.namespace}/{ref.name} not found in the API server yet"
            ) from None
        claim = decoding.resource_claim_from_k8s(raw)
        if claim.uid != ref.uid:
            raise errors.PermanentError(
                f"ResourceClaim {ref.namespace}/{ref.name} has uid {claim.uid}, but the kubelet "
                f"asked for uid {ref.uid}: the claim was deleted and recreated; delete the pod"
            )
        return claim

    def _fetch_node_labels(self) -> Mapping[str, str]:
        if self._config.host_managed:
            return {}  # host-managed never labels nodes
        try:
            node = self._ports.cluster.get(kinds.NODE.kind, namespace="", name=self._node.node_name)
        except errors.NotFoundError:
            return {}
        labels = node.get("metadata", {}).get("labels") or {}
        return dict(labels) if isinstance(labels, collections.abc.Mapping) else {}

    # ------------------------------------------------------------ effects

    def _run(self, steps: tuple[models.PluginAction, ...]) -> None:
        self._written = None
        executing.execute_plugin_steps(
            steps,
            checkpoints=self._recording,
            cdi=self._ports.cdi,
            cluster=self._ports.cluster,
        )
        written = [s.checkpoint for s in steps if isinstance(s, models.WriteCheckpoint)]
        if written and self._recording.last is not None:
            self._written = _Written(data=self._recording.last, checkpoint=written[-1])

    def _report(self, ref: models.ClaimRef, error: Exception) -> None:
        if isinstance(error, errors.PermanentError):
            self._ports.cluster.emit_event(
                involved=models.ObjectRef(
                    kind=kinds.RESOURCE_CLAIM.kind,
                    name=ref.name,
                    namespace=ref.namespace,
                    uid=ref.uid,
                    api_version=kinds.RESOURCE_CLAIM.api_version,
                ),
                reason="PrepareFailed",
                message=str(error),
            )
        raise error

    def _publish_prepared_count(self, current: models.Checkpoint) -> None:
        if self._metrics is None:
            return
        count = sum(
            len(entry.devices)
            for entry in current.entries.values()
            if entry.state is models.ClaimState.PREPARE_COMPLETED
        )
        self._metrics.set_prepared_devices(count)

    def _count_error(self, operation: str, kind: str) -> None:
        if self._metrics is not None:
            self._metrics.count_error(operation=operation, kind=kind)

    def _observe_call(self, operation: str, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.observe_call(operation=operation, seconds=seconds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Written:
    data: bytes
    checkpoint: models.Checkpoint


class _RecordingCheckpointStore:
    """The checkpoint port, remembering the last bytes written through it."""

    def __init__(self, inner: ports.CheckpointStore) -> None:
        self._inner = inner
        self.last: bytes | None = None

    def read(self) -> bytes | None:
        return self._inner.read()

    def write(self, data: bytes) -> None:
        self.last = None
        self._inner.write(data)
        self.last = data

    def quarantine(self, *, suffix: str) -> str:
        return self._inner.quarantine(suffix=suffix)

    def locked(self) -> contextlib.AbstractContextManager[None]:
        return self._inner.locked()
