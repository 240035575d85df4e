"""Driver-managed controller flows: daemon RCT + DaemonSet per CD, status from cliques, cleanup."""

from __future__ import annotations

from typing import Any

import controller_harness as harness
import pytest

from core import models, names
from core.computedomain import controlling, objects

RCT = "ResourceClaimTemplate"
CD = "ComputeDomain"
DS = "DaemonSet"
NS = harness.DRIVER_NAMESPACE


def _admitted_cd(
    state: harness.Harness, *, num_nodes: int = 0, config: models.DriverConfig | None = None
) -> models.ComputeDomain:
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team", num_nodes=num_nodes))
    state.converge([("team", "cd")], config=config or harness.driver_config())
    cd = state.compute_domain("team", "cd")
    assert cd is not None
    return cd


def _daemon(node: str, *, ready: bool, clique: str = "c1", index: int = 0) -> dict[str, Any]:
    return {
        "nodeName": node,
        "ipAddress": f"10.0.0.{index + 1}",
        "cliqueID": clique,
        "index": index,
        "status": "Ready" if ready else "NotReady",
    }


def test_driver_managed_add_creates_workload_rct_daemon_rct_and_daemonset() -> None:
    state = harness.Harness()
    config = harness.driver_config()
    state.create(CD, harness.compute_domain_json(name="cd", namespace="team"))
    cd = state.compute_domain("team", "cd")
    assert cd is not None

    actions = state.plan("team", "cd", config=config)

    creates = [a for a in actions if isinstance(a, models.CreateObject)]
    assert creates == [
        models.CreateObject(kind=RCT, obj=objects.workload_rct(cd, config=config)),
        models.CreateObject(kind=RCT, obj=objects.daemon_rct(cd, config=config)),
        models.CreateObject(kind=DS, obj=objects.daemonset(cd, config=config)),
    ]
    state.apply_all(actions)
    assert state.plan("team", "cd", config=config) == ()
    daemon_name = names.daemonset_name(cd.uid)
    assert state.get(RCT, NS, daemon_name) is not None
    ds = state.get(DS, NS, daemon_name)
    assert ds is not None
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {names.COMPUTE_DOMAIN_LABEL: cd.uid}
    assert pod["resourceClaims"] == [{"name": "daemon", "resourceClaimTemplateName": daemon_name}]
    # no cliques yet: admitted but not Ready
    assert cd.meta.name == "cd"
    fresh = state.compute_domain("team", "cd")
    assert fresh is not None and fresh.status is not None
    assert fresh.status.status is models.DomainStatus.NOT_READY


def test_daemon_rct_asks_for_the_daemon_device_with_the_domain_id() -> None:
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="cd", namespace="team", uid="u-1"),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="rct")
        ),
    )
    rct = objects.daemon_rct(cd, config=harness.driver_config())
    assert rct["metadata"]["namespace"] == NS
    assert rct["metadata"]["labels"][names.COMPUTE_DOMAIN_TARGET_LABEL] == names.TARGET_DAEMON
    devices = rct["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {"name": "daemon", "exactly": {"deviceClassName": names.DAEMON_DEVICE_CLASS}}
    ]
    assert devices["config"][0]["opaque"]["parameters"] == {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_DAEMON_CONFIG,
        "domainID": "u-1",
    }


@pytest.mark.parametrize(
    ("num_nodes", "ready", "expected"),
    [
        (0, [True, True], models.DomainStatus.READY),
        (0, [True, False], models.DomainStatus.NOT_READY),
        (0, [], models.DomainStatus.NOT_READY),
        (2, [True, True, False], models.DomainStatus.READY),
        (3, [True, True, False], models.DomainStatus.NOT_READY),
        (1, [False], models.DomainStatus.NOT_READY),
    ],
)
def test_driver_managed_status_comes_from_this_cds_clique_daemons(
    num_nodes: int, ready: list[bool], expected: models.DomainStatus
) -> None:
    state = harness.Harness()
    config = harness.driver_config()
    cd = _admitted_cd(state, num_nodes=num_nodes, config=config)
    daemons = [_daemon(f"node-{i}", ready=r, index=i) for i, r in enumerate(ready)]
    if daemons:
        state.write_clique(cd_uid=cd.uid, clique_id="uuid-a.1", daemons=daemons)
    # another CD's clique never counts
    state.write_clique(
        cd_uid="other-uid", clique_id="uuid-a.1", daemons=[_daemon("zz", ready=True)]
    )

    state.converge([("team", "cd")], config=config)

    cd = state.compute_domain("team", "cd")  # type: ignore[assignment]
    assert cd.status is not None
    assert cd.status.status is expected
    assert [n.name for n in cd.status.nodes] == [f"node-{i}" for i in range(len(ready))]
    assert state.plan("team", "cd", config=config) == ()


