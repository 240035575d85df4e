"""The plugin's binding-condition rounds against the in-memory cluster (its node, claims and
ComputeDomains): label the node for a waiting claim, set the ready condition when the domain
lists the node Ready, the failure condition after the timeout, release a label whose claims
left before binding. (The embedded cluster drops binding conditions as a cluster without gate
DRADeviceBindingConditions does, so the waiting claims are given to the round; the
control-plane tier runs the whole path on a real scheduler.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.kubeletplugin import binding_watch
from apps.kubeletplugin import domains as plugin_domains
from core import kinds, models, names
from core.computedomain import binding

NODE = "gb200-rack1-node07"
NAMESPACE = "team"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster() -> Iterator[memory_cluster.InMemoryCluster]:
    made = memory_cluster.InMemoryCluster()
    made.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": NODE}})
    yield made
    made.close()


def make_domain(cluster: memory_cluster.InMemoryCluster) -> str:
    created = cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd-train", "namespace": NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-train-channel"}}},
    })
    return str(created["metadata"]["uid"])


def mark_ready(cluster: memory_cluster.InMemoryCluster) -> None:
    cluster.patch(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name="cd-train",
                  subresource="status", patch={"status": {"status": "Ready", "nodes": [{
                      "name": NODE, "ipAddress": "10.0.0.7", "cliqueID": "c.1", "index": 0,
                      "status": "Ready"}]}})


def make_claim(cluster: memory_cluster.InMemoryCluster, domain_id: str) -> binding.ChannelClaim:
    """A claim allocated this node's channel; its waiting view, as a gated cluster shows it."""
    created: Any = cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "job-0-channel", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": "compute-domain-default-channel.nvidia.com"}}]}},
    })
    cluster.patch(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="job-0-channel",
                  subresource="status", patch={"status": {"allocation": {"devices": {
                      "results": [{"request": "channel", "driver": names.DRIVER_NAME,
                                   "pool": NODE, "device": "channel-0"}]}}}})
    return binding.ChannelClaim(
        ref=models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]),
                            namespace=NAMESPACE, name="job-0-channel"),
        pool=NODE, device="channel-0", domain_id=domain_id, allocated_at="t0", waiting=True,
    )


def node_label(cluster: memory_cluster.InMemoryCluster) -> str | None:
    labels = cluster.get(kinds.NODE.kind, namespace="", name=NODE)["metadata"].get("labels")
    return (labels or {}).get(names.COMPUTE_DOMAIN_LABEL)


def conditions(cluster: memory_cluster.InMemoryCluster) -> dict[str, tuple[str, str]]:
    claim = cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="job-0-channel")
    (entry,) = claim["status"]["devices"]
    assert (entry["driver"], entry["pool"], entry["device"]) == (
        names.DRIVER_NAME, NODE, "channel-0")
    return {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}


def watch(cluster: memory_cluster.InMemoryCluster, clock: Clock) -> binding_watch.BindingWatch:
    return binding_watch.BindingWatch(
        cluster, node_name=NODE, domains=plugin_domains.DomainCache(cluster),
        timeout_s=60.0, clock=clock,
    )


def test_a_waiting_claim_labels_the_node_then_is_ready_with_its_daemon(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    caplog.set_level("INFO")
    rounds.run_round((claim,))
    assert node_label(cluster) == domain_id
    assert "event=node_labelled" in caplog.text and "reason=binding_conditions" in caplog.text
    claim_obj = cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE,
                            name="job-0-channel")
    assert not claim_obj["status"].get("devices")  # the daemon is not ready yet
    mark_ready(cluster)
    rounds.run_round((claim,))
    assert conditions(cluster) == {binding.IMEX_DAEMON_READY: ("True", "IMEXDaemonReady")}
    assert "event=binding_condition_set" in caplog.text


