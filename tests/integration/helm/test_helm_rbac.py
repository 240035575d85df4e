"""The chart's RBAC grants every API call the driver's code makes, and no `update` it never makes.

What the controller and the preflight hook need is recorded from their real code paths (the
controller loop, informers and all, driving a ComputeDomain's whole life on the embedded
cluster in each mode, the leader elector, the preflight check). The kubelet plugin's needs are
listed by hand below, each line naming the call site, because recording them needs the plugin's
gRPC stack.
Then the chart is rendered by the real Helm engine and each need is matched against the Roles and
ClusterRoles bound to that component's ServiceAccount.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import chart_rendering as cr
import pytest

from adapters.kube import leader
from adapters.memory import cluster as memory_cluster
from apps.cli import preflight
from apps.controller import reconciler as controller_reconciler
from apps.controller import running, settling
from core import kinds, models, names, ports
from core.computedomain import modes

# (verb, API group, resource[/subresource], namespace): namespace "" = cluster-scoped or all
# namespaces; USER_NS stands for any namespace users create ComputeDomains in.
Need = tuple[str, str, str, str]
USER_NS = "ml"


class RecordingCluster(memory_cluster.InMemoryCluster):
    """The embedded cluster, noting every call as the (verb, group, resource, namespace) it is."""

    def __init__(self) -> None:
        super().__init__()
        self.needs: set[Need] = set()
        self.recording = True

    @contextlib.contextmanager
    def as_user(self) -> Iterator[None]:
        """Calls the test makes as a user or another component: not the controller's needs."""
        self.recording = False
        try:
            yield
        finally:
            self.recording = True

    def _note(self, verb: str, kind: str, namespace: str, subresource: str = "") -> None:
        if not self.recording:
            return
        rk = kinds.by_kind(kind)
        resource = f"{rk.plural}/{subresource}" if subresource else rk.plural
        self.needs.add((verb, rk.group, resource, namespace if rk.namespaced else ""))

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        self._note("get", kind, namespace)
        return super().get(kind, namespace=namespace, name=name)

    def list(
        self, kind: str, *, namespace: str = "", label_selector: ports.LabelSelector | None = None
    ) -> ports.ListResult:
        self._note("list", kind, namespace)
        return super().list(kind, namespace=namespace, label_selector=label_selector)

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: ports.LabelSelector | None = None,
    ) -> Iterator[ports.WatchEvent]:
        self._note("watch", kind, namespace)
        return super().watch(
            kind, namespace=namespace, resource_version=resource_version, timeout_s=timeout_s,
            label_selector=label_selector,
        )

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self._note("create", kind, str((obj.get("metadata") or {}).get("namespace") or ""))
        return super().create(kind, obj)

    def patch(
        self, kind: str, *, namespace: str, name: str, patch: Mapping[str, Any],
        subresource: str = "", resource_version: str = "",
    ) -> Mapping[str, Any]:
        self._note("patch", kind, namespace, subresource)
        if "ownerReferences" in (patch.get("metadata") or {}):
            # OwnerReferencesPermissionEnforcement (enabled on some clusters, e.g. OpenShift):
            # changing an existing object's ownerReferences needs `delete` on that object.
            self._note("delete", kind, namespace, subresource)
        return super().patch(kind, namespace=namespace, name=name, patch=patch,
                             subresource=subresource, resource_version=resource_version)

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self._note("delete", kind, namespace)
        super().delete(kind, namespace=namespace, name=name)

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        # KubeCluster.emit_event POSTs a core/v1 Event in the involved object's namespace.
        if self.recording:
            self.needs.add(("create", "", "events", involved.namespace))
        with self.as_user():
            super().emit_event(involved=involved, reason=reason, message=message, warning=warning)


def _config(mode: str) -> models.DriverConfig:
    if mode.startswith("hostManaged"):
        # "hostManaged-channel": channel isolation (also reads ResourceClaims).
        return modes.resolve_driver_config(
            mode="hostManaged", isolation="channel" if mode.endswith("-channel") else "none",
            feature_gates="HostManagedIMEXDaemon=true", namespace=cr.NAMESPACE,
        ).config
    return modes.resolve_driver_config(
        mode=mode, isolation="", feature_gates="", namespace=cr.NAMESPACE,
        daemon_image="imex:1", daemon_service_account="cdd-daemon",
    ).config


def _settle(reconciler: controller_reconciler.Reconciler) -> None:
    """Run the controller loop (one leadership term) until it settled, then stop it.

    NB: `settling` lists what the informers list, so its own calls add no need."""
    controller = running.Controller(reconciler, workers=2, resync_s=3600)
    settled = settling.Settling(controller)
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    try:
        assert controller.synced.wait(30)
        settled.wait()
    finally:
        stop.set()
        assert controller.stopped.wait(30)


