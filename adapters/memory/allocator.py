"""A minimal DRA scheduler for the embedded cluster: claims from templates, devices by CEL.

It plays the parts of kube-scheduler's DRA plugin and the resourceclaim controller, so pods on
the embedded cluster get allocated claims the kubelet plugin can prepare: it creates each pod's
claims from their ResourceClaimTemplates, picks devices from published ResourceSlices whose
DeviceClass and request CEL selectors hold (real CEL, via cel-python), keeps one claim per
device (several on a device with `allowMultipleAllocations`, each result a share with its
`shareID` and `consumedCapacity`, while its capacities last: `_capacity`), never lets the
devices allocated from a pool consume more of its shared counters than they hold (KEP-4815
partitionable devices: `_counters`), puts all of a pod's claims on one node and writes
`status.allocation`/`reservedFor`.

NB: device choice is first-fit without backtracking, over nodes and devices in a stable order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import celpy
from celpy import adapter, celparser, celtypes, evaluation

from adapters.memory import _capacity, _counters, _taints
from core import errors, kinds, models, ports

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

_DeviceId = tuple[str, str, str]  # driver, pool, device


class AllocationError(errors.DriverError):
    """The pod cannot be scheduled: some request has no free device that satisfies it."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduledPod:
    """A pod after scheduling: bound to `node_name`, with its allocated claims."""

    pod: Mapping[str, Any]
    node_name: str
    claims: tuple[Mapping[str, Any], ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Device:
    driver: str
    pool: str
    name: str
    node_name: str  # "" when the slice serves all nodes
    cel_value: Any  # celtypes.MapType bound to `device`
    # `allowMultipleAllocations`: several claims, each consuming part of `capacities`.
    allow_multiple: bool = False
    capacities: Mapping[str, _capacity.Capacity] = dataclasses.field(default_factory=dict)
    # `consumesCounters`: what the device takes from its pool's counter sets.
    consumes: _counters.Consumption = dataclasses.field(default_factory=dict)
    taints: tuple[_taints.Taint, ...] = ()

    @property
    def id(self) -> _DeviceId:
        return (self.driver, self.pool, self.name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Request:
    claim_key: tuple[str, str]
    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    # `capacity.requests`, by capacity name.
    capacity: Mapping[str, int] = dataclasses.field(default_factory=dict)
    tolerations: tuple[_taints.Toleration, ...] = ()


# What one allocated share consumes, by capacity name (None: an exclusive allocation).
_Consumed = Mapping[str, int] | None
_Pick = tuple[_Device, _Consumed]


def device_cel_value(*, driver: str, device: Mapping[str, Any]) -> Any:
    """The CEL `device` variable for a ResourceSlice device, shaped as DRA defines it.

    `attributes` and `capacity` map a domain to a map of names; unqualified names belong to the
    driver's domain. Versions are exposed as strings (cel-python has no semver type).
    """
    attributes: dict[str, dict[str, Any]] = {}
    for qualified, value in (device.get("attributes") or {}).items():
        domain, _, name = str(qualified).rpartition("/")
        attributes.setdefault(domain or driver, {})[name] = _attribute_value(value)
    capacity: dict[str, dict[str, Any]] = {}
    for qualified, value in (device.get("capacity") or {}).items():
        domain, _, name = str(qualified).rpartition("/")
        quantity = value.get("value") if isinstance(value, Mapping) else value
        capacity.setdefault(domain or driver, {})[name] = str(quantity)
    return adapter.json_to_cel({"driver": driver, "attributes": attributes, "capacity": capacity})


def _attribute_value(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    for field in ("string", "int", "bool", "version"):
        if field in value:
            return value[field]
    # List-valued attributes (DRAListTypeAttributes) are CEL lists.
    for field in ("strings", "ints", "bools", "versions"):
        if field in value:
            return list(value[field])
    return None


class Allocator:
    """Schedules pods with resource claims onto nodes of an `InMemoryCluster` (or any Cluster)."""

    def __init__(self, cluster: ports.Cluster) -> None:
        self._cluster = cluster
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()

    def schedule_pod(self, pod: Mapping[str, Any]) -> ScheduledPod:
        """Create the pod's claims, allocate them on one node, reserve them and bind the pod.

        Idempotent: claims already listed in the pod's status are reused, allocated claims keep
        their allocation. Creates the pod first if it does not exist yet. Raises
        AllocationError (and records a FailedScheduling event on the pod) when nothing fits.
        """
        with self._lock:
            pod = self._ensure_pod(pod)
            try:
                return self._schedule_locked(pod)
            except AllocationError as exc:
                self._cluster.emit_event(
                    involved=_pod_ref(pod), reason="FailedScheduling", message=exc.message
                )
                raise

    def release_pod(self, pod: Mapping[str, Any]) -> None:
        """Un-reserve the pod's claims; deallocate and delete the ones generated for it.

        Call after the kubelet unprepared them. Idempotent; claims already gone are skipped.
        """
        with self._lock:
            meta = pod["metadata"]
            namespace = str(meta.get("namespace") or "default")
            uid = str(meta.get("uid", ""))
            try:
                pod = self._cluster.get(kinds.POD.kind, namespace=namespace, name=meta["name"])
                uid = str(pod["metadata"].get("uid", uid))
            except errors.NotFoundError:
                pass
            for claim_name in _pod_claim_names(pod):
                try:
                    claim = self._cluster.get(
                        kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=claim_name
                    )
                except errors.NotFoundError:
                    continue
                generated = any(
                    ref.get("uid") == uid
                    for ref in claim["metadata"].get("ownerReferences") or ()
                )
                status = claim.get("status") or {}
                reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != uid]
                status_patch: dict[str, Any] = {"reservedFor": reserved or None}
                if generated or not reserved:
                    status_patch["allocation"] = None
                self._cluster.patch(
                    kinds.RESOURCE_CLAIM.kind,
                    namespace=namespace,
                    name=claim_name,
                    patch={"status": status_patch},
                    subresource="status",
                )
                if generated:
                    with contextlib.suppress(errors.NotFoundError):
                        self._cluster.delete(
                            kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=claim_name
                        )
                log.info("released claim=%s/%s pod=%s", namespace, claim_name, meta["name"])

    # -- scheduling ------------------------------------------------------------------------

    def _ensure_pod(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = pod["metadata"]
        namespace = str(meta.get("namespace") or "default")
        try:
            return self._cluster.get(kinds.POD.kind, namespace=namespace, name=meta["name"])
        except errors.NotFoundError:
            return self._cluster.create(kinds.POD.kind, pod)

    def _schedule_locked(self, pod: Mapping[str, Any]) -> ScheduledPod:
        claims = self._pod_claims(pod)
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        nodes = self._candidate_nodes(pod, claims)
        requests = [r for claim in pending for r in _requests_of(claim)]
        classes = {r.class_name: self._device_class(r) for r in requests}
        slices = self._newest_slices()
        devices = self._published_devices(slices)
        counters = _counters.counters_of(slices)
        taken, shared = self._allocated_device_ids()
        chosen_node = ""
        picks: dict[tuple[tuple[str, str], str], list[_Pick]] = {}
        failure = ""
        for node in nodes:
            attempt = self._fit(node, requests, classes, devices, taken, shared, counters)
            if isinstance(attempt, str):
                failure = failure or attempt
                continue
            chosen_node, picks = node, attempt
            break
        else:
            where = f"node {nodes[0]!r}" if len(nodes) == 1 else f"any of {len(nodes)} node(s)"
            raise AllocationError(
                f"pod {pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
                f" cannot be scheduled on {where}: "
                + (failure or "no node publishes devices (no ResourceSlices found)")
            )
        allocated = []
        for claim in claims:
            if claim in pending:
                claim = self._write_allocation(claim, chosen_node, picks, classes)
            allocated.append(self._reserve(claim, pod))
        bound = self._bind(pod, chosen_node)
        log.info(
            "scheduled pod=%s/%s node=%s claims=%s",
            bound["metadata"].get("namespace"), bound["metadata"]["name"], chosen_node,
            ",".join(c["metadata"]["name"] for c in allocated),
        )
        return ScheduledPod(pod=bound, node_name=chosen_node, claims=tuple(allocated))

    def _pod_claims(self, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The pod's ResourceClaims, created from templates where the pod has none yet."""
        meta = pod["metadata"]
        namespace = str(meta.get("namespace") or "default")
        known = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        claims: list[Mapping[str, Any]] = []
        statuses: list[dict[str, Any]] = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            claim_name = entry.get("resourceClaimName") or known.get(entry["name"])
            if claim_name:
                claim = self._cluster.get(
                    kinds.RESOURCE_CLAIM.kind, namespace=namespace, name=claim_name
                )
            elif entry.get("resourceClaimTemplateName"):
                claim = self._claim_from_template(pod, entry)
            else:
                raise AllocationError(
                    f"pod {namespace}/{meta['name']}: resource claim {entry['name']!r} names"
                    " neither resourceClaimName nor resourceClaimTemplateName"
                )
            claims.append(claim)
            if not entry.get("resourceClaimName"):
                statuses.append(
                    {"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]}
                )
        if statuses and any(known.get(s["name"]) != s["resourceClaimName"] for s in statuses):
            self._cluster.patch(
                kinds.POD.kind,
                namespace=namespace,
                name=meta["name"],
                patch={"status": {"resourceClaimStatuses": statuses}},
                subresource="status",
            )
        return claims

    def _claim_from_template(
        self, pod: Mapping[str, Any], entry: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        meta = pod["metadata"]
        namespace = str(meta.get("namespace") or "default")
        template_name = str(entry["resourceClaimTemplateName"])
        try:
            template = self._cluster.get(
                kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=namespace, name=template_name
            )
        except errors.NotFoundError:
            raise AllocationError(
                f"pod {namespace}/{meta['name']}: ResourceClaimTemplate {template_name!r} not"
                f" found in namespace {namespace!r}; create it (or wait for the controller)"
            ) from None
        template_spec = template.get("spec") or {}
        template_meta = template_spec.get("metadata") or {}
        annotations = dict(template_meta.get("annotations") or {})
        annotations[POD_CLAIM_NAME_ANNOTATION] = entry["name"]
        claim = {
            "apiVersion": kinds.RESOURCE_CLAIM.api_version,
            "kind": kinds.RESOURCE_CLAIM.kind,
            "metadata": {
                "generateName": f"{meta['name']}-{entry['name']}-",
                "namespace": namespace,
                "labels": dict(template_meta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template_spec.get("spec") or {},
        }
        return self._cluster.create(kinds.RESOURCE_CLAIM.kind, claim)

    def _candidate_nodes(
        self, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        pinned = str((pod.get("spec") or {}).get("nodeName") or "")
        if pinned:
            return [pinned]
        for claim in claims:  # an allocated claim ties the pod to its node
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
                for field in term.get("matchFields") or ():
                    if field.get("key") == "metadata.name" and field.get("values"):
                        return [str(field["values"][0])]
        names = {
            str(s["spec"]["nodeName"])
            for s in self._cluster.list(kinds.RESOURCE_SLICE.kind).items
            if s.get("spec", {}).get("nodeName")
        }
        names.update(
            str(n["metadata"]["name"]) for n in self._cluster.list(kinds.NODE.kind).items
        )
        return sorted(names)

    def _device_class(self, request: _Request) -> Mapping[str, Any]:
        try:
            return self._cluster.get(kinds.DEVICE_CLASS.kind, namespace="", name=request.class_name)
        except errors.NotFoundError:
            raise AllocationError(
                f"request {request.name!r} of claim {_claim_label(request.claim_key)}: DeviceClass"
                f" {request.class_name!r} does not exist; install the driver's device classes"
            ) from None

    def _newest_slices(self) -> list[Mapping[str, Any]]:
        """The slices of the newest generation of every pool, by slice name."""
        slices = self._cluster.list(kinds.RESOURCE_SLICE.kind).items
        newest: dict[tuple[str, str], int] = {}
        for s in slices:
            spec = s.get("spec") or {}
            pool_key = (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))
            generation = int((spec.get("pool") or {}).get("generation", 0))
            newest[pool_key] = max(newest.get(pool_key, generation), generation)
        return [
            s for s in sorted(slices, key=lambda s: str(s["metadata"]["name"]))
            if int(((s.get("spec") or {}).get("pool") or {}).get("generation", 0)) == newest[(
                str((s.get("spec") or {}).get("driver", "")),
                str(((s.get("spec") or {}).get("pool") or {}).get("name", "")))]
        ]

    def _published_devices(self, slices: Sequence[Mapping[str, Any]]) -> list[_Device]:
        """Devices of `slices` (the newest generations), in slice-name then slice order."""
        devices: list[_Device] = []
        for s in slices:
            spec = s.get("spec") or {}
            driver = str(spec.get("driver", ""))
            pool_name = str((spec.get("pool") or {}).get("name", ""))
            node_name = "" if spec.get("allNodes") else str(spec.get("nodeName", ""))
            if not node_name and not spec.get("allNodes"):
                continue  # nodeSelector-scoped slices are not supported here
            for device in spec.get("devices") or ():
                devices.append(
                    _Device(
                        driver=driver,
                        pool=pool_name,
                        name=str(device["name"]),
                        node_name=node_name,
                        cel_value=device_cel_value(driver=driver, device=device),
                        allow_multiple=device.get("allowMultipleAllocations") is True,
                        capacities=_capacity.capacities_of(device),
                        consumes=_counters.consumption_of(driver, pool_name, device),
                        taints=_taints.taints_of(device),
                    )
                )
        return devices

    def _allocated_device_ids(self) -> tuple[set[_DeviceId], dict[_DeviceId, dict[str, int]]]:
        """Devices allocated whole, and what the shares of the others consume."""
        taken: set[_DeviceId] = set()
        shared: dict[_DeviceId, dict[str, int]] = {}
        for claim in self._cluster.list(kinds.RESOURCE_CLAIM.kind).items:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or ():
                key = (str(result["driver"]), str(result["pool"]), str(result["device"]))
                if not result.get("shareID"):
                    taken.add(key)
                    continue
                used = shared.setdefault(key, {})
                for name, amount in (result.get("consumedCapacity") or {}).items():
                    used[name] = used.get(name, 0) + _capacity.parse_quantity(amount)
        return taken, shared

    def _fit(
        self,
        node: str,
        requests: Sequence[_Request],
        classes: Mapping[str, Mapping[str, Any]],
        devices: Sequence[_Device],
        taken: set[_DeviceId],
        shared: Mapping[_DeviceId, Mapping[str, int]],
        counters: Mapping[_counters.CounterKey, int],
    ) -> dict[tuple[tuple[str, str], str], list[_Pick]] | str:
        """Devices per (claim, request) on `node`, or why some request does not fit there."""
        used = set(taken)
        consumption = {key: dict(amounts) for key, amounts in shared.items()}
        by_id = {d.id: d for d in devices}
        counted: set[_DeviceId] = set()
        counters_used: dict[_counters.CounterKey, int] = {}
        for key in (*taken, *shared):
            if key in by_id and key not in counted:
                counted.add(key)
                _counters.add(counters_used, by_id[key].consumes)
        overrun = ""
        picks: dict[tuple[tuple[str, str], str], list[_Pick]] = {}
        local = [d for d in devices if d.node_name in ("", node)]
        for request in requests:
            class_selectors = _selectors_of(classes[request.class_name].get("spec") or {})
            expressions = (*class_selectors, *request.selectors)
            matching = [d for d in local if self._matches(d, expressions)]
            free: list[_Pick] = []
            tainted: list[str] = []
            for device in matching:
                refused = _taints.untolerated(device.taints, request.tolerations)
                if refused:
                    tainted.append(f"{device.name} ({', '.join(str(t) for t in refused)})")
                    continue
                fits, share = _share_of(device, request, consumption)
                if not fits or device.id in used:
                    continue
                if device.id not in counted:
                    short = _counters.exceeded(device.consumes, counters_used, counters)
                    if short:
                        overrun = overrun or f"{device.name} would exceed {short}"
                        continue
                free.append((device, share))
            label = f"request {request.name!r} of claim {_claim_label(request.claim_key)}"
            if not matching:
                shown = " && ".join(f"({e})" for e in expressions) or "true"
                return (
                    f"{label}: no device on node {node!r} matches DeviceClass"
                    f" {request.class_name!r} and the request selectors: {shown}"
                )
            wanted = len(matching) if request.mode == "All" else request.count
            picked: list[_Pick] = []
            for device, share in free:
                if len(picked) == wanted:
                    break
                if device.id not in counted:
                    short = _counters.exceeded(device.consumes, counters_used, counters)
                    if short:  # beside a device picked for this request
                        overrun = overrun or f"{device.name} would exceed {short}"
                        continue
                    counted.add(device.id)
                    _counters.add(counters_used, device.consumes)
                if share is None:
                    used.add(device.id)
                else:
                    total = consumption.setdefault(device.id, {})
                    for name, amount in share.items():
                        total[name] = total.get(name, 0) + amount
                picked.append((device, share))
            if len(picked) < wanted and request.mode == "All":
                return (
                    f"{label}: allocationMode All needs all {len(matching)} matching"
                    f" device(s) on node {node!r}, but {len(matching) - len(picked)} are"
                    " already allocated to other claims"
                    + (f" or would overrun a shared counter ({overrun})" if overrun else "")
                )
            if len(picked) < wanted:
                return (
                    f"{label}: needs {request.count} device(s) of DeviceClass"
                    f" {request.class_name!r} on node {node!r}; {len(matching)} match but"
                    f" only {len(picked)} are free (one claim per device, or not enough of"
                    " a shareable device's capacity left"
                    + (f"; {overrun}, shared counters being consumed by allocated devices"
                       if overrun else "")
                    + (f"; tainted and not tolerated: {', '.join(tainted)}" if tainted else "")
                    + ")"
                )
            picks[(request.claim_key, request.name)] = picked
        return picks

    def _matches(self, device: _Device, expressions: Sequence[str]) -> bool:
        for expression in expressions:
            program = self._program(expression)
            try:
                result = program.evaluate({"device": device.cel_value})
            except evaluation.CELEvalError as exc:
                log.debug("cel error device=%s expression=%s error=%s", device.id, expression, exc)
                return False
            if not isinstance(result, celtypes.BoolType) or not bool(result):
                return False
        return True

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            try:
                program = self._env.program(self._env.compile(expression))
            except celparser.CELParseError as exc:
                raise AllocationError(
                    f"CEL selector {expression!r} does not compile: {exc}; fix the DeviceClass"
                    " or the claim's selector"
                ) from None
            self._programs[expression] = program
        return program

    def _write_allocation(
        self,
        claim: Mapping[str, Any],
        node: str,
        picks: Mapping[tuple[tuple[str, str], str], Sequence[_Pick]],
        classes: Mapping[str, Mapping[str, Any]],
    ) -> Mapping[str, Any]:
        meta = claim["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        requests = _requests_of(claim)
        results = [
            _result(r.name, d, share) for r in requests for d, share in picks[(key, r.name)]
        ]
        config: list[dict[str, Any]] = []
        for r in requests:
            for entry in (classes[r.class_name].get("spec") or {}).get("config") or ():
                config.append({"source": "FromClass", "requests": [r.name], **dict(entry)})
        for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or ():
            config.append({"source": "FromClaim", **dict(entry)})
        allocation: dict[str, Any] = {
            "devices": {"results": results, "config": config},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        return self._cluster.patch(
            kinds.RESOURCE_CLAIM.kind,
            namespace=key[0],
            name=key[1],
            patch={"status": {"allocation": allocation}},
            subresource="status",
        )

    def _reserve(self, claim: Mapping[str, Any], pod: Mapping[str, Any]) -> Mapping[str, Any]:
        reserved = list((claim.get("status") or {}).get("reservedFor") or ())
        uid = pod["metadata"].get("uid", "")
        if any(r.get("uid") == uid for r in reserved):
            return claim
        reserved.append({"resource": "pods", "name": pod["metadata"]["name"], "uid": uid})
        meta = claim["metadata"]
        return self._cluster.patch(
            kinds.RESOURCE_CLAIM.kind,
            namespace=meta["namespace"],
            name=meta["name"],
            patch={"status": {"reservedFor": reserved}},
            subresource="status",
        )

    def _bind(self, pod: Mapping[str, Any], node: str) -> Mapping[str, Any]:
        meta = pod["metadata"]
        if (pod.get("spec") or {}).get("nodeName") == node:
            return self._cluster.get(
                kinds.POD.kind, namespace=meta.get("namespace") or "default", name=meta["name"]
            )
        return self._cluster.patch(
            kinds.POD.kind,
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            patch={"spec": {"nodeName": node}},
        )


def _requests_of(claim: Mapping[str, Any]) -> list[_Request]:
    meta = claim["metadata"]
    key = (str(meta["namespace"]), str(meta["name"]))
    out = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        exactly = request.get("exactly")
        if exactly is None:
            raise AllocationError(
                f"request {request.get('name')!r} of claim {_claim_label(key)}: only"
                " 'exactly' requests are supported by the embedded scheduler (not firstAvailable)"
            )
        mode = str(exactly.get("allocationMode") or "ExactCount")
        asked = (exactly.get("capacity") or {}).get("requests") or {}
        try:
            capacity = {str(n): _capacity.parse_quantity(v) for n, v in asked.items()}
        except ValueError as exc:
            raise AllocationError(
                f"request {request.get('name')!r} of claim {_claim_label(key)}: capacity: {exc}"
            ) from None
        out.append(
            _Request(
                claim_key=key,
                name=str(request["name"]),
                class_name=str(exactly["deviceClassName"]),
                selectors=_selectors_of(exactly),
                mode=mode,
                count=int(exactly.get("count") or 1),
                capacity=capacity,
                tolerations=_taints.tolerations_of(exactly),
            )
        )
    return out


def _share_of(
    device: _Device, request: _Request, consumption: Mapping[_DeviceId, Mapping[str, int]]
) -> tuple[bool, _Consumed]:
    """Whether `request` fits `device` and what it would consume of it (None: the whole,
    exclusive device). No fit: capacity asked of an exclusive device or of a capacity the
    device lacks, a policy refusing the amount, or not enough left."""
    if not device.allow_multiple:
        return not request.capacity, None
    if not set(request.capacity) <= set(device.capacities):
        return False, None
    used = consumption.get(device.id, {})
    share: dict[str, int] = {}
    for name, capacity in device.capacities.items():
        amount = _capacity.consumed(request.capacity.get(name), capacity)
        if amount is None or used.get(name, 0) + amount > capacity.value:
            return False, None
        share[name] = amount
    return True, share


def _result(request: str, device: _Device, share: _Consumed) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": request, "driver": device.driver, "pool": device.pool, "device": device.name,
    }
    if share is not None:
        result["shareID"] = str(uuid.uuid4())
        result["consumedCapacity"] = {
            name: _quantity(amount) for name, amount in sorted(share.items())
        }
    return result


def _quantity(amount: int) -> str:
    for suffix, factor in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30),
                           ("Mi", 2**20), ("Ki", 2**10)):
        if amount >= factor and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def _selectors_of(spec: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        str(s["cel"]["expression"]) for s in spec.get("selectors") or () if s.get("cel")
    )


def _pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    names = [
        str(s["resourceClaimName"])
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if s.get("resourceClaimName")
    ]
    names.extend(
        str(e["resourceClaimName"])
        for e in (pod.get("spec") or {}).get("resourceClaims") or ()
        if e.get("resourceClaimName")
    )
    return sorted(set(names))


def _claim_label(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}"


def _pod_ref(pod: Mapping[str, Any]) -> models.ObjectRef:
    meta = pod["metadata"]
    return models.ObjectRef(
        kind=kinds.POD.kind,
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid", "")),
        api_version="v1",
    )