def test_a_daemon_not_ready_in_time_sets_the_failure_condition(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    clock = Clock()
    rounds = watch(cluster, clock)
    rounds.run_round((claim,))
    clock.now += 59
    rounds.run_round((claim,))
    claim_obj = cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE,
                            name="job-0-channel")
    assert not claim_obj["status"].get("devices")
    clock.now += 1
    with caplog.at_level("WARNING"):
        rounds.run_round((claim,))
    assert conditions(cluster) == {binding.IMEX_DAEMON_FAILED: ("True", "IMEXDaemonNotReady")}
    assert "condition=compute-domain.nvidia.com/imex-daemon-failed" in caplog.text


def test_a_new_allocation_waits_anew(cluster: memory_cluster.InMemoryCluster) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    clock = Clock()
    rounds = watch(cluster, clock)
    rounds.run_round((claim,))
    clock.now += 59
    again = binding.ChannelClaim(**{**claim.__dict__, "allocated_at": "t1"})
    rounds.run_round((again,))
    clock.now += 30
    rounds.run_round((again,))
    claim_obj = cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE,
                            name="job-0-channel")
    assert not claim_obj["status"].get("devices")


def test_a_missing_domain_fails_the_binding_at_once(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    claim = make_claim(cluster, "5b2f0e1c-cd09-4b7a-9d3e-000000000009")
    watch(cluster, Clock()).run_round((claim,))
    assert conditions(cluster) == {binding.IMEX_DAEMON_FAILED: ("True", "ComputeDomainNotFound")}
    assert node_label(cluster) is None


def test_a_label_set_for_claims_that_left_before_binding_is_released(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    rounds.run_round((claim,))
    assert node_label(cluster) == domain_id
    still_held = binding.ChannelClaim(**{**claim.__dict__, "waiting": False})
    rounds.run_round((still_held,))  # bound and running: the label stays
    assert node_label(cluster) == domain_id
    with caplog.at_level("INFO"):
        rounds.run_round(())
    assert node_label(cluster) is None
    assert "event=node_label_released" in caplog.text and "claims_left_unbound" in caplog.text


def test_a_label_found_set_for_a_waiting_claim_is_released_when_its_claims_leave(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    """As after a restart of the plugin: the label was set before, the claim still waits."""
    domain_id = make_domain(cluster)
    cluster.patch(kinds.NODE.kind, namespace="", name=NODE,
                  patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: domain_id}}})
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    rounds.run_round((claim,))
    assert node_label(cluster) == domain_id
    rounds.run_round(())
    assert node_label(cluster) is None


def test_a_label_of_running_workloads_is_left_to_their_unprepare(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    """No claim of the domain waited here (pods bound before): the rounds never touch it."""
    domain_id = make_domain(cluster)
    cluster.patch(kinds.NODE.kind, namespace="", name=NODE,
                  patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: domain_id}}})
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    rounds.run_round((binding.ChannelClaim(**{**claim.__dict__, "waiting": False}),))
    rounds.run_round(())
    assert node_label(cluster) == domain_id


def test_a_failed_label_write_is_logged_and_tried_again_next_round(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    cluster.set_conflict_injection(1)
    with caplog.at_level("WARNING"):
        rounds.run_round((claim,))
    assert node_label(cluster) is None
    assert "event=node_label_failed" in caplog.text
    rounds.run_round((claim,))
    assert node_label(cluster) == domain_id


def test_a_failed_condition_write_is_logged_and_tried_again_next_round(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    domain_id = make_domain(cluster)
    claim = make_claim(cluster, domain_id)
    rounds = watch(cluster, Clock())
    rounds.run_round((claim,))
    mark_ready(cluster)
    cluster.set_conflict_injection(1)
    with caplog.at_level("WARNING"):
        rounds.run_round((claim,))
    assert "event=binding_condition_failed" in caplog.text and "retry=next_round" in caplog.text
    rounds.run_round((claim,))
    assert conditions(cluster) == {binding.IMEX_DAEMON_READY: ("True", "IMEXDaemonReady")}


def test_a_claim_gone_before_its_condition_is_written_needs_nothing(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    claim = make_claim(cluster, "5b2f0e1c-cd09-4b7a-9d3e-000000000009")
    cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="job-0-channel")
    with caplog.at_level("WARNING"):
        watch(cluster, Clock()).run_round((claim,))
    assert "event=binding_condition_failed" not in caplog.text
