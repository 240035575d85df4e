"""The embedded cluster: an in-process stand-in for the Kubernetes API server (DESIGN §7).

`InMemoryCluster` implements `core.ports.Cluster` with the API-server behaviour the driver
depends on, so the controller and plugin run unchanged with no cluster: uids, a global
resourceVersion, generation, JSON merge patches with resourceVersion preconditions, the status
subresource, finalizers and deletionTimestamp, background garbage collection of dependents,
watches replayed from a bounded history (410 Gone when too old), whole-object updates (PUT),
the immutable `spec` of ResourceClaims and their templates, and core/v1 Events.

NB: every object handed out is a fresh copy; stored objects are replaced, never mutated, so the
watch history can share them.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import datetime
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from adapters.memory import _codec
from core import errors, kinds, mergepatch, models, ports

log = logging.getLogger(__name__)

#: Kinds served with a `status` subresource: the main resource cannot change `.status`.
STATUS_SUBRESOURCE_KINDS = frozenset(
    {
        kinds.COMPUTE_DOMAIN.kind,
        kinds.RESOURCE_CLAIM.kind,
        kinds.POD.kind,
        kinds.NODE.kind,
        kinds.DAEMON_SET.kind,
        kinds.DEPLOYMENT.kind,
    }
)
#: Kinds whose create strategy discards a client-supplied status (Node keeps it, as kubelets do).
_STATUS_CLEARED_ON_CREATE = STATUS_SUBRESOURCE_KINDS - {kinds.NODE.kind}
#: Kinds whose `spec` the API server's validation refuses to change after create.
IMMUTABLE_SPEC_KINDS = frozenset({kinds.RESOURCE_CLAIM.kind, kinds.RESOURCE_CLAIM_TEMPLATE.kind})
_GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FIRST_RESOURCE_VERSION = 100
DEFAULT_HISTORY_SIZE = 10_000
# ResourceSlice device fields of gate DRADeviceBindingConditions (dropped here, see
# `_drop_disabled_fields`).
_BINDING_FIELDS = ("bindingConditions", "bindingFailureConditions", "bindsToNode")
#: The Kubernetes version the cluster answers for (GET /version) unless told another.
DEFAULT_SERVER_VERSION = "v1.35.0"

_Key = tuple[str, str, str]  # kind, namespace, name


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Recorded:
    resource_version: int
    kind: str
    namespace: str
    type: ports.WatchEventType
    obj: Mapping[str, Any]  # shared with storage; never mutated
    # MODIFIED: the labels before this change (a selector watch tells entering and leaving).
    previous_labels: Mapping[str, str] | None = None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _as_selected(
    rec: _Recorded, selector: ports.LabelSelector | None
) -> ports.WatchEventType | None:
    """How a watch with `selector` reports `rec` (None: not at all), as the API server does."""
    if not selector:
        return rec.type
    now = _codec.matches_labels(_labels(rec.obj), selector)
    if rec.type is not ports.WatchEventType.MODIFIED:
        return rec.type if now else None
    before = _codec.matches_labels(rec.previous_labels or {}, selector)
    if now:
        return rec.type if before else ports.WatchEventType.ADDED
    return ports.WatchEventType.DELETED if before else None


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class InMemoryCluster:
    """A thread-safe, in-process Kubernetes API server for the kinds in `core.kinds`.

    Unknown kinds are accepted and treated as namespaced. All methods may be called from any
    thread; `watch` iterators block on a condition variable until events arrive or time runs out.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], datetime.datetime] = _utc_now,
        history_size: int = DEFAULT_HISTORY_SIZE,
        uid_factory: Callable[[], str] | None = None,
        seed: int | None = None,
        server_version: str = DEFAULT_SERVER_VERSION,
        device_taints: bool = True,
        list_type_attributes: bool = False,
    ) -> None:
        """`device_taints`: whether the server keeps ResourceSlice `devices[].taints`, as
        kube-apiserver does with gate DRADeviceTaints (off by default in 1.34 and 1.35: it
        drops them without a word). `list_type_attributes`: whether it keeps list-valued
        device attributes (`ints`, `strings`, `bools`, `versions`), as kube-apiserver does
        with its gate DRAListTypeAttributes (alpha from 1.36, off by default; before 1.36 no
        such fields): otherwise they are dropped and the attribute, left without a value,
        refused, as the real server refuses it."""
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self._clock = clock
        self._server_version = server_version
        self._device_taints = device_taints
        self._list_type_attributes = list_type_attributes
        self._uid_factory = uid_factory or (lambda: str(uuid.uuid4()))
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # per kind, so a list or watch of one kind never scans the others
        self._objects: dict[str, dict[_Key, Mapping[str, Any]]] = collections.defaultdict(dict)
        self._by_uid: dict[str, _Key] = {}
        self._dependents: dict[str, set[_Key]] = collections.defaultdict(set)
        self._history: collections.deque[_Recorded] = collections.deque(maxlen=history_size)
        self._resource_version = _FIRST_RESOURCE_VERSION
        self._oldest_kept = _FIRST_RESOURCE_VERSION  # events after this one are all in history
        self._conflicts_to_inject = 0
        self._event_names: dict[tuple[str, ...], _Key] = {}
        self._event_counter = 0
        self._closed = False
        # Bumped by `compact`: a watch opened before it ends with GoneError.
        self._compactions = 0

    def server_version(self) -> str:
        """`core.ports.ServerVersion`: the Kubernetes version this cluster stands in for."""
        return self._server_version

    def _check_slice_layout(self, kind: str, obj: Mapping[str, Any]) -> None:
        """From Kubernetes 1.35 a ResourceSlice holds devices or shared counters, not both (as
        the real API server's validation refuses them)."""
        if kind != kinds.RESOURCE_SLICE.kind:
            return
        spec = obj.get("spec") or {}
        self._check_taint_effects(obj)
        self._check_attribute_values(obj)
        if _minor_version(self._server_version) < 35:
            return
        if spec.get("devices") and spec.get("sharedCounters"):
            name = (obj.get("metadata") or {}).get("name")
            raise errors.ClusterError(
                f"ResourceSlice {name} is invalid: spec.sharedCounters: Invalid value: "
                f"may not be set together with spec.devices (Kubernetes "
                f"{self._server_version}): publish the counter sets in a slice of their own"
            )

    def _check_taint_effects(self, obj: Mapping[str, Any]) -> None:
        """Device taint effects the real API server of this version accepts (`None` from
        Kubernetes 1.35)."""
        allowed = {"NoSchedule", "NoExecute"}
        if _minor_version(self._server_version) >= 35:
            allowed.add("None")
        for index, device in enumerate((obj.get("spec") or {}).get("devices") or ()):
            for taint in device.get("taints") or ():
                if taint.get("effect") not in allowed:
                    name = (obj.get("metadata") or {}).get("name")
                    raise errors.ClusterError(
                        f"ResourceSlice {name} is invalid: spec.devices[{index}].taints: "
                        f"Unsupported value: {taint.get('effect')!r}: supported values: "
                        f"{', '.join(sorted(allowed))} (Kubernetes {self._server_version})")

    def _check_attribute_values(self, obj: Mapping[str, Any]) -> None:
        """Each device attribute holds exactly one value (kube-apiserver's validation)."""
        allowed = _SCALAR_ATTRIBUTE_FIELDS + (
            _LIST_ATTRIBUTE_FIELDS if self._lists_kept() else ()
        )
        for index, device in enumerate((obj.get("spec") or {}).get("devices") or ()):
            for key, value in sorted((device.get("attributes") or {}).items()):
                held = [f for f in allowed if isinstance(value, Mapping) and f in value]
                if len(held) != 1:
                    name = (obj.get("metadata") or {}).get("name")
                    raise errors.ClusterError(
                        f"ResourceSlice {name} is invalid: spec.devices[{index}].attributes"
                        f"[{key}]: Invalid value: exactly one value must be specified "
                        f"(Kubernetes {self._server_version}"
                        f"{'' if self._lists_kept() else ', list values not kept'})")

    def _lists_kept(self) -> bool:
        return self._list_type_attributes and _minor_version(self._server_version) >= 36

    def _drop_disabled_fields(self, kind: str, obj: dict[str, Any]) -> None:
        """What kube-apiserver drops (in place, before its validation) for a gate it lacks:
        ResourceSlice `devices[].taints` without DRADeviceTaints, list-valued attributes
        without DRAListTypeAttributes (or before 1.36, where they are unknown fields), and always
        the binding condition fields (KEP-5007) of slices and of claims' allocation results:
        this cluster stands in for one without gate DRADeviceBindingConditions, since its
        scheduler does not wait for them.

        NB: `timeAdded` is not stamped as the real server does: the tests of this tier
        compare taints exactly; the control-plane tier runs the real one."""
        if kind == kinds.RESOURCE_CLAIM.kind:
            allocation = (obj.get("status") or {}).get("allocation") or {}
            results = (allocation.get("devices") or {}).get("results")
            for result in results if isinstance(results, list) else ():
                if isinstance(result, dict):
                    for field in _BINDING_FIELDS:
                        result.pop(field, None)
        if kind != kinds.RESOURCE_SLICE.kind:
            return
        devices = (obj.get("spec") or {}).get("devices")
        for device in devices if isinstance(devices, list) else ():
            if not isinstance(device, dict):
                continue
            for field in _BINDING_FIELDS:
                device.pop(field, None)
            if not self._device_taints:
                device.pop("taints", None)
            if self._lists_kept():
                continue
            for value in (device.get("attributes") or {}).values():
                for field in _LIST_ATTRIBUTE_FIELDS:
                    if isinstance(value, dict):
                        value.pop(field, None)

    # -- test and demo hooks -------------------------------------------------------------

    def set_conflict_injection(self, count: int) -> None:
        """Make the next `count` patches fail with ConflictError (to exercise retry paths)."""
        with self._lock:
            self._conflicts_to_inject = max(0, count)

    def compact(self) -> None:
        """Forget the change history so far, as an API server does whose watch history is gone
        (etcd compacted, its watch cache started afresh): every open watch ends with GoneError
        (410) and so does a watch from an older resourceVersion, so clients list again. A list,
        and a watch from the list's resourceVersion, work as before."""
        with self._changed:
            self._history.clear()
            self._oldest_kept = self._resource_version
            self._compactions += 1
            self._changed.notify_all()

    def close(self) -> None:
        """End every open watch (they return normally); later writes still work."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out."""
        with self._lock:
            return str(self._resource_version)

    # -- ports.Cluster ---------------------------------------------------------------------

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        with self._lock:
            key = self._key(kind, namespace, name)
            stored = self._lookup(key)
            if stored is None:
                raise self._not_found(key)
            result: dict[str, Any] = mergepatch.copy_json(stored)
            return result

    def list(
        self, kind: str, *, namespace: str = "", label_selector: ports.LabelSelector | None = None
    ) -> ports.ListResult:
        with self._lock:
            items = tuple(
                mergepatch.copy_json(obj)
                for key, obj in sorted(self._objects[kind].items())
                if self._in_scope(key, kind, namespace)
                and _codec.matches_labels(obj.get("metadata", {}).get("labels"), label_selector)
            )
            return ports.ListResult(items=items, resource_version=str(self._resource_version))

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: ports.LabelSelector | None = None,
    ) -> Iterator[ports.WatchEvent]:
        """Events of `kind` after `resource_version`, in order, until `timeout_s` passes.

        `""` or `"0"` start with a synthetic ADDED per existing object, as the API server does.
        Raises GoneError (here, or from the iterator if it falls behind the history) when the
        version is older than the kept history: relist and watch again. With `label_selector`,
        as the API server: only matching objects, ADDED when one starts matching, DELETED when
        one stops.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            initial: tuple[ports.WatchEvent, ...] = ()
            if resource_version in ("", "0"):
                cursor = self._resource_version
                initial = tuple(
                    ports.WatchEvent(type=ports.WatchEventType.ADDED, obj=mergepatch.copy_json(obj))
                    for key, obj in sorted(self._objects[kind].items())
                    if self._in_scope(key, kind, namespace)
                    and _codec.matches_labels(_labels(obj), label_selector)
                )
            else:
                cursor = self._parse_resource_version(resource_version)
                self._check_not_expired(cursor)
            epoch = self._compactions
        return self._stream(
            kind, namespace, cursor, deadline, initial, label_selector or None, epoch=epoch
        )

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        with self._lock:
            stored = self._create_locked(kind, obj)
            result: dict[str, Any] = mergepatch.copy_json(stored)
            return result

    def patch(
        self,
        kind: str,
        *,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str = "",
        resource_version: str = "",
    ) -> Mapping[str, Any]:
        with self._lock:
            if self._conflicts_to_inject > 0:
                self._conflicts_to_inject -= 1
                raise errors.ConflictError(
                    f"{kind} {namespace}/{name}: the object has been modified (injected conflict);"
                    " read it again and retry"
                )
            key = self._key(kind, namespace, name)
            current = self._lookup(key)
            if current is None:
                raise self._not_found(key)
            expected = resource_version or str(
                (patch.get("metadata") or {}).get("resourceVersion") or ""
            )
            return self._update_locked(
                key, current, mergepatch.merge_patch(current, patch),
                subresource=subresource, expected_version=expected,
            )

    def update(
        self, kind: str, *, namespace: str, name: str, obj: Mapping[str, Any],
        subresource: str = "",
    ) -> Mapping[str, Any]:
        """Replace the object with `obj` (an HTTP PUT), under the same rules as `patch`.

        `obj.metadata.resourceVersion`, when set, is a precondition (ConflictError), as the API
        server checks it; without it the update is unconditional. Identity fields keep their
        stored values; `subresource="status"` replaces only `.status`, and the main resource
        never changes the status of a kind with a status subresource.
        """
        with self._lock:
            key = self._key(kind, namespace, name)
            current = self._lookup(key)
            if current is None:
                raise self._not_found(key)
            replacement: dict[str, Any] = mergepatch.copy_json(obj)
            for field in ("apiVersion", "kind"):
                if field in current:
                    replacement.setdefault(field, current[field])
            expected = str((replacement.get("metadata") or {}).get("resourceVersion") or "")
            return self._update_locked(
                key, current, replacement, subresource=subresource, expected_version=expected
            )

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        with self._lock:
            key = self._key(kind, namespace, name)
            if self._lookup(key) is None:
                raise self._not_found(key)
            self._delete_locked(key)

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        """Record a core/v1 Event; repeats of the same event bump `count` and `lastTimestamp`."""
        event_type = "Warning" if warning else "Normal"
        namespace = involved.namespace or "default"
        identity = (
            involved.kind, namespace, involved.name, involved.uid, reason, message, event_type,
        )
        with self._lock:
            now = _codec.format_timestamp(self._clock())
            existing_key = self._event_names.get(identity)
            existing = self._lookup(existing_key) if existing_key else None
            if existing_key is not None and existing is not None:
                bumped = mergepatch.merge_patch(
                    existing, {"count": int(existing.get("count", 1)) + 1, "lastTimestamp": now}
                )
                self._store_locked(existing_key, bumped, ports.WatchEventType.MODIFIED)
                return
            self._event_counter += 1
            api_version = involved.api_version
            if not api_version and involved.kind in kinds.BY_KIND:
                api_version = kinds.by_kind(involved.kind).api_version
            involved_object = {
                "kind": involved.kind,
                "name": involved.name,
                "namespace": involved.namespace,
                "uid": involved.uid,
                "apiVersion": api_version,
            }
            stored = self._create_locked(
                kinds.EVENT.kind,
                {
                    "metadata": {
                        "name": f"{involved.name}.{self._event_counter:016x}",
                        "namespace": namespace,
                    },
                    "involvedObject": {k: v for k, v in involved_object.items() if v},
                    "reason": reason,
                    "message": message,
                    "type": event_type,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": "compute-domain-driver"},
                    "reportingComponent": "compute-domain-driver",
                },
            )
            meta = stored["metadata"]
            self._event_names[identity] = (kinds.EVENT.kind, meta["namespace"], meta["name"])
        log.info(
            "event kind=%s name=%s/%s type=%s reason=%s message=%s",
            involved.kind, namespace, involved.name, event_type, reason, message,
        )

    # -- internals (call with the lock held) -------------------------------------------------

    def _update_locked(
        self, key: _Key, current: Mapping[str, Any], merged: dict[str, Any], *,
        subresource: str, expected_version: str,
    ) -> Mapping[str, Any]:
        """Store `merged` (the object as a patch or an update would leave it) over `current`."""
        kind = key[0]
        current_meta = current["metadata"]
        if expected_version and expected_version != current_meta["resourceVersion"]:
            raise errors.ConflictError(
                f"{kind} {self._describe(key)}: the object has been modified (resourceVersion"
                f" {current_meta['resourceVersion']}, expected {expected_version}); read it"
                " again and retry"
            )
        updated = self._apply_subresource(key, current, merged, subresource)
        meta = updated.setdefault("metadata", {})
        for field in (
            "name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
            "deletionGracePeriodSeconds", "generation", "resourceVersion",
        ):
            if field in current_meta:
                meta[field] = current_meta[field]
            else:
                meta.pop(field, None)
        deleting = "deletionTimestamp" in current_meta
        if deleting and not set(meta.get("finalizers") or ()) <= set(
            current_meta.get("finalizers") or ()
        ):
            raise errors.ClusterError(
                f"{kind} {self._describe(key)} is being deleted: no new finalizers can be"
                " added; remove the finalizer from the patch"
            )
        self._drop_disabled_fields(kind, updated)
        self._check_slice_layout(kind, updated)
        if kind in IMMUTABLE_SPEC_KINDS and updated.get("spec") != current.get("spec"):
            raise errors.ClusterError(
                f"{kind} {self._describe(key)} is invalid: spec: Invalid value: field is"
                f" immutable; delete the {kind} and create it anew to change its spec"
            )
        if _codec.spec_part(updated) != _codec.spec_part(current):
            meta["generation"] = int(current_meta.get("generation", 0)) + 1
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if updated == current:
            unchanged: dict[str, Any] = mergepatch.copy_json(current)
            return unchanged
        if deleting and not meta.get("finalizers"):
            removed = self._remove_locked(key, last_state=updated)
            return mergepatch.copy_json(removed)  # type: ignore[no-any-return]
        stored = self._store_locked(key, updated, ports.WatchEventType.MODIFIED)
        result: dict[str, Any] = mergepatch.copy_json(stored)
        return result

    def _lookup(self, key: _Key) -> Mapping[str, Any] | None:
        return self._objects[key[0]].get(key)

    def _key(self, kind: str, namespace: str, name: str) -> _Key:
        return (kind, namespace if self._namespaced(kind) else "", name)

    @staticmethod
    def _namespaced(kind: str) -> bool:
        known = kinds.BY_KIND.get(kind)
        return known.namespaced if known else True

    @staticmethod
    def _in_scope(key: _Key, kind: str, namespace: str) -> bool:
        return key[0] == kind and (not namespace or key[1] == namespace or not key[1])

    @staticmethod
    def _describe(key: _Key) -> str:
        return f"{key[1]}/{key[2]}" if key[1] else key[2]

    def _not_found(self, key: _Key) -> errors.NotFoundError:
        where = f" in namespace {key[1]!r}" if key[1] else ""
        return errors.NotFoundError(f"{key[0]} {key[2]!r} not found{where}")

    def _parse_resource_version(self, resource_version: str) -> int:
        try:
            return int(resource_version)
        except ValueError:
            raise errors.ClusterError(
                f"resourceVersion {resource_version!r} is not valid: pass the value from a list"
                " or a previous watch event"
            ) from None

    def _check_not_expired(self, cursor: int) -> None:
        if cursor < self._oldest_kept:
            raise errors.GoneError(
                f"resourceVersion {cursor} is too old (history starts after"
                f" {self._oldest_kept}): list again and watch from the list's resourceVersion"
            )

    def _stream(
        self,
        kind: str,
        namespace: str,
        cursor: int,
        deadline: float,
        initial: tuple[ports.WatchEvent, ...],
        selector: ports.LabelSelector | None = None,
        *,
        epoch: int,
    ) -> Iterator[ports.WatchEvent]:
        yield from initial
        while True:
            with self._changed:
                while True:
                    if self._compactions != epoch:
                        raise errors.GoneError(
                            f"the history this watch of {kind} followed was compacted: list "
                            "again and watch from the list's resourceVersion"
                        )
                    self._check_not_expired(cursor)
                    newer = self._recorded_after(cursor)
                    if newer:
                        cursor = newer[-1].resource_version
                        batch = [
                            ports.WatchEvent(type=seen, obj=mergepatch.copy_json(rec.obj))
                            for rec in newer
                            if self._in_scope((rec.kind, rec.namespace, ""), kind, namespace)
                            and (seen := _as_selected(rec, selector)) is not None
                        ]
                        if batch:
                            break
                        continue
                    remaining = deadline - time.monotonic()
                    if self._closed or remaining <= 0:
                        return
                    self._changed.wait(remaining)
            yield from batch

    def _recorded_after(self, cursor: int) -> builtins.list[_Recorded]:
        newer: builtins.list[_Recorded] = []
        for rec in reversed(self._history):
            if rec.resource_version <= cursor:
                break
            newer.append(rec)
        newer.reverse()
        return newer

    def _create_locked(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        new: dict[str, Any] = mergepatch.copy_json(obj)
        meta = new.setdefault("metadata", {})
        if meta.get("resourceVersion"):
            raise errors.ClusterError(
                f"{kind}: resourceVersion must not be set on an object to be created; drop"
                " metadata.resourceVersion (and uid) from the object"
            )
        known = kinds.BY_KIND.get(kind)
        if known is not None:
            new.setdefault("apiVersion", known.api_version)
        new.setdefault("kind", kind)
        if self._namespaced(kind):
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        namespace = str(meta.get("namespace", ""))
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.ClusterError(
                    f"{kind}: metadata.name or metadata.generateName is required"
                )
            meta["name"] = self._generated_name(kind, namespace, str(prefix))
        key = self._key(kind, namespace, str(meta["name"]))
        self._drop_disabled_fields(kind, new)
        self._check_slice_layout(kind, new)
        if self._lookup(key) is not None:
            raise errors.AlreadyExistsError(
                f"{kind} {self._describe(key)} already exists; choose another name or delete it"
                " first"
            )
        meta["uid"] = self._uid_factory()
        meta["creationTimestamp"] = _codec.format_timestamp(self._clock())
        meta["generation"] = 1
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        if kind in _STATUS_CLEARED_ON_CREATE:
            new.pop("status", None)
            if kind == kinds.POD.kind:
                new["status"] = {"phase": "Pending"}
        return self._store_locked(key, new, ports.WatchEventType.ADDED)

    def _generated_name(self, kind: str, namespace: str, prefix: str) -> str:
        while True:
            suffix = "".join(self._random.choice(_GENERATE_NAME_ALPHABET) for _ in range(5))
            candidate = f"{prefix}{suffix}"
            if self._lookup(self._key(kind, namespace, candidate)) is None:
                return candidate

    def _apply_subresource(
        self, key: _Key, current: Mapping[str, Any], merged: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        kind = key[0]
        if subresource == "status":
            if kind not in STATUS_SUBRESOURCE_KINDS:
                raise errors.NotFoundError(f"{kind} has no status subresource; patch the object")
            updated: dict[str, Any] = mergepatch.copy_json(current)
            if "status" in merged:
                updated["status"] = merged["status"]
            else:
                updated.pop("status", None)
            return updated
        if subresource:
            raise errors.NotFoundError(f"{kind} has no {subresource!r} subresource")
        if kind in STATUS_SUBRESOURCE_KINDS:
            if "status" in current:
                merged["status"] = mergepatch.copy_json(current["status"])
            else:
                merged.pop("status", None)
        return merged

    def _store_locked(
        self, key: _Key, obj: dict[str, Any], event_type: ports.WatchEventType
    ) -> Mapping[str, Any]:
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        previous = self._lookup(key)
        if previous is not None:
            for owner in _codec.owner_uids(previous):
                self._dependents[owner].discard(key)
        self._objects[key[0]][key] = obj
        self._by_uid[obj["metadata"]["uid"]] = key
        for owner in _codec.owner_uids(obj):
            self._dependents[owner].add(key)
        self._record(key, event_type, obj,
                     previous_labels=_labels(previous) if previous is not None else None)
        return obj

    def _record(
        self, key: _Key, event_type: ports.WatchEventType, obj: Mapping[str, Any],
        *, previous_labels: Mapping[str, str] | None = None,
    ) -> None:
        history = self._history
        if history.maxlen is not None and len(history) == history.maxlen:
            self._oldest_kept = history[0].resource_version
        history.append(
            _Recorded(
                resource_version=self._resource_version,
                kind=key[0],
                namespace=key[1],
                type=event_type,
                obj=obj,
                previous_labels=previous_labels,
            )
        )
        self._changed.notify_all()

    def _delete_locked(self, key: _Key) -> None:
        current = self._objects[key[0]][key]
        meta = current["metadata"]
        if meta.get("finalizers"):
            if "deletionTimestamp" in meta:
                return
            marked: dict[str, Any] = mergepatch.copy_json(current)
            marked["metadata"]["deletionTimestamp"] = _codec.format_timestamp(self._clock())
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["metadata"]["generation"] = int(meta.get("generation", 0)) + 1
            self._store_locked(key, marked, ports.WatchEventType.MODIFIED)
            return
        self._remove_locked(key, last_state=current)

    def _remove_locked(self, key: _Key, *, last_state: Mapping[str, Any]) -> Mapping[str, Any]:
        final: dict[str, Any] = mergepatch.copy_json(last_state)
        self._resource_version += 1
        final["metadata"]["resourceVersion"] = str(self._resource_version)
        del self._objects[key[0]][key]
        uid = final["metadata"]["uid"]
        self._by_uid.pop(uid, None)
        for owner in _codec.owner_uids(final):
            self._dependents[owner].discard(key)
        self._record(key, ports.WatchEventType.DELETED, final)
        self._collect_dependents(uid)
        return final

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background garbage collection: delete dependents whose owners are all gone."""
        for dependent in sorted(self._dependents.pop(owner_uid, set())):
            obj = self._lookup(dependent)
            if obj is None:
                continue
            if any(uid in self._by_uid for uid in _codec.owner_uids(obj)):
                continue
            log.debug("garbage-collect kind=%s name=%s", dependent[0], self._describe(dependent))
            self._delete_locked(dependent)


# The value fields of a ResourceSlice device attribute (`resource.k8s.io/v1`).
_SCALAR_ATTRIBUTE_FIELDS: Final = ("string", "int", "bool", "version")
_LIST_ATTRIBUTE_FIELDS: Final = ("strings", "ints", "bools", "versions")


def _minor_version(version: str) -> int:
    """The minor of a 1.x `gitVersion` ("v1.35.0" -> 35); 0 where it tells none."""
    parts = version.removeprefix("v").split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
