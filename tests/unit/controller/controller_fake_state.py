"""A test-only cluster state that applies controller actions with API-server semantics.

Objects are JSON dicts keyed by (kind, namespace, name). It honours what the planner relies on:
resourceVersion bumps and optimistic-concurrency conflicts, JSON merge patches (status only
through the `status` subresource), finalizers holding a deleted object with a
deletionTimestamp, and removal once the last finalizer goes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from adapters.memory import _codec as mp  # RFC 7386 merge patch, as the embedded cluster applies it
from core import controlling, decoding, errors, models, names

Key = tuple[str, str, str]

DRIVER_NAMESPACE = "nvidia-dra-driver"


def host_config() -> models.DriverConfig:
    return models.DriverConfig(
        mode=models.IMEXMode.HOST_MANAGED,
        isolation=models.Isolation.NONE,
        gates=models.FeatureGates(
            values={
                "HostManagedIMEX": True,
                "IMEXDaemonsWithDNSNames": False,
                "ComputeDomainCliques": False,
                "CrashOnNVLinkFabricErrors": True,
            }
        ),
        namespace=DRIVER_NAMESPACE,
    )


def driver_config(*, cliques: bool = True) -> models.DriverConfig:
    return models.DriverConfig(
        mode=models.IMEXMode.DRIVER_MANAGED,
        isolation=models.Isolation.DOMAIN,
        gates=models.FeatureGates(
            values={
                "HostManagedIMEX": False,
                "IMEXDaemonsWithDNSNames": True,
                "ComputeDomainCliques": cliques,
                "CrashOnNVLinkFabricErrors": True,
            }
        ),
        namespace=DRIVER_NAMESPACE,
    )


def compute_domain_json(
    *,
    name: str,
    namespace: str = "default",
    rct_name: str = "",
    allocation_mode: str = "Single",
    num_nodes: int = 0,
) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "numNodes": num_nodes,
            "channel": {
                "resourceClaimTemplate": {"name": rct_name or f"{name}-channel"},
                "allocationMode": allocation_mode,
            },
        },
    }


class FakeState:
    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[models.EmitEvent] = []
        self.applied: list[models.ClusterAction] = []
        self._counter = 0

    # ------------------------------------------------------------ reading

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for (k, _, _), obj in sorted(self.objects.items()) if k == kind]

    def lists(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for (kind, _, _), obj in sorted(self.objects.items()):
            out.setdefault(kind, []).append(copy.deepcopy(obj))
        return out

    def compute_domain(self, namespace: str, name: str) -> models.ComputeDomain | None:
        obj = self.get(names.KIND_COMPUTE_DOMAIN, namespace, name)
        return decoding.compute_domain_from_k8s(obj) if obj is not None else None

    # ------------------------------------------------------------ writing (user side)

    def create(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        key = (kind, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            raise errors.AlreadyExistsError(f"{kind} {key[1]}/{key[2]} already exists")
        self._counter += 1
        meta["uid"] = f"00000000-0000-4000-8000-{self._counter:012d}"
        meta["resourceVersion"] = self._next_rv()
        meta.pop("deletionTimestamp", None)
        self.objects[key] = stored
        return stored

    def delete(self, kind: str, namespace: str, name: str) -> None:
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise errors.NotFoundError(f"{kind} {namespace}/{name} not found")
        meta = obj["metadata"]
        if not meta.get("finalizers"):
            del self.objects[(kind, namespace, name)]
        elif not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
            meta["resourceVersion"] = self._next_rv()

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str = "",
        resource_version: str = "",
    ) -> None:
        key = (kind, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise errors.NotFoundError(f"{kind} {namespace}/{name} not found")
        if resource_version and obj["metadata"]["resourceVersion"] != resource_version:
            raise errors.ConflictError(f"{kind} {namespace}/{name} changed")
        if subresource == "status":
            updated = dict(obj)
            if "status" in patch:
                updated["status"] = mp.merge_patch(obj.get("status"), patch["status"])
        else:
            updated = mp.merge_patch(obj, {k: v for k, v in patch.items() if k != "status"})
            # identity fields cannot change through a patch
            for field in ("name", "namespace", "uid", "deletionTimestamp"):
                if field in obj["metadata"]:
                    updated["metadata"][field] = obj["metadata"][field]
                else:
                    updated["metadata"].pop(field, None)
        if obj["metadata"].get("deletionTimestamp"):
            added = set(updated["metadata"].get("finalizers", ())) - set(
                obj["metadata"].get("finalizers", ())
            )
            # The API server refuses (422) new finalizers on an object being deleted.
            assert not added, f"finalizers {added} added to deleting {kind} {namespace}/{name}"
        updated["metadata"]["resourceVersion"] = self._next_rv()
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get(
            "finalizers"
        ):
            del self.objects[key]
        else:
            self.objects[key] = updated

    # ------------------------------------------------------------ controller actions

    def apply(self, action: models.ClusterAction) -> None:
        match action:
            case models.CreateObject(kind=kind, obj=obj):
                self.create(kind, obj)
            case models.PatchObject():
                self.patch(
                    action.kind,
                    action.namespace,
                    action.name,
                    action.patch,
                    subresource=action.subresource,
                    resource_version=action.resource_version,
                )
            case models.DeleteObject(kind=kind, namespace=namespace, name=name):
                self.delete(kind, namespace, name)
            case models.EmitEvent():
                self.events.append(action)
        self.applied.append(action)

    def apply_all(
        self, actions: Iterable[models.ClusterAction], *, limit: int | None = None
    ) -> int:
        """Apply in order like the executor: stop at the first failure (or after `limit`)."""
        done = 0
        for action in actions:
            if limit is not None and done >= limit:
                break
            try:
                self.apply(action)
            except errors.ClusterError:
                break
            done += 1
        return done

    # ------------------------------------------------------------ controller loop

    def plan(
        self, namespace: str, name: str, *, config: models.DriverConfig
    ) -> tuple[models.ClusterAction, ...]:
        cd = self.compute_domain(namespace, name)
        raw = self.get(names.KIND_COMPUTE_DOMAIN, namespace, name)
        if cd is None or raw is None:
            return ()
        observed = controlling.observe(
            cd, objects=self.lists(), config=config,
            conditions=controlling.conditions_from_k8s(raw),
        )
        return controlling.plan_compute_domain(cd, observed=observed, config=config)

    def converge(
        self, cds: Iterable[tuple[str, str]], *, config: models.DriverConfig, rounds: int = 12
    ) -> None:
        """Reconcile every CD, applying all actions, until no plan has anything left to do."""
        targets = sorted(set(cds))
        for _ in range(rounds):
            busy = False
            for namespace, name in targets:
                actions = self.plan(namespace, name, config=config)
                if actions:
                    busy = True
                    self.apply_all(actions)
            if not busy:
                return
        raise AssertionError(f"no fixpoint after {rounds} rounds: {self.objects}")

    # ------------------------------------------------------------ other actors

    def add_node(self, name: str, *, cd_uid: str = "") -> None:
        labels = {names.COMPUTE_DOMAIN_LABEL: cd_uid} if cd_uid else {}
        self.create("Node", {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": name, "labels": labels}})

    def write_clique(
        self, *, cd_uid: str, clique_id: str, daemons: list[dict[str, Any]]
    ) -> None:
        """What the IMEX daemons do: create or replace their clique object."""
        name = f"{cd_uid}.{clique_id}"
        key = (names.KIND_COMPUTE_DOMAIN_CLIQUE, DRIVER_NAMESPACE, name)
        if key in self.objects:
            self.objects[key]["daemons"] = copy.deepcopy(daemons)
            self.objects[key]["metadata"]["resourceVersion"] = self._next_rv()
            return
        self.create(
            names.KIND_COMPUTE_DOMAIN_CLIQUE,
            {
                "apiVersion": names.GROUP_VERSION,
                "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
                "metadata": {"name": name, "namespace": DRIVER_NAMESPACE},
                "daemons": daemons,
            },
        )

    def _next_rv(self) -> str:
        self._counter += 1
        return str(self._counter)
