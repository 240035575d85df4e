"""Channel assignment under random interleavings (hypothesis state machine).

ComputeDomains and their workload claims come and go, the controller is restarted (a failover:
its in-memory choices are lost, the table is rebuilt from the cluster) and syncs CDs one at a
time in any order, or all of them (as a resync does), all on the embedded cluster. The
controller is stepped by hand through `Reconciler.sync_domain`, the call its workers make per
key, observing from fresh lists, so every interleaving is one hypothesis can replay. After every
step: no two live CDs share a channel, and no channel is given to a CD while a claim of another
CD still carries it. At the end, once the controller settles: every CD is Ready with a channel,
or NotReady saying why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from adapters.memory import cluster as memory_cluster
from apps.controller import reconciler as controller_reconciler
from core import errors, kinds, models, names
from core.computedomain import channels, controlling

CD = kinds.COMPUTE_DOMAIN.kind
RCT = kinds.RESOURCE_CLAIM_TEMPLATE.kind
CLAIM = kinds.RESOURCE_CLAIM.kind
NS = "team"
MAX_CHANNELS = 6  # IDs 1..5: small, so exhaustion and reuse happen often
CONFIG = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.CHANNEL,
    gates=models.FeatureGates(values={"HostManagedIMEXDaemon": True}), namespace="driver",
    max_channels=MAX_CHANNELS,
)


def _cd_json(name: str) -> dict[str, Any]:
    return {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}}}


def _channel(cd: Mapping[str, Any]) -> int | None:
    return channels.domain_channel_from_k8s(cd).channel_id


class ChannelAssignment(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count(1)
        self.cluster = memory_cluster.InMemoryCluster(
            uid_factory=lambda: f"00000000-0000-4000-8000-{next(counter):012d}"
        )
        self.names = itertools.count()
        self.seen: set[str] = set()  # UIDs of the CDs the last full sync saw
        self.pass_table: channels.ChannelTable | None = None
        self.controller = self._reconciler()

    # ---------------------------------------------------------------- reads

    def _cds(self) -> list[Mapping[str, Any]]:
        return list(self.cluster.list(CD).items)

    def _claims(self) -> list[Mapping[str, Any]]:
        return list(self.cluster.list(CLAIM).items)

    # ---------------------------------------------------------------- user side

    @rule(count=st.integers(1, 4))
    def create_domains(self, count: int) -> None:
        for _ in range(count):
            self.cluster.create(CD, _cd_json(f"cd-{next(self.names)}"))

    @precondition(lambda self: bool(self._cds()))
    @rule(pick=st.integers(0, 10_000))
    def delete_domain(self, pick: int) -> None:
        cds = self._cds()
        name = cds[pick % len(cds)]["metadata"]["name"]
        self.cluster.delete(CD, namespace=NS, name=name)

    @precondition(lambda self: bool(self.cluster.list(RCT).items))
    @rule(pick=st.integers(0, 10_000))
    def create_claim_from_a_template(self, pick: int) -> None:
        rcts = self.cluster.list(RCT).items
        rct = rcts[pick % len(rcts)]
        self.cluster.create(CLAIM, {
            "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{next(self.names)}", "namespace": NS},
            "spec": rct["spec"]["spec"],
        })

    @precondition(lambda self: bool(self._claims()))
    @rule(pick=st.integers(0, 10_000))
    def delete_claim(self, pick: int) -> None:
        claims = self._claims()
        name = claims[pick % len(claims)]["metadata"]["name"]
        self.cluster.delete(CLAIM, namespace=NS, name=name)

    # ---------------------------------------------------------------- controller side

    def _reconciler(self) -> controller_reconciler.Reconciler:
        reconciler = controller_reconciler.Reconciler(cluster=self.cluster, config=CONFIG)
        reconciler.channels.use_snapshot(self._table)
        return reconciler

    def _table(self, _uid: str, max_channels: int) -> channels.ChannelTable:
        """The channel table from lists, once per pass (as a controller's caches show it); the
        allocator lays its own pending choices over it."""
        if self.pass_table is None:
            held = [channels.domain_channel_from_k8s(o) for o in self._cds()]
            claims = [c for o in self._claims() for c in channels.claim_channels_from_k8s(o)]
            self.pass_table = channels.build_table(domains=held, claims=claims,
                                                   max_channels=max_channels)
        return self.pass_table

    def _observe(self) -> controller_reconciler.Observe:
        """What a worker would see, from fresh lists: the CD's objects and its channel rivals."""
        index = controlling.index_cluster({RCT: self.cluster.list(RCT).items})
        domains = self._cds()
        claims = [c for o in self._claims() for c in channels.claim_channels_from_k8s(o)]

        def observe(cd: models.ComputeDomain, obj: Mapping[str, Any]) -> controlling.Observed:
            observed = controlling.observe(cd, objects=index, config=CONFIG,
                                           conditions=controlling.conditions_from_k8s(obj))
            rivals = channels.rivals_from_k8s(obj, holders=domains, claims=claims)
            return dataclasses.replace(observed, channel_rivals=rivals)

        return observe

    def _sync(self, raw: Mapping[str, Any], observe: controller_reconciler.Observe) -> int:
        # A stale observation (conflict / gone) fails the sync; the next one retries.
        with contextlib.suppress(errors.ClusterError):
            return self.controller.sync_domain(raw, observe=observe)
        return 0

    def _sync_all(self) -> int:
        """Every CD once, as a resync queues them all, observed from one set of lists (the
        allocator's pending choices cover this pass's own); returns the actions applied."""
        cds = self._cds()
        live = {str(cd["metadata"]["uid"]) for cd in cds}
        for gone in self.seen - live:  # what the informer's delete handler tells the controller
            self.controller.forget_domain(gone)
        self.seen = live
        self.pass_table = None
        observe = self._observe()
        return sum(self._sync(raw, observe) for raw in cds)

    @precondition(lambda self: bool(self._cds()))
    @rule(pick=st.integers(0, 10_000))
    def sync_one_domain(self, pick: int) -> None:
        cds = self._cds()
        self.pass_table = None
        self._sync(cds[pick % len(cds)], self._observe())

    @rule()
    def sync_all(self) -> None:
        self._sync_all()

    @rule()
    def fail_over(self) -> None:
        self.controller = self._reconciler()

    # ---------------------------------------------------------------- what must always hold

    @invariant()
    def no_two_live_domains_share_a_channel(self) -> None:
        seen: dict[int, str] = {}
        for cd in self._cds():
            channel = _channel(cd)
            if channel is None:
                continue
            assert 1 <= channel < MAX_CHANNELS
            assert channel not in seen, f"channel {channel}: {seen[channel]} and {cd['metadata']}"
            seen[channel] = cd["metadata"]["uid"]

    @invariant()
    def no_channel_is_given_while_another_domains_claim_carries_it(self) -> None:
        holders = {(c.channel_id, c.domain_uid) for claim in self._claims()
                   for c in channels.claim_channels_from_k8s(claim)}
        for cd in self._cds():
            channel = _channel(cd)
            for held, owner in holders:
                assert not (held == channel and owner != cd["metadata"]["uid"]), (
                    f"channel {channel} given to {cd['metadata']['name']} while a claim of "
                    f"{owner} carries it"
                )

    def teardown(self) -> None:
        # Eventually: with the controller left to settle, every CD is Ready with a channel or
        # NotReady with the reason.
        for _ in range(50):
            if self._sync_all() == 0:
                break
        else:
            raise AssertionError("the controller never settled")
        for cd in self._cds():
            if cd["metadata"].get("deletionTimestamp"):
                continue
            status = cd.get("status") or {}
            if status.get("status") == "Ready":
                assert _channel(cd) is not None
                continue
            conditions = controlling.conditions_from_k8s(cd)
            assert any(c.type == controlling.CHANNEL_ASSIGNED_CONDITION and c.status == "False"
                       and c.reason == channels.EXHAUSTED_REASON for c in conditions), cd


TestChannelAssignment = ChannelAssignment.TestCase
TestChannelAssignment.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None
)


def test_hundreds_of_domains_churning_through_five_channels_never_share_one() -> None:
    machine = ChannelAssignment()
    for round_ in range(60):
        machine.create_domains(4)
        machine.sync_all()
        machine.create_claim_from_a_template(round_)
        machine.delete_domain(round_)
        machine.delete_domain(round_ * 7)
        if round_ % 5 == 0:
            machine.fail_over()
        machine.sync_all()
        if round_ % 2 == 0:
            machine.delete_claim(round_)
        machine.no_two_live_domains_share_a_channel()
        machine.no_channel_is_given_while_another_domains_claim_carries_it()
    machine.teardown()