def _cd(name: str, **spec: Any) -> dict[str, Any]:
    channel = {"resourceClaimTemplate": {"name": f"{name}-channel"}, **spec}
    return {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": USER_NS}, "spec": {"channel": channel}}


def _driver_managed_leftovers(cluster: RecordingCluster, uid: str) -> None:
    """What the plugin and the IMEX daemons add for a driver-managed CD: node label, clique."""
    with cluster.as_user():
        _add_leftovers(cluster, uid)


def _add_leftovers(cluster: RecordingCluster, uid: str) -> None:
    cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": f"node-{uid}", "labels": {names.COMPUTE_DOMAIN_LABEL: uid}}})
    cluster.create(kinds.COMPUTE_DOMAIN_CLIQUE.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {"name": f"{uid}.clique-1", "namespace": cr.NAMESPACE}, "daemons": []})


def _controller_needs(mode: str) -> set[Need]:
    """Every call the controller makes in `mode` over a CD's life (and after a switch)."""
    cluster = RecordingCluster()
    driver = controller_reconciler.Reconciler(cluster=cluster, config=_config("driverManaged"))
    own = controller_reconciler.Reconciler(cluster=cluster, config=_config(mode))
    # Leader election: create, renew, lose and release the Lease.
    elector = leader.LeaderElector(cluster=cluster, namespace=cr.NAMESPACE,
                                   name="compute-domain-controller", identity="replica-a")
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
    elector.release()
    # A CD admitted by this mode: admitted, then deleted.
    with cluster.as_user():
        cd = cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("own"))
    _settle(own)
    if mode == "driverManaged":
        _driver_managed_leftovers(cluster, cd["metadata"]["uid"])
        _settle(own)
    with cluster.as_user():
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=USER_NS, name="own")
    _settle(own)
    # A CD admitted under driver-managed mode, deleted after a switch to `mode`.
    with cluster.as_user():
        old = cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("old"))
        _settle(driver)  # the controller of the previous release
    _driver_managed_leftovers(cluster, old["metadata"]["uid"])
    _settle(own)
    with cluster.as_user():
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=USER_NS, name="old")
    _settle(own)
    # A CD the driver cannot decode gets an event.
    with cluster.as_user():
        cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd("bad", allocationMode="Sometimes"))
    _settle(own)
    with cluster.as_user():
        left = {o["metadata"]["name"] for o in cluster.list(kinds.COMPUTE_DOMAIN.kind).items}
    assert left == {"bad"}, "the scenario must run both deletions to the end"
    return cluster.needs


def _preflight_needs() -> set[Need]:
    cluster = RecordingCluster()
    with cluster.as_user():
        # One the upstream driver made (finalizer, no stamp): preflight then looks for the
        # namespace of its IMEX DaemonSet.
        upstream = _cd("upstream")
        upstream["metadata"]["finalizers"] = [names.COMPUTE_DOMAIN_FINALIZER]
        cluster.create(kinds.COMPUTE_DOMAIN.kind, upstream)
    preflight.check(cluster, mode="driverManaged", isolation="", feature_gates="",
                    namespace=cr.NAMESPACE)
    preflight.runtime_cdi_notes(cluster)
    return cluster.needs


def _plugin_needs(mode: str) -> set[Need]:
    """The kubelet plugin's calls, by call site."""
    dra, cd = "resource.k8s.io", names.API_GROUP
    needs = {
        ("get", dra, "resourceclaims", USER_NS),  # apps/kubeletplugin/driver.py _fetch_claim
        ("get", "", "pods", USER_NS),  # driver.py _reserved_placements (reservedFor pods)
        # apps/pluginkit/device_status_writer.py: the claim's status.devices, and
        # apps/kubeletplugin/binding_watch.py: its binding conditions (a PUT where a patch
        # would re-encode the claim's opaque config bytes)
        ("patch", dra, "resourceclaims/status", USER_NS),
        ("update", dra, "resourceclaims/status", USER_NS),
        ("list", dra, "resourceclaims", ""),  # binding_watch.py: claims on this node
        ("watch", dra, "resourceclaims", ""),
        ("list", cd, "computedomains", ""),  # apps/kubeletplugin/domains.py informer
        ("watch", cd, "computedomains", ""),
        ("list", dra, "resourceslices", ""),  # adapters/kube/slices.py SlicePublisher
        ("create", dra, "resourceslices", ""),
        ("patch", dra, "resourceslices", ""),
        ("delete", dra, "resourceslices", ""),
        ("get", "", "nodes", ""),  # SlicePublisher.node_uid: the slices' owner
        ("create", "", "events", USER_NS),  # driver.py: events on claims
        # apps/pluginkit/runtime_cdi_check.py: the Node condition ContainerRuntimeCDIDisabled
        ("patch", "", "nodes/status", ""),
    }
    if mode == "driverManaged":
        needs |= {
            ("get", "", "nodes", ""),  # driver.py _fetch_node_labels
            ("patch", "", "nodes", ""),  # core.executing plugin step: node label
        }
    return needs


