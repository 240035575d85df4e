"""Property tests of the controller planner over random histories (hypothesis).

A history interleaves users (create/delete CDs, delete RCTs), the controller (plan now, apply a
prefix of the plan later, as an executor that stops at the first failure would) and, in
driver-managed mode, the plugin (node labels) and the IMEX daemons (cliques).
"""

from __future__ import annotations

from typing import Any

import controller_harness as harness
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core import models, names
from core.computedomain import controlling

CD = "ComputeDomain"
RCT = "ResourceClaimTemplate"
# (namespace, name, RCT name): slots 0 and 1 compete for one RCT name on purpose.
SLOTS = (("a", "cd0", "r0"), ("a", "cd1", "r0"), ("b", "cd2", "r2"))
DAEMON_KINDS = {"DaemonSet", "Node", "ComputeDomainClique"}

slot = st.integers(min_value=0, max_value=len(SLOTS) - 1)
prefix = st.one_of(st.none(), st.integers(min_value=0, max_value=4))
op = st.one_of(
    st.tuples(st.just("create"), slot, st.sampled_from(["Single", "All"]), st.integers(0, 3)),
    st.tuples(st.just("delete"), slot),
    st.tuples(st.just("plan"), slot),
    st.tuples(st.just("apply"), slot, prefix),
    st.tuples(st.just("reconcile"), slot, prefix),
    st.tuples(st.just("delete_rct"), slot),
    st.tuples(st.just("label_node"), slot, st.integers(0, 2)),
    st.tuples(st.just("daemon"), slot, st.integers(0, 2), st.booleans()),
)


def _owned_rcts(state: harness.Harness, cd_uid: str) -> list[dict[str, Any]]:
    return [
        r for r in state.of_kind(RCT)
        if r["metadata"].get("labels", {}).get(names.COMPUTE_DOMAIN_LABEL) == cd_uid
    ]


def _removes_cd_finalizer(actions: tuple[models.ClusterAction, ...]) -> bool:
    for a in actions:
        if isinstance(a, models.PatchObject) and a.kind == CD and not a.subresource:
            finalizers = a.patch.get("metadata", {}).get("finalizers")
            if finalizers is not None and names.COMPUTE_DOMAIN_FINALIZER not in finalizers:
                return True
    return False


def _check_plan(
    state: harness.Harness,
    actions: tuple[models.ClusterAction, ...],
    *,
    cd: models.ComputeDomain,
    config: models.DriverConfig,
) -> None:
    if config.host_managed:
        for a in actions:
            assert getattr(a, "kind", "") not in DAEMON_KINDS, a
            assert getattr(a, "namespace", "") != config.namespace, a
            # The events a host-managed admission may raise: `All` turned into `Single`, and
            # an RCT name another CD holds (slots 0 and 1 compete for one on purpose).
            assert not isinstance(a, models.EmitEvent) or a.reason in (
                controlling.ALLOCATION_MODE_OVERRIDDEN_REASON, "ResourceClaimTemplateNameTaken",
            ), a
    if _removes_cd_finalizer(actions):
        # never in a plan that runs while anything the CD owns still exists
        assert _owned_rcts(state, cd.uid) == []
        assert state.get("DaemonSet", config.namespace, names.daemonset_name(cd.uid)) is None