def test_status_nodes_merge_daemons_across_cliques() -> None:
    state = harness.Harness()
    config = harness.driver_config()
    cd = _admitted_cd(state, config=config)
    state.write_clique(cd_uid=cd.uid, clique_id="a.1", daemons=[_daemon("n2", ready=True)])
    state.write_clique(
        cd_uid=cd.uid, clique_id="b.7", daemons=[_daemon("n1", ready=True, clique="b.7")]
    )
    observed = state.observe(cd, config=config)
    status = controlling.desired_status(cd, observed=observed, config=config)
    assert status.status is models.DomainStatus.READY
    assert [(n.name, n.clique_id) for n in status.nodes] == [("n1", "b.7"), ("n2", "c1")]


def test_without_clique_gate_status_judges_the_nodes_daemons_wrote() -> None:
    state = harness.Harness()
    config = harness.driver_config(cliques=False)
    _admitted_cd(state, config=config)
    state.patch(
        CD, "team", "cd",
        {"status": {"status": "NotReady", "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 0,
             "status": "Ready"},
        ]}},
        subresource="status",
    )
    actions = state.plan("team", "cd", config=config)
    assert actions == (
        models.PatchObject(
            kind=CD, namespace="team", name="cd",
            patch={"status": {"status": "Ready", "nodes": [
                {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 0,
                 "status": "Ready"},
            ]}},
            subresource="status",
        ),
    )


def test_driver_managed_delete_removes_daemons_labels_cliques_then_the_cd_finalizer() -> None:
    state = harness.Harness()
    config = harness.driver_config()
    cd = _admitted_cd(state, config=config)
    state.add_node("n1", cd_uid=cd.uid)
    state.add_node("n2", cd_uid="someone-else")
    state.write_clique(cd_uid=cd.uid, clique_id="a.1", daemons=[_daemon("n1", ready=True)])
    state.converge([("team", "cd")], config=config)
    state.delete(CD, "team", "cd")

    first = state.plan("team", "cd", config=config)
    # cliques wait for the DaemonSet to be gone; the CD finalizer waits for everything
    assert {(type(a).__name__, getattr(a, "kind", "")) for a in first} == {
        ("DeleteObject", RCT),
        ("DeleteObject", DS),
        ("PatchObject", "Node"),
    }
    for _ in range(6):
        actions = state.plan("team", "cd", config=config)
        if any(getattr(a, "kind", "") == CD for a in actions):
            leftovers = [k for k in state.objects if k[0] != CD and k[0] != "Node"]
            assert leftovers == []
            assert all(
                names.COMPUTE_DOMAIN_LABEL not in n["metadata"]["labels"]
                or n["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] != cd.uid
                for n in state.of_kind("Node")
            )
        state.apply_all(actions)
    assert state.get(CD, "team", "cd") is None
    assert sorted(k[0] for k in state.objects) == ["Node", "Node"]
    n2 = state.get("Node", "", "n2")
    assert n2 is not None
    assert n2["metadata"]["labels"] == {names.COMPUTE_DOMAIN_LABEL: "someone-else"}


def test_stale_node_labels_are_removed_only_for_compute_domains_that_are_gone() -> None:
    state = harness.Harness()
    state.add_node("b", cd_uid="dead")
    state.add_node("a", cd_uid="live")
    state.add_node("c")
    state.add_node("d", cd_uid="dead")
    actions = controlling.plan_stale_node_labels(
        nodes=state.of_kind("Node"), live_cd_uids=frozenset({"live"}),
        config=harness.driver_config(),
    )
    assert [(a.name, a.patch) for a in actions] == [  # type: ignore[union-attr]
        ("b", {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}}),
        ("d", {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}}),
    ]
    assert all(a.resource_version for a in actions)  # type: ignore[union-attr]
    state.apply_all(actions)
    assert [n["metadata"]["labels"] for n in state.of_kind("Node")] == [
        {names.COMPUTE_DOMAIN_LABEL: "live"}, {}, {}, {},
    ]


def test_observe_picks_only_this_cds_objects() -> None:
    state = harness.Harness()
    config = harness.driver_config()
    cd = _admitted_cd(state, config=config)
    state.create(CD, harness.compute_domain_json(name="other", namespace="team"))
    state.converge([("team", "other")], config=config)
    other = state.compute_domain("team", "other")
    assert other is not None
    state.add_node("n1", cd_uid=cd.uid)
    state.add_node("n2", cd_uid=other.uid)
    state.write_clique(cd_uid=other.uid, clique_id="x.1", daemons=[_daemon("n2", ready=True)])

    observed = state.observe(cd, config=config)

    assert observed.workload_rct is not None and observed.workload_rct.name == "cd-channel"
    assert observed.daemonset is not None
    assert observed.daemonset.name == names.daemonset_name(cd.uid)
    assert observed.daemon_rct is not None
    assert [n.name for n in observed.labelled_nodes] == ["n1"]
    assert observed.cliques == ()
    index = controlling.index_cluster(state.lists())
    assert controlling.observe(
        cd, objects=index, config=config, conditions=observed.conditions
    ) == observed