def _granted(objects: list[cr.Obj], service_account: str) -> list[tuple[str, dict[str, Any]]]:
    """(namespace or "" for cluster-wide, rule) for every rule bound to the ServiceAccount."""
    def bound(binding: cr.Obj) -> bool:
        return any(s.get("kind") == "ServiceAccount" and s["name"] == service_account
                   and s.get("namespace") == cr.NAMESPACE for s in binding.get("subjects", []))

    granted: list[tuple[str, dict[str, Any]]] = []
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not bound(binding):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        role = cr.one(objects, ref["kind"], ref["name"])
        granted.extend((scope, rule) for rule in role.get("rules", []))
    return granted


def _allows(granted: list[tuple[str, dict[str, Any]]], need: Need) -> bool:
    verb, group, resource, namespace = need
    return any(
        (scope == "" or scope == namespace)
        and group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for scope, rule in granted
    )


def _missing(objects: list[cr.Obj], account: str, needs: set[Need]) -> list[Need]:
    granted = _granted(objects, account)
    return sorted(need for need in needs if not _allows(granted, need))


MODES = {
    "driverManaged": {},
    "hostManaged": cr.host_managed(),
    "hostManaged-channel": cr.imex("hostManaged", "channel",
                                   featureGates={"HostManagedIMEXDaemon": True}),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_controller_service_account_may_make_every_call_the_controller_makes(mode: str) -> None:
    objects = cr.render(MODES[mode])
    needs = _controller_needs(mode)
    # The recording covers what matters: lease renewal by PATCH, namespaced daemon-side reads,
    # the driver-managed clean-up after a switch.
    assert ("patch", "coordination.k8s.io", "leases", cr.NAMESPACE) in needs
    assert ("list", "apps", "daemonsets", cr.NAMESPACE) in needs
    assert ("delete", names.API_GROUP, "computedomaincliques", cr.NAMESPACE) in needs
    assert ("patch", "", "nodes", "") in needs
    assert ("delete", "apps", "daemonsets", cr.NAMESPACE) in needs
    if mode.endswith("-channel"):  # the channel table's claim informer
        assert ("watch", "resource.k8s.io", "resourceclaims", "") in needs
    if mode == "driverManaged":  # the IMEX daemon pods: a gone daemon's entry is dropped
        assert ("watch", "", "pods", cr.NAMESPACE) in needs
    assert _missing(objects, f"{cr.RELEASE}-compute-domain-dra-driver-controller", needs) == []


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kubelet_plugin_service_account_may_make_every_call_the_plugin_makes(mode: str) -> None:
    objects = cr.render(MODES[mode])
    account = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin"
    assert _missing(objects, account, _plugin_needs(mode)) == []


def test_kubelet_plugin_may_write_status_devices_only_for_its_drivers_on_its_node() -> None:
    """status.devices needs the per-driver permission (Kubernetes 1.36+), limited to claims
    allocated on the plugin's node (`associated-node:`) and to our two drivers."""
    account = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin"
    rules = [rule for _, rule in _granted(cr.render({}), account)
             if "resourceclaims/driver" in rule.get("resources", [])]
    assert rules == [{
        "apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
        "resourceNames": ["compute-domain.nvidia.com", "gpu.nvidia.com"],
        "verbs": ["associated-node:patch", "associated-node:update"],
    }]


def test_preflight_service_account_may_list_compute_domains_everywhere() -> None:
    objects = cr.render({})
    needs = _preflight_needs()
    assert needs == {
        ("list", names.API_GROUP, "computedomains", ""),
        ("list", "resource.k8s.io", "resourceclaims", ""),
        ("list", "resource.k8s.io", "resourceslices", ""),
        ("list", "apps", "daemonsets", ""),
        ("list", "", "nodes", ""),  # the nodes whose runtime ignores CDI specs, reported
    }
    assert _missing(objects, f"{cr.RELEASE}-compute-domain-dra-driver-preflight", needs) == []


@pytest.mark.parametrize("mode", sorted(MODES))
def test_driver_roles_grant_no_update_because_the_driver_only_patches(mode: str) -> None:
    objects = cr.render(MODES[mode])
    daemon = f"{cr.RELEASE}-compute-domain-dra-driver-daemon"  # upstream's IMEX daemon: its own
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole") and obj["metadata"]["name"] != daemon:
            for rule in obj["rules"]:
                # The PUTs: an older driver's ResourceClaimTemplate, and a claim's status,
                # whose opaque config bytes a patch would re-encode (adapters/kube/cluster.py
                # _replace_with_patch).
                if rule["resources"] in (["resourceclaimtemplates"],
                                         ["resourceclaims/status"]):
                    continue
                assert "update" not in rule["verbs"], (obj["metadata"]["name"], rule)
