"""Channel isolation against a real kube-apiserver (chart installed with imex.channels.max 3).

The controller (a real process, the chart's RBAC) gives two ComputeDomains different channels in
`status.channelID` (a field of our CRD the real server must keep) and builds their templates;
the plugin publishes slot devices and prepares claims allocated as the scheduler would (config
copied from each template, reserved for a pod bound to the node): their CDI edits carry
different channel device nodes with the major from the node's /proc/devices. A third
ComputeDomain finds no free channel: NotReady, a ChannelAssigned=False condition and an Event,
and no template.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import realkube_driver
import yaml
from realkube_driver import WORKLOAD_NAMESPACE, Driver, PluginNode
from realkube_server import wait_for

from adapters.grpc import client as grpc_client
from adapters.kube import KubeCluster
from adapters.nvml import simulated
from core import kinds, models, names, procdevices
from core.computedomain import channels, controlling

pytestmark = pytest.mark.slow

MODE = "hostManaged-channel-max3"


@pytest.fixture(scope="module")
def installed(real_kube: Any) -> Iterator[Driver]:
    """The chart under channel isolation (3 channels: IDs 1 and 2), replacing the tier's
    per-mode `installed` for this module."""
    driver = realkube_driver.Driver(real_kube, mode=MODE, workdir=real_kube.workdir).install()
    yield driver
    driver.stop()


def _create_cd(admin: KubeCluster, name: str) -> None:
    admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })


def _cd(admin: KubeCluster, name: str) -> Mapping[str, Any]:
    return admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name=name)


def _ready_channel(admin: KubeCluster, name: str, process: realkube_driver.AppProcess) -> int:
    def ready() -> int | None:
        assert process.running, process.output()[-4000:]
        cd = _cd(admin, name)
        status = cd.get("status") or {}
        return status.get("channelID") if status.get("status") == "Ready" else None

    return int(wait_for(ready, what=f"ComputeDomain {name} Ready with a channel", timeout_s=60))


def _claim_from_template(
    admin: KubeCluster, installed: Driver, *, cd_name: str, node: str, slot: int
) -> models.ClaimRef:
    """What the ResourceClaim controller and the scheduler leave: a claim made from the
    ComputeDomain's template, allocated one slot on `node`, reserved for a pod bound there."""
    rct = admin.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE,
                    name=f"{cd_name}-channel")
    spec = rct["spec"]["spec"]
    pod = installed.workload_pod(f"{cd_name}-worker", node=node)
    # As the ResourceClaim controller: the template's spec.metadata labels come along.
    labels = dict((rct["spec"].get("metadata") or {}).get("labels") or {})
    created = admin.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": f"{cd_name}-worker-channel", "namespace": WORKLOAD_NAMESPACE,
                     "labels": labels},
        "spec": spec,
    })
    (config,) = spec["devices"]["config"]
    admin.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=WORKLOAD_NAMESPACE,
        name=f"{cd_name}-worker-channel", subresource="status",
        patch={"status": {
            "allocation": {"devices": {
                "results": [{"request": names.CHANNEL_REQUEST_NAME, "driver": names.DRIVER_NAME,
                             "pool": node, "device": names.slot_device_name(slot)}],
                "config": [{"source": "FromClaim", **config}],
            }},
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                             "uid": pod["metadata"]["uid"]}],
        }},
    )
    return models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]),
                           namespace=WORKLOAD_NAMESPACE, name=f"{cd_name}-worker-channel")


def test_two_domains_get_different_channels_and_their_pods_different_device_nodes(
    installed: Driver, admin: KubeCluster, controller: realkube_driver.AppProcess,
    node: PluginNode, plugin: realkube_driver.AppProcess,
) -> None:
    slices = wait_for(
        lambda: [s for s in admin.list(kinds.RESOURCE_SLICE.kind).items
                 if s["spec"].get("nodeName") == node.name] or None,
        what="the node's slot devices", timeout_s=60,
    )
    devices = sorted(d["name"] for s in slices for d in s["spec"]["devices"])
    assert devices == sorted(names.slot_device_name(i) for i in range(8))

    _create_cd(admin, "alpha")
    _create_cd(admin, "beta")
    assigned = {n: _ready_channel(admin, n, controller) for n in ("alpha", "beta")}
    assert sorted(assigned.values()) == [1, 2]

    major = procdevices.imex_channel_major(simulated.simulated_proc_devices())
    for slot, name in enumerate(("alpha", "beta")):
        ref = _claim_from_template(admin, installed, cd_name=name, node=node.name, slot=slot)
        with grpc_client.DRAClient(str(node.dra_socket), timeout_s=45) as dra:
            result = dra.prepare([ref])[ref.uid]
        assert result.error == "", f"{result.error}\nplugin:\n{plugin.output()[-4000:]}"
        spec = yaml.safe_load(node.cdi_file(ref.uid).read_text())
        device_nodes = [n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
        channel = assigned[name]
        assert device_nodes == [{
            "path": f"{names.IMEX_CHANNEL_DIR}/channel{channel}", "type": "c",
            "major": major, "minor": channel, "fileMode": 0o666,
        }]


def test_a_third_domain_on_a_full_cluster_reports_exhaustion_and_gets_no_template(
    admin: KubeCluster, controller: realkube_driver.AppProcess,
) -> None:
    for name in ("alpha", "beta"):
        _ready_channel(admin, name, controller)  # the cluster is full (max 3: IDs 1 and 2)
    _create_cd(admin, "gamma")

    def refused() -> controlling.Condition | None:
        assert controller.running, controller.output()[-4000:]
        return next((c for c in controlling.conditions_from_k8s(_cd(admin, "gamma"))
                     if c.type == controlling.CHANNEL_ASSIGNED_CONDITION), None)

    condition = wait_for(refused, what="the exhaustion condition", timeout_s=60)
    assert (condition.status, condition.reason) == ("False", channels.EXHAUSTED_REASON)
    assert "imex.channels.max" in condition.message
    gamma = _cd(admin, "gamma")
    assert (gamma.get("status") or {}).get("status") == "NotReady"
    assert "channelID" not in (gamma.get("status") or {})
    templates = {o["metadata"]["name"] for o in admin.list(
        kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE).items}
    assert "gamma-channel" not in templates

    def event() -> list[Mapping[str, Any]] | None:
        found = [e for e in admin.list(kinds.EVENT.kind, namespace=WORKLOAD_NAMESPACE).items
                 if e.get("involvedObject", {}).get("name") == "gamma"
                 and e.get("reason") == channels.EXHAUSTED_REASON]
        return found or None

    (warning,) = wait_for(event, what="the exhaustion event", timeout_s=30)
    assert warning["type"] == "Warning"