def _run_history(
    state: harness.Harness, ops: list[tuple[Any, ...]], *, config: models.DriverConfig
) -> None:
    pending: dict[int, tuple[models.ClusterAction, ...]] = {}
    for step in ops:
        kind, i = step[0], step[1]
        namespace, name, rct_name = SLOTS[i]
        cd = state.compute_domain(namespace, name)
        if kind == "create" and cd is None:
            state.create(CD, harness.compute_domain_json(
                name=name, namespace=namespace, rct_name=rct_name,
                allocation_mode=step[2], num_nodes=step[3],
            ))
        elif kind == "delete" and cd is not None:
            state.delete(CD, namespace, name)
        elif kind in ("plan", "reconcile") and cd is not None:
            actions = state.plan(namespace, name, config=config)
            _check_plan(state, actions, cd=cd, config=config)
            if kind == "plan":
                pending[i] = actions
            else:
                state.apply_all(actions, limit=step[2])
        elif kind == "apply" and i in pending:
            state.apply_all(pending.pop(i), limit=step[2])
        elif kind == "delete_rct" and state.get(RCT, namespace, rct_name) is not None:
            state.delete(RCT, namespace, rct_name)
        elif kind == "label_node" and cd is not None and not cd.meta.deleting:
            # the plugin labels a node once it prepared a channel there (driver-managed only)
            if not config.host_managed and state.get("Node", "", f"n{step[2]}") is None:
                state.add_node(f"n{step[2]}", cd_uid=cd.uid)
        elif kind == "daemon" and cd is not None and not config.host_managed:
            ds = state.get("DaemonSet", config.namespace, names.daemonset_name(cd.uid))
            if ds is not None and not ds["metadata"].get("deletionTimestamp"):
                clique = state.get(
                    "ComputeDomainClique", config.namespace, f"{cd.uid}.c.1"
                ) or {"daemons": []}
                daemons = [d for d in clique["daemons"] if d["nodeName"] != f"n{step[2]}"]
                daemons.append({
                    "nodeName": f"n{step[2]}", "ipAddress": f"10.0.0.{9 - step[2]}",
                    "cliqueID": "c.1", "index": step[2],
                    "status": "Ready" if step[3] else "NotReady",
                })
                state.write_clique(cd_uid=cd.uid, clique_id="c.1", daemons=daemons)


def _check_converged(state: harness.Harness, *, config: models.DriverConfig) -> None:
    targets = [(ns, n) for ns, n, _ in SLOTS]
    state.converge(targets, config=config)
    live = {}
    for namespace, name, rct_name in SLOTS:
        assert state.plan(namespace, name, config=config) == ()
        cd = state.compute_domain(namespace, name)
        if cd is None:
            continue
        assert not cd.meta.deleting
        live[cd.uid] = cd
        assert names.COMPUTE_DOMAIN_FINALIZER in cd.meta.finalizers
        owner = state.get(RCT, namespace, rct_name)
        assert owner is not None
        ours = owner["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == cd.uid
        assert cd.status is not None
        if config.host_managed:
            assert cd.status.status is (
                models.DomainStatus.READY if ours else models.DomainStatus.NOT_READY
            )
            assert cd.status.nodes == ()
    # nothing left behind for CDs that are gone
    for r in state.of_kind(RCT):
        assert r["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] in live
    for k in state.objects:
        if k[0] in ("DaemonSet", "ComputeDomainClique"):
            assert not config.host_managed
            assert any(uid in k[2] for uid in live)
    if config.host_managed:
        assert not any(k[0] in DAEMON_KINDS for k in state.objects)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=40))
def test_host_managed_plans_never_touch_daemon_objects_and_converge(
    ops: list[tuple[Any, ...]],
) -> None:
    state = harness.Harness()
    config = harness.host_config()
    _run_history(state, ops, config=config)
    _check_converged(state, config=config)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=40))
def test_driver_managed_histories_converge_without_leftovers(ops: list[tuple[Any, ...]]) -> None:
    state = harness.Harness()
    config = harness.driver_config()
    _run_history(state, ops, config=config)
    _check_converged(state, config=config)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(op.filter(lambda o: o[0] != "delete_rct"), max_size=30),
    host=st.booleans(),
)
# Found by hypothesis: cd0 is refused (Admitted=False) while deleted cd1's RCT still holds
# the name, then admitted; the plan must clear that condition from the CD's own status.
@example(
    ops=[
        ("create", 1, "Single", 0), ("reconcile", 1, None), ("delete", 1), ("reconcile", 1, None),
        ("create", 0, "Single", 0), ("reconcile", 0, None), ("reconcile", 1, None),
    ],
    host=False,
)
def test_plan_apply_all_then_plan_again_gives_nothing(
    ops: list[tuple[Any, ...]], host: bool
) -> None:
    """For every live CD, from any state users, daemons and partial applies can reach."""
    state = harness.Harness()
    config = harness.host_config() if host else harness.driver_config()
    _run_history(state, ops, config=config)
    for namespace, name, _ in SLOTS:
        cd = state.compute_domain(namespace, name)
        if cd is None or cd.meta.deleting:
            continue
        observed = state.observe(cd, config=config)
        actions = controlling.plan_compute_domain(cd, observed=observed, config=config)
        assert actions == controlling.plan_compute_domain(cd, observed=observed, config=config)
        assert state.apply_all(actions) == len(actions)
        assert state.plan(namespace, name, config=config) == ()