def test_observe_tolerates_malformed_objects() -> None:
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="cd", namespace="team", uid="u"),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="rct")
        ),
    )
    junk: dict[str, list[dict[str, Any]]] = {
        "Node": [{"metadata": "nope"}, {"metadata": {"name": "n", "labels": {"x": 1}}}],
        "ComputeDomainClique": [
            {"metadata": {"name": "u.c", "namespace": NS}, "daemons": [1, {"nodeName": 3}]},
        ],
        "ResourceClaimTemplate": [{"metadata": {"name": "rct", "namespace": "team",
                                                "finalizers": "bad"}}],
    }
    observed = controlling.observe(cd, objects=junk, config=harness.driver_config(),
                                   conditions=())
    assert observed.workload_rct is not None and observed.workload_rct.finalizers == ()
    assert all(c.daemons == () for c in observed.cliques)  # malformed daemons never count
    assert observed.labelled_nodes == ()


def _statuses(state: harness.Harness) -> tuple[models.DomainStatus, list[str]]:
    cd = state.compute_domain("team", "cd")
    assert cd is not None and cd.status is not None
    return cd.status.status, [n.name for n in cd.status.nodes]


def test_a_released_node_whose_daemon_pod_is_gone_leaves_the_status_and_the_clique() -> None:
    """Upstream's "global CD status" test: the workload pod is deleted, the node released,
    its daemon pod torn down; the CD must drop the node (NotReady with numNodes 1) even when
    the daemon could not remove its own entry on the way out."""
    state = harness.Harness(observe_pods=True)
    config = harness.driver_config()
    cd = _admitted_cd(state, num_nodes=1, config=config)
    state.add_node("n1", cd_uid=cd.uid)
    pod = state.add_daemon_pod("n1", cd_uid=cd.uid)
    state.write_clique(cd_uid=cd.uid, clique_id="a.1", daemons=[_daemon("n1", ready=True)])
    state.converge([("team", "cd")], config=config)
    assert _statuses(state) == (models.DomainStatus.READY, ["n1"])

    # The plugin removed the label; the daemon pod is still terminating: its entry stays.
    state.patch("Node", "", "n1", {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}})
    state.converge([("team", "cd")], config=config)
    assert _statuses(state) == (models.DomainStatus.READY, ["n1"])

    # The pod is gone and its entry is still there (the daemon was killed): dropped.
    state.delete("Pod", NS, pod)
    state.converge([("team", "cd")], config=config)
    assert _statuses(state) == (models.DomainStatus.NOT_READY, [])
    clique = state.get(names.KIND_COMPUTE_DOMAIN_CLIQUE, NS, f"{cd.uid}.a.1")
    assert clique is not None and clique["daemons"] == []
    assert state.plan("team", "cd", config=config) == ()


def test_a_labelled_node_keeps_its_entry_while_its_daemon_pod_is_replaced() -> None:
    state = harness.Harness(observe_pods=True)
    config = harness.driver_config()
    cd = _admitted_cd(state, config=config)
    state.add_node("n1", cd_uid=cd.uid)
    state.add_node("n2")
    state.add_daemon_pod("n2", cd_uid=cd.uid)  # released, pod still terminating
    state.write_clique(cd_uid=cd.uid, clique_id="a.1", daemons=[
        _daemon("n1", ready=True), _daemon("n2", ready=True, index=1),
    ])
    state.converge([("team", "cd")], config=config)
    # n1: no pod right now (the DaemonSet makes a new one), but still labelled: kept.
    assert _statuses(state) == (models.DomainStatus.READY, ["n1", "n2"])


def test_without_clique_gate_a_gone_daemons_node_leaves_the_status() -> None:
    state = harness.Harness(observe_pods=True)
    config = harness.driver_config(cliques=False)
    _admitted_cd(state, num_nodes=1, config=config)
    state.patch(
        CD, "team", "cd",
        {"status": {"status": "Ready", "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 0,
             "status": "Ready"},
        ]}},
        subresource="status",
    )
    state.converge([("team", "cd")], config=config)
    assert _statuses(state) == (models.DomainStatus.NOT_READY, [])


def test_unobserved_daemon_pods_never_prune_an_entry() -> None:
    state = harness.Harness()  # e.g. `plan` on a cluster dump without pods
    config = harness.driver_config()
    cd = _admitted_cd(state, num_nodes=1, config=config)
    state.write_clique(cd_uid=cd.uid, clique_id="a.1", daemons=[_daemon("n1", ready=True)])
    state.converge([("team", "cd")], config=config)
    assert _statuses(state) == (models.DomainStatus.READY, ["n1"])
