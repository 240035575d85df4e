"""Publishing this node's ResourceSlices: the only way the scheduler learns about our devices.

The pure planner (`core.slices`) says what the pool should look like and which writes get it
there; this module reads what exists and the Node's UID (every slice is owned by its Node, so
the garbage collector deletes a deleted node's slices), decides the pool generation, and runs
the writes through the core executor. The generation goes up exactly when the pool's content
changes, so the scheduler never mixes slices of two different pool versions.

Device taints an API server without gate DRADeviceTaints drops (silently: the default before
Kubernetes 1.36) are reported as an error naming the gate, as upstream's slice controller
reports a DroppedFieldsError, and left out of later writes while they stay the same: else every
resync would rewrite the pool, with a new generation, to no effect. Binding conditions
(KEP-5007) that a server without gate DRADeviceBindingConditions drops are handled alike: the
pool is published without them from then on (`binding_conditions_dropped`), so claims get no
binding conditions and prepares wait for what they need as they did before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapters.kube import retrying
from core import errors, executing, kinds, ports, slices

log = logging.getLogger(__name__)

# Builds the pool's slices for (pool generation, Node UID); see `SlicePublisher.publish_built`.
SliceBuilder = Callable[[int, str], Sequence[Mapping[str, Any]]]


class SlicePublisher:
    """Keeps one node's pool of `driver` ResourceSlices equal to the given devices."""

    def __init__(self, cluster: ports.Cluster, *, driver: str, node_name: str) -> None:
        self._cluster = cluster
        self._driver = driver
        self._node_name = node_name
        # The device taints the API server dropped at the last write that carried them (it
        # lacks gate DRADeviceTaints): while the desired taints are these, they are left out
        # rather than written again, with a new pool generation, at every resync.
        self._taints_dropped: dict[str, tuple[slices.TaintKey, ...]] | None = None
        # Whether the API server dropped the binding conditions of the last write that carried
        # them (it lacks gate DRADeviceBindingConditions): they are left out from then on.
        self._binding_dropped = False

    @property
    def binding_conditions_dropped(self) -> bool:
        """Whether the pool goes out without its binding conditions (the server drops them)."""
        return self._binding_dropped

    def existing(self) -> tuple[Mapping[str, Any], ...]:
        """This node's slices of this driver, sorted by name."""
        listed = self._cluster.list(kinds.RESOURCE_SLICE.kind)
        mine = [
            obj
            for obj in listed.items
            if (obj.get("spec") or {}).get("driver") == self._driver
            and (obj.get("spec") or {}).get("nodeName") == self._node_name
        ]
        return tuple(sorted(mine, key=lambda obj: str((obj.get("metadata") or {}).get("name"))))

    def publish(self, devices: Sequence[Mapping[str, Any]]) -> None:
        """Make the pool publish exactly `devices`, owned by this node's Node object; a no-op
        when it already does.

        Idempotent. Retries on resourceVersion conflicts (another writer, or a stale read)
        by re-listing; other cluster errors propagate for the caller's backoff.
        """
        self.publish_built(lambda generation, node_uid: slices.build_resource_slices(
            node_name=self._node_name, driver=self._driver, devices=devices,
            generation=generation, node_uid=node_uid,
        ))

    def publish_built(self, build: SliceBuilder) -> None:
        """As `publish`, for a pool whose slices the caller lays out (`build(generation, node
        UID)`): dynamic MIG's counter sets, and slices holding only counters, no `devices`."""
        node_uid = self.node_uid()
        retrying.retry_on_conflict(lambda: self._sync(build, node_uid=node_uid))

    def node_uid(self) -> str:
        """The UID of this node's Node object, read on every publish (a Node deleted and
        registered again under the same name has a new one); "" when there is no such Node.

        NB: with no Node the slices go out without an owner (an embedded deployment may have
        none); the next publish after the Node appears adds it.
        """
        try:
            node = self._cluster.get(kinds.NODE.kind, namespace="", name=self._node_name)
        except errors.NotFoundError:
            log.warning(
                "event=node_not_found node=%s driver=%s action=publishing_without_owner",
                self._node_name, self._driver,
            )
            return ""
        return str((node.get("metadata") or {}).get("uid") or "")

    def _sync(self, build: SliceBuilder, *, node_uid: str) -> None:
        existing = self.existing()
        generation = max((_generation(obj) for obj in existing), default=0)
        desired = build(generation, node_uid)
        wanted = {name: taints for name, taints in slices.device_taints(desired).items()
                  if taints}
        if not wanted:
            self._taints_dropped = None
        leave_out = bool(wanted) and wanted == self._taints_dropped
        binding = slices.devices_with_binding_conditions(desired)
        if not binding:
            self._binding_dropped = False
        desired = self._left_out(desired, taints=leave_out)
        actions = slices.plan_slice_sync(desired=desired, existing=existing)
        if not actions:
            return
        desired = self._left_out(build(generation + 1, node_uid), taints=leave_out)
        actions = slices.plan_slice_sync(desired=desired, existing=existing)
        log.info(
            "publishing resource slices node=%s driver=%s generation=%d slices=%d actions=%d",
            self._node_name,
            self._driver,
            generation + 1,
            len(desired),
            len(actions),
        )
        executing.execute_cluster_actions(self._cluster, actions)
        if not leave_out:
            self._check_taints_stored(desired, wanted)
        if binding and not self._binding_dropped:
            self._check_binding_conditions_stored(desired)

    def _left_out(
        self, desired: Sequence[Mapping[str, Any]], *, taints: bool
    ) -> Sequence[Mapping[str, Any]]:
        """`desired` without what the server is known to drop."""
        if taints:
            desired = slices.without_taints(desired)
        if self._binding_dropped:
            desired = slices.without_binding_conditions(desired)
        return desired

    def _check_binding_conditions_stored(self, desired: Sequence[Mapping[str, Any]]) -> None:
        """Fall back, once and with a warning, to a pool without binding conditions when the
        server dropped them: the scheduler then binds at once and prepares wait instead."""
        dropped = slices.dropped_binding_conditions(desired, self.existing())
        if not dropped:
            return
        self._binding_dropped = True
        log.warning(
            "event=resource_slice_binding_conditions_dropped node=%s driver=%s devices=%s "
            "action=publishing_without_binding_conditions hint=%r",
            self._node_name, self._driver, ",".join(dropped),
            "the API server stored these devices without their binding conditions: it lacks "
            "feature gate DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus; beta "
            "and on by default from Kubernetes 1.36); pods are bound at once and their "
            "prepares wait for the IMEX daemon, as without gate ComputeDomainBindingConditions",
        )

    def _check_taints_stored(
        self, desired: Sequence[Mapping[str, Any]],
        wanted: dict[str, tuple[slices.TaintKey, ...]],
    ) -> None:
        """Say so, as an error, when the API server dropped the taints just written, as
        upstream's slice controller does (DroppedFieldsError): the scheduler then allocates
        those devices as if healthy."""
        if not wanted:
            return
        dropped = slices.dropped_taints(desired, self.existing())
        self._taints_dropped = wanted if dropped else None
        if dropped:
            log.error(
                "event=resource_slice_taints_dropped node=%s driver=%s devices=%s "
                "hint=%r", self._node_name, self._driver, ",".join(dropped),
                "the API server stored these devices without their taints: it lacks feature "
                "gate DRADeviceTaints (alpha, off by default, before Kubernetes 1.36; turn it on "
                "in kube-apiserver and kube-scheduler); until then they are allocated as if "
                "healthy",
            )


def _generation(obj: Mapping[str, Any]) -> int:
    pool = (obj.get("spec") or {}).get("pool") or {}
    return int(pool.get("generation") or 0)
