"""Two controllers at once on a real kube-apiserver never leave one IMEX channel to two
ComputeDomains (issue 17, "the isolation hole").

Each controller is a real process with the chart's identity and environment, talking to the
API server through its own `LeaseHoldingProxy`. Bursts of ComputeDomains are created while:
- both are elected (the chart's default), the leader renewing normally;
- both are elected and the leader's lease renewals are stalled (the proxy holds the leases
  path): it must stop writing before the other may take the lease; it exits, and is started
  again as its pod would be;
- neither is elected (the old default during a RollingUpdate overlap), and each burst gets
  one duplicate written as a racing controller would: it is found and re-assigned before any
  claim uses it, with an Event on both ComputeDomains.
A sampler lists the ComputeDomains all along: under election no instant may show two live
ComputeDomains naming one channel; in every case, each burst settles with every ComputeDomain
Ready on a channel of its own and its template carrying that channel.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import realkube_driver
from realkube_delay_proxy import LeaseHoldingProxy
from realkube_driver import NAMESPACE, WORKLOAD_NAMESPACE, AppProcess, Driver
from realkube_server import wait_for

from adapters.kube import KubeCluster
from core import errors, kinds, names
from core.computedomain import channels, controlling

# NB: takeovers wait out lease durations and restart processes: more than the default 180 s
# on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MODE = "hostManaged-channel"
LEASE = "compute-domain-controller"
IDENTITIES = ("controller-a", "controller-b")
BURSTS = 6
PER_BURST = 20
# Without election: created from parallel clients (more interleaving).
OVERLAP_BURSTS = 4
OVERLAP_PER_BURST = 25
# Short leader-election timings keep a takeover within seconds (client-go's: 15/10/2 s).
ELECTED = {"LEADER_ELECT": "true", "LEASE_DURATION_SECONDS": "4",
           "RENEW_DEADLINE_SECONDS": "2.5", "RETRY_PERIOD_SECONDS": "0.5"}


@pytest.fixture(scope="module")
def installed(real_kube: Any) -> Iterator[Driver]:
    driver = realkube_driver.Driver(real_kube, mode=MODE, workdir=real_kube.workdir).install()
    yield driver
    driver.stop()


class Replica:
    """One controller process behind its own proxy; `restart()` as its pod would."""

    def __init__(self, driver: Driver, identity: str, env: Mapping[str, str]) -> None:
        kube = driver.kube
        certs = kube.workdir / "certs"
        self.proxy = LeaseHoldingProxy(
            upstream_port=kube.port, cert_file=str(certs / "apiserver.crt"),
            key_file=str(certs / "apiserver.key"), ca_file=str(kube.ca_file))
        token = driver.controller_credentials().token
        self._env = {**env, "KUBECONFIG": str(kube.kubeconfig(
            token, name=f"{identity}-via-proxy", server=self.proxy.url))}
        self._driver = driver
        self.identity = identity
        self.process = self._start()

    def _start(self) -> AppProcess:
        return self._driver.start_controller(identity=self.identity, extra_env=self._env)

    def restart(self) -> None:
        self.process.stop()
        self.process = self._start()

    def stop(self) -> None:
        self.process.stop()
        self.proxy.close()


def _lease_holder(admin: KubeCluster) -> str:
    try:
        lease = admin.get(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE)
    except errors.NotFoundError:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _forget_lease(admin: KubeCluster) -> None:
    """No holder left over from an earlier test's replicas (same identities): the first holder
    a test sees must be one of its own replicas."""
    with contextlib.suppress(errors.NotFoundError):
        admin.delete(kinds.LEASE.kind, namespace=NAMESPACE, name=LEASE)


def _create(admin: KubeCluster, name: str) -> None:
    # NB: a create whose answer was lost is retried by the client and then finds its own object:
    # already there is done, as for a job launcher that retries.
    with contextlib.suppress(errors.AlreadyExistsError):
        _create_once(admin, name)


def _create_once(admin: KubeCluster, name: str) -> None:
    admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })


def _create_at_once(driver: Driver, names_: list[str]) -> None:
    """Create many ComputeDomains from parallel clients, as a job launcher would (one client
    per thread: NB a client is not shared between threads)."""
    local = threading.local()

    def create(name: str) -> None:
        if not hasattr(local, "admin"):
            local.admin = driver.admin()
        _create(local.admin, name)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(create, names_))


def duplicates(domains: list[Mapping[str, Any]]) -> dict[int, list[str]]:
    """Channels named by more than one live ComputeDomain's status."""
    by_channel: dict[int, list[str]] = collections.defaultdict(list)
    for cd in domains:
        channel = channels.domain_channel_from_k8s(cd).channel_id
        if channel is not None:
            by_channel[channel].append(cd["metadata"]["name"])
    return {c: n for c, n in by_channel.items() if len(n) > 1}


