"""The controller planner's test bench: the embedded cluster plus plan/apply/converge steps.

Objects live in `adapters.memory.InMemoryCluster` (the same API-server semantics the apps run
on and the port contract suite pins: resourceVersion conflicts, merge patches, the status
subresource, finalizers and deletion timestamps), so the planner is tested against no fake of
its own. This module only adds the steps a test drives by hand: plan one CD, apply a prefix of
a plan as the executor would, converge, and play the plugin (node labels) and the IMEX daemons
(cliques).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from adapters.memory import cluster as memory_cluster
from core import decoding, errors, kinds, models, names
from core.computedomain import controlling

Key = tuple[str, str, str]

DRIVER_NAMESPACE = "nvidia-dra-driver"


def host_config() -> models.DriverConfig:
    return models.DriverConfig(
        mode=models.IMEXMode.HOST_MANAGED,
        isolation=models.Isolation.NONE,
        gates=models.FeatureGates(
            values={
                "HostManagedIMEXDaemon": True,
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
                "HostManagedIMEXDaemon": False,
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


class Harness:
    """The embedded cluster seen as a dict of objects, with the controller's steps."""

    def __init__(self, *, observe_pods: bool = False) -> None:
        # As the controller does (it watches the driver namespace's daemon pods): plans see
        # daemon pods, none included; otherwise pods are unobserved and nothing is pruned.
        self.observe_pods = observe_pods
        counter = itertools.count(1)
        self.cluster = memory_cluster.InMemoryCluster(
            uid_factory=lambda: f"00000000-0000-4000-8000-{next(counter):012d}"
        )
        self.events: list[models.EmitEvent] = []
        self.applied: list[models.ClusterAction] = []

    # ------------------------------------------------------------ reading

    @property
    def objects(self) -> dict[Key, dict[str, Any]]:
        """Every stored object except Events, keyed (kind, namespace, name)."""
        found: dict[Key, dict[str, Any]] = {}
        for kind in sorted({k.kind for k in kinds.ALL} - {kinds.EVENT.kind}):
            for obj in self.cluster.list(kind).items:
                meta = obj["metadata"]
                found[(kind, str(meta.get("namespace") or ""), str(meta["name"]))] = dict(obj)
        return found

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.cluster.get(kind, namespace=namespace, name=name))
        except errors.NotFoundError:
            return None

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [dict(obj) for obj in self.cluster.list(kind).items]

    def lists(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"Pod": []} if self.observe_pods else {}
        for (kind, _, _), obj in sorted(self.objects.items()):
            out.setdefault(kind, []).append(obj)
        return out

    def compute_domain(self, namespace: str, name: str) -> models.ComputeDomain | None:
        obj = self.get(names.KIND_COMPUTE_DOMAIN, namespace, name)
        return decoding.compute_domain_from_k8s(obj) if obj is not None else None

    # ------------------------------------------------------------ writing (user side)

    def create(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.cluster.create(kind, obj))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.cluster.delete(kind, namespace=namespace, name=name)

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
        try:
            self.cluster.patch(kind, namespace=namespace, name=name, patch=patch,
                               subresource=subresource, resource_version=resource_version)
        except errors.ClusterError as exc:
            # The API server refuses (422) new finalizers on an object being deleted: a plan
            # that asks for it is a planner bug, never a condition to retry.
            assert "no new finalizers" not in exc.message, exc.message
            raise

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
        if cd is None:
            return ()
        observed = self.observe(cd, config=config)
        return controlling.plan_compute_domain(cd, observed=observed, config=config)

    def observe(
        self, cd: models.ComputeDomain, *, config: models.DriverConfig
    ) -> controlling.Observed:
        """What the controller's caches give a plan of `cd`: its objects and its own
        status conditions, as stored now."""
        raw = self.get(names.KIND_COMPUTE_DOMAIN, cd.meta.namespace, cd.meta.name)
        conditions = controlling.conditions_from_k8s(raw) if raw is not None else ()
        return controlling.observe(cd, objects=self.lists(), config=config,
                                   conditions=conditions)

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

    def add_daemon_pod(self, node: str, *, cd_uid: str) -> str:
        """What the CD's DaemonSet does on a labelled node: a daemon pod bound to it."""
        name = f"{names.daemonset_name(cd_uid)}-{node}"
        self.create("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": DRIVER_NAMESPACE,
            "labels": {names.COMPUTE_DOMAIN_LABEL: cd_uid,
                       names.COMPUTE_DOMAIN_TARGET_LABEL: names.TARGET_DAEMON},
        }, "spec": {"nodeName": node, "containers": [{"name": "imex", "image": "imex"}]}})
        return name

    def write_clique(
        self, *, cd_uid: str, clique_id: str, daemons: list[dict[str, Any]]
    ) -> None:
        """What the IMEX daemons do: create or replace their clique object."""
        name = f"{cd_uid}.{clique_id}"
        if self.get(names.KIND_COMPUTE_DOMAIN_CLIQUE, DRIVER_NAMESPACE, name) is not None:
            self.patch(names.KIND_COMPUTE_DOMAIN_CLIQUE, DRIVER_NAMESPACE, name,
                       {"daemons": daemons})
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
