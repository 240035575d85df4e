"""Upstream bug #1162 on a real kube-apiserver: a prepare the kubelet gave up on never comes back.

As reported: the claim GET answers 3 s late, the kubelet's call times out after 1 s, the
kubelet unprepares (acked) and the claim is deleted. The prepare still in flight inside the
plugin must not finish: no `PrepareCompleted` entry, no CDI file, nothing holding channel 0.
The API server is made slow by a TCP proxy in front of it (only the plugin dials the proxy).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import realkube_driver
from realkube_delay_proxy import DelayProxy
from realkube_driver import WORKLOAD_NAMESPACE, Driver, PluginNode
from realkube_server import wait_for

from adapters.fs import checkpoints
from adapters.grpc import client as grpc_client
from adapters.kube import KubeCluster
from core import kinds, names
from core.computedomain import checkpoint_records as cd_records

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("installed", ["hostManaged"], indirect=True),
]

LATE_S = 3.0
KUBELET_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def proxy(installed: Driver) -> Iterator[DelayProxy]:
    slow = DelayProxy(installed.kube.port)
    yield slow
    slow.close()


def test_a_prepare_the_kubelet_gave_up_on_is_not_completed_after_the_unprepare(
    installed: Driver, admin: KubeCluster, controller: realkube_driver.AppProcess,
    proxy: DelayProxy,
) -> None:
    node: PluginNode = installed.plugin_node(realkube_driver.nodes()[0])
    plugin = installed.start_plugin(node, api_url=proxy.url)
    realkube_driver.wait_registered(plugin, node)
    cd = admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "late", "namespace": WORKLOAD_NAMESPACE},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "late-ch"}}},
    })
    wait_for(
        lambda: admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE, name="late")
        .get("metadata", {}).get("annotations"),
        what="the controller to admit the ComputeDomain", timeout_s=60,
    )
    pod = installed.workload_pod("late-worker", node=node.name)
    ref = realkube_driver.allocated_channel_claim(
        admin, name="late-worker-channel", node=node.name, cd_uid=cd["metadata"]["uid"], pod=pod
    )

    proxy.arm(LATE_S)
    with (
        grpc_client.DRAClient(str(node.dra_socket), timeout_s=KUBELET_TIMEOUT_S) as kubelet,
        pytest.raises(grpc_client.PluginCallError),
    ):
        kubelet.prepare([ref])  # the kubelet gives up after 1 s
    with grpc_client.DRAClient(str(node.dra_socket), timeout_s=45) as kubelet:
        undone = kubelet.unprepare([ref])
    assert undone[ref.uid].error == ""
    admin.delete(kinds.RESOURCE_CLAIM.kind, namespace=WORKLOAD_NAMESPACE, name=ref.name)
    proxy.disarm()

    # The late answer arrives now; wait until the plugin is done with that prepare either way.
    ended = re.compile(
        rf"event=(prepare_failed .*uid={ref.uid}|claim_prepared claim=\S+ uid={ref.uid})"
    )
    finished = wait_for(
        lambda: ended.search(plugin.output()), what="the in-flight prepare to end",
        timeout_s=60,
    )
    assert "prepare_failed" in finished.group(0), plugin.output()[-4000:]
    assert not node.cdi_file(ref.uid).exists()
    state = checkpoints.read_checkpoint(
        str(node.root / "plugin" / "checkpoint.json"), cd_records.CODEC
    )
    assert state is None or ref.uid not in state.entries
    plugin.stop()