class Sampler:
    """Lists the ComputeDomains over and over; keeps every instant that showed a duplicate."""

    def __init__(self, driver: Driver) -> None:
        self._admin = driver.admin()  # its own client: NB a client is not shared by threads
        self.samples = 0
        self.seen: list[dict[int, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):  # NB: a list of every CD costs the API server
            found = duplicates(list(self._admin.list(kinds.COMPUTE_DOMAIN.kind,
                                                     namespace=WORKLOAD_NAMESPACE).items))
            self.samples += 1
            if found:
                self.seen.append(found)

    def stop(self) -> None:
        self._stop.set()
        # NB: no timeout: its client is closed only once its last list has returned (within
        # the client's read timeout). A socket closed under a read frees a descriptor that the
        # next connection of this process takes while the read goes on (see
        # `realkube_delay_proxy.LeaseHoldingProxy`).
        self._thread.join()
        self._admin.close()


class Settle:
    """One poll of "the burst settled"; remembers why the last poll said no, so a timeout
    says what was still missing, and restarts a replica that exited on losing its lease
    (exit 1, on purpose), as its pod's restart policy would: on a loaded machine both
    replicas can miss a renew deadline in turn, and nobody would be left to settle."""

    def __init__(self, admin: KubeCluster, prefix: str, replicas: list[Replica]) -> None:
        self._admin = admin
        self._prefix = prefix
        self._replicas = replicas
        self.why_not = "not polled yet"
        self.restarts = 0

    def __call__(self, count: int) -> bool:
        self.restart_exited()
        self.why_not = self._missing(count)
        return not self.why_not

    def restart_exited(self) -> None:
        for replica in self._replicas:
            if replica.process.running:
                continue
            # A replica that lost its lease exits 1 on purpose; anything else is a failure.
            assert replica.process.wait(1) == 1, replica.process.output()[-4000:]
            replica.restart()
            self.restarts += 1

    def _missing(self, count: int) -> str:
        admin = self._admin
        domains = [o for o in admin.list(kinds.COMPUTE_DOMAIN.kind,
                                         namespace=WORKLOAD_NAMESPACE).items
                   if o["metadata"]["name"].startswith(self._prefix)]
        if len(domains) != count:
            return f"{len(domains)} of {count} ComputeDomains exist"
        if found := duplicates(domains):
            return f"channels named twice: {found}"
        templates = {o["metadata"]["name"]: channels.rct_channel_from_k8s(o) for o in admin.list(
            kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=WORKLOAD_NAMESPACE).items
            if not o["metadata"].get("deletionTimestamp")}
        waiting: list[str] = []
        for cd in domains:
            name = cd["metadata"]["name"]
            status = cd.get("status") or {}
            channel = status.get("channelID")
            if status.get("status") != "Ready" or channel is None:
                waiting.append(f"{name}: status {status.get('status')!r} channel {channel!r}")
            elif templates.get(f"{name}-channel") != channel:
                waiting.append(f"{name}: template has channel "
                               f"{templates.get(f'{name}-channel')!r}, status {channel}")
            elif any(c.type == channels.UNIQUE_CONDITION
                     for c in controlling.conditions_from_k8s(cd)):
                waiting.append(f"{name}: still marked {channels.UNIQUE_CONDITION}")
        if waiting:
            return f"{len(waiting)} not settled, e.g. {'; '.join(waiting[:3])}"
        return ""

    def wait(self, count: int, *, what: str) -> None:
        self.wait_also(count, lambda: "", what=what)

    def wait_also(self, count: int, missing: Callable[[], str], *, what: str) -> None:
        """Wait until the burst settled and `missing()` says nothing is missing; on a
        timeout, say what was still missing and show the replicas' logs."""

        def done() -> bool:
            if not self(count):
                return False
            self.why_not = missing()
            return not self.why_not

        try:
            wait_for(done, what=what, timeout_s=120)
        except AssertionError as exc:
            logs = "\n".join(f"== {r.identity} running={r.process.running}\n"
                             f"{r.process.output()[-3000:]}" for r in self._replicas)
            raise AssertionError(f"{exc}: {self.why_not} (replica restarts: "
                                 f"{self.restarts})\n{logs}") from None


def _restart_exited(replicas: list[Replica]) -> None:
    for replica in replicas:
        if not replica.process.running:
            replica.restart()


@pytest.mark.parametrize("stall", [False, True], ids=["steady", "stalled-renewal"])
def test_two_elected_controllers_never_share_a_channel_across_bursts(
    installed: Driver, stall: bool
) -> None:
    admin = installed.admin()
    prefix = "stalled" if stall else "steady"
    _forget_lease(admin)
    replicas = [Replica(installed, identity, ELECTED) for identity in IDENTITIES]
    sampler = Sampler(installed)
    settle = Settle(admin, f"{prefix}-", replicas)
    takeovers = 0
    try:
        for burst in range(BURSTS):
            # Both replicas run as each burst starts: one may have lost the lease to load since
            # the last burst settled, and a stall needs a follower to take over.
            settle.restart_exited()
            leader = wait_for(lambda: _lease_holder(admin) in IDENTITIES
                              and _lease_holder(admin), what="a leader", timeout_s=60)
            stalled = None
            if stall and burst % 2 == 1:
                stalled = next(r for r in replicas if r.identity == leader)
                stalled.proxy.hold()  # its renewals now block, unanswered
            for i in range(PER_BURST):
                _create(admin, f"{prefix}-{burst}-{i}")
            if stalled is not None:
                follower = next(r.identity for r in replicas if r is not stalled)
                try:
                    wait_for(lambda f=follower: _lease_holder(admin) == f,
                             what="the follower to take the lease", timeout_s=60)
                except AssertionError as exc:
                    logs = "\n".join(f"== {r.identity} running={r.process.running}\n"
                                     f"{r.process.output()[-3000:]}" for r in replicas)
                    raise AssertionError(f"{exc}\n{logs}") from None
                takeovers += 1
                # The stalled leader stepped down on its own (its renewal still blocked).
                assert stalled.process.wait(30) == 1
                assert "lease renew deadline passed" in stalled.process.output()
                stalled.proxy.release()
                _restart_exited(replicas)
            settle.wait((burst + 1) * PER_BURST,
                        what=f"burst {burst} settled: each ComputeDomain Ready on a channel "
                        "of its own, its template carrying it")
    finally:
        sampler.stop()
        for replica in replicas:
            replica.stop()
    assert sampler.seen == [], f"two ComputeDomains named one channel: {sampler.seen[:3]}"
    assert sampler.samples > 0
    if stall:
        assert takeovers == BURSTS // 2
    print(f"\n{prefix}: {BURSTS} bursts x {PER_BURST} ComputeDomains, {takeovers} takeovers, "
          f"{settle.restarts} restarts after a lost lease, {sampler.samples} samples, "
          f"duplicates seen: {len(sampler.seen)}")


def _duplicate_events(admin: KubeCluster) -> set[str]:
    return {str(e["involvedObject"]["name"]) for e in admin.list(
        kinds.EVENT.kind, namespace=WORKLOAD_NAMESPACE).items
        if e.get("reason") == channels.DUPLICATE_REASON}


def test_two_unelected_controllers_leave_no_duplicate_once_a_burst_settles(
    installed: Driver,
) -> None:
    """Each burst also gets one duplicate written as a racing controller without the
    precondition would (an unconditional status patch naming another ComputeDomain's channel;
    creation times tie within a second, so either of the two may be the one that moves): it
    must be found and re-assigned, with an Event on both."""
    admin = installed.admin()
    replicas = [Replica(installed, identity, {"LEADER_ELECT": "false"})
                for identity in IDENTITIES]
    sampler = Sampler(installed)
    settle = Settle(admin, "overlap-", replicas)
    injected: set[str] = set()
    try:
        for burst in range(OVERLAP_BURSTS):
            batch = [f"overlap-{burst}-{i}" for i in range(OVERLAP_PER_BURST)]
            _create_at_once(installed, batch)
            total = (burst + 1) * OVERLAP_PER_BURST
            settle.wait(total, what=f"burst {burst} settled")
            older = admin.get(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE,
                              name="overlap-0-0")
            admin.patch(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE,
                        name=batch[-1], subresource="status",
                        patch={"status": {"channelID": older["status"]["channelID"]}})
            injected |= {"overlap-0-0", batch[-1]}
            settle.wait_also(total, lambda i=frozenset(injected): (
                "" if i <= (seen := _duplicate_events(admin))
                else f"{channels.DUPLICATE_REASON} events on {sorted(seen)}, want {sorted(i)}"),
                what=f"burst {burst}: the duplicate re-assigned and reported on both")
    finally:
        sampler.stop()
        for replica in replicas:
            replica.stop()
    every = list(admin.list(kinds.COMPUTE_DOMAIN.kind, namespace=WORKLOAD_NAMESPACE).items)
    assert duplicates(every) == {}
    print(f"\noverlap: {OVERLAP_BURSTS} bursts x {OVERLAP_PER_BURST} ComputeDomains, "
          f"{OVERLAP_BURSTS} injected duplicates, {sampler.samples} samples, instants with a "
          f"duplicate seen (all resolved): {len(sampler.seen)}")
