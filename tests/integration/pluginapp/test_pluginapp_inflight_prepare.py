"""A prepare the kubelet gave up on never comes back (upstream bug #1162).

The plugin's driver runs behind a real gRPC server on unix sockets, over the files and the
embedded cluster of a one-node deployment. Its cluster and checkpoint ports are wrapped so the
test can hold the prepare at any one point of its path (each API read, each lock, each durable
write), let the kubelet give up and/or unprepare the claim there, then let the prepare go on.
Whatever the point, the claim must end unprepared: no checkpoint entry holding it, no CDI file.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pluginapp_env import NAMESPACE, create_claim, create_domain, node

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import client as grpc_client
from adapters.grpc import server as grpc_server
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import kinds, models, names, ports
from core.computedomain import checkpoint_records as cd_records

HOLD_TIMEOUT_S = 30.0
# Every point a fresh host-managed prepare passes, in order: (what, occurrence).
POINTS = (
    ("lock", 1),  # the already-prepared check
    ("get:ResourceClaim", 1),
    ("get:Pod", 1),  # the reservedFor check
    ("list:ComputeDomain", 1),
    ("lock", 2),  # planning and the durable steps
    ("write:checkpoint", 1),  # PrepareStarted
    ("write:cdi", 1),
    ("write:checkpoint", 2),  # PrepareCompleted
)


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


class Hold:
    """Stops the first thread that reaches (`what`, `occurrence`) until `release()`."""

    def __init__(self, what: str = "", occurrence: int = 0) -> None:
        self._at = (what, occurrence)
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self.reached = threading.Event()
        self._released = threading.Event()

    def visit(self, what: str) -> None:
        with self._lock:
            self._seen[what] = self._seen.get(what, 0) + 1
            hit = (what, self._seen[what]) == self._at and not self.reached.is_set()
        if hit:
            self.reached.set()
            assert self._released.wait(HOLD_TIMEOUT_S), f"held at {self._at} for too long"

    def release(self) -> None:
        self._released.set()


class HoldingCluster:
    """The embedded cluster; `get` and `list` pass through `hold` first."""

    def __init__(self, inner: ports.Cluster, hold: Hold) -> None:
        self._inner = inner
        self._hold = hold

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        self._hold.visit(f"get:{kind}")
        return self._inner.get(kind, namespace=namespace, name=name)

    def list(self, kind: str, **kwargs: Any) -> Any:
        self._hold.visit(f"list:{kind}")
        return self._inner.list(kind, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class HoldingCheckpoints(fs_checkpoints.FileCheckpointStore):
    def __init__(self, path: str, hold: Hold) -> None:
        super().__init__(path)
        self._hold = hold

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self._hold.visit("lock")
        with super().locked():
            yield

    def write(self, data: bytes) -> None:
        self._hold.visit("write:checkpoint")
        super().write(data)

    def append(self, records: bytes, *, sync: bool = True) -> None:
        self._hold.visit("write:checkpoint")
        super().append(records, sync=sync)


class HoldingCDI(fs_cdi.CDIDirectory):
    def __init__(self, root: str, hold: Hold) -> None:
        super().__init__(root)
        self._hold = hold

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        self._hold.visit("write:cdi")
        super().write(claim_uid, spec)


class ObservedService:
    """The driver, telling the test when an unprepare arrived and when a prepare returned."""

    def __init__(self, inner: plugin_driver.PluginDriver) -> None:
        self._inner = inner
        self.unprepare_arrived = threading.Event()
        self.prepare_returned = threading.Event()
        self.prepare_calls: list[ports.KubeletCall] = []

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        if call is not None:
            self.prepare_calls.append(call)
        try:
            return self._inner.node_prepare(claims, call=call)
        finally:
            self.prepare_returned.set()

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        self.unprepare_arrived.set()
        return self._inner.node_unprepare(claims, call=call)


@contextlib.contextmanager
def served(env: embedded.Embedded, hold: Hold) -> Iterator[tuple[ObservedService, str]]:
    """A driver on the node's files behind a real PluginServer; yields it and the DRA socket."""
    settings = node(env).settings
    driver = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=HoldingCluster(env.cluster, hold),
            checkpoints=HoldingCheckpoints(settings.checkpoint_path, hold),
            cdi=HoldingCDI(settings.cdi_root, hold),
        ),
        node=node(env).plugin.node,
        config=env.config,
        retry_budget_s=0.5,
    )
    service = ObservedService(driver)
    root = tempfile.mkdtemp(prefix="inflight-", dir="/tmp")  # short: socket paths <= 107 bytes
    server = grpc_server.PluginServer(
        service=service, driver_name=names.DRIVER_NAME, plugin_dir=f"{root}/p",
        registry_dir=f"{root}/r", health_port=None,
    )
    server.start()
    try:
        yield service, server.dra_socket_path
    finally:
        server.stop(0)
        shutil.rmtree(root, ignore_errors=True)


def holding_entries(env: embedded.Embedded) -> dict[names.ClaimUID, models.ClaimState]:
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    entries = current.entries
    return {
        uid: e.state for uid, e in entries.items()
        if e.state is not models.ClaimState.PREPARE_ABORTED
    }


def cdi_files(env: embedded.Embedded) -> frozenset[names.ClaimUID]:
    return fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids()


def call_in_background(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except grpc_client.PluginCallError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("kubelet_gave_up", [True, False], ids=["timed-out", "waiting"])
@pytest.mark.parametrize("point", POINTS, ids=[f"{w}#{n}" for w, n in POINTS])
def test_an_unprepare_that_overtakes_an_in_flight_prepare_wins(
    env: embedded.Embedded, point: tuple[str, int], kubelet_gave_up: bool
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    hold = Hold(*point)
    with served(env, hold) as (service, socket):
        timeout_s = 1.0 if kubelet_gave_up else 60.0
        kubelet = grpc_client.DRAClient(socket, timeout_s=timeout_s)
        preparing, prepare_answer = call_in_background(lambda: kubelet.prepare((ref,)))
        assert hold.reached.wait(HOLD_TIMEOUT_S), f"the prepare never reached {point}"
        if kubelet_gave_up:
            preparing.join(HOLD_TIMEOUT_S)
            assert isinstance(prepare_answer[0], grpc_client.PluginCallError)
        # The unprepare may block on the node lock the held prepare owns: send it aside.
        unprepare_client = grpc_client.DRAClient(socket, timeout_s=60)
        unpreparing, unprepare_answer = call_in_background(
            lambda: unprepare_client.unprepare((ref,))
        )
        assert service.unprepare_arrived.wait(HOLD_TIMEOUT_S)
        hold.release()
        unpreparing.join(HOLD_TIMEOUT_S)
        assert service.prepare_returned.wait(HOLD_TIMEOUT_S)
        preparing.join(HOLD_TIMEOUT_S)
        kubelet.close()
        unprepare_client.close()
    assert unprepare_answer[0][ref.uid].error == ""
    assert ref.uid not in holding_entries(env), "the claim came back as prepared"
    assert ref.uid not in cdi_files(env), "the claim's CDI file came back"


def test_a_prepare_the_kubelet_gave_up_on_leaves_nothing_and_the_retry_prepares(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    hold = Hold("get:ResourceClaim", 1)
    with served(env, hold) as (service, socket):
        with (
            grpc_client.DRAClient(socket, timeout_s=1.0) as impatient,
            pytest.raises(grpc_client.PluginCallError, match="DEADLINE_EXCEEDED"),
        ):
            impatient.prepare((ref,))
        # NB: the server's deadline for the call runs from when the call arrived, so on a
        # loaded machine it passes a moment after the client's: release the held prepare
        # only once the server, too, has given the call up.
        (call,) = service.prepare_calls
        deadline = time.monotonic() + HOLD_TIMEOUT_S
        while call.is_active():
            assert time.monotonic() < deadline, "the server never saw the deadline pass"
            time.sleep(0.01)
        hold.release()
        assert service.prepare_returned.wait(HOLD_TIMEOUT_S)
        assert ref.uid not in holding_entries(env)
        assert ref.uid not in cdi_files(env)
        with grpc_client.DRAClient(socket) as kubelet:
            retried = kubelet.prepare((ref,))[ref.uid]
    assert retried.error == ""
    assert holding_entries(env)[ref.uid] is models.ClaimState.PREPARE_COMPLETED
    assert ref.uid in cdi_files(env)


def test_a_late_prepare_of_a_claim_whose_pod_left_the_node_is_refused(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    # The pod was deleted while the kubelet's prepare was in flight; the claim stays allocated.
    env.cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name="a-pod")
    result = node(env).kubelet.prepare(names.DRIVER_NAME, (ref,))[ref.uid]
    assert "none of which runs on node" in result.error
    assert ref.uid not in holding_entries(env)
    assert ref.uid not in cdi_files(env)


def test_a_claim_with_an_empty_reserved_for_is_not_prepared(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    env.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="a", subresource="status",
        patch={"status": {"reservedFor": None}},
    )
    result = node(env).kubelet.prepare(names.DRIVER_NAME, (ref,))[ref.uid]
    assert "reserved for no pod" in result.error
    assert ref.uid not in cdi_files(env)


def test_a_claim_reserved_for_a_pod_on_another_node_is_not_prepared(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    env.cluster.patch(
        kinds.POD.kind, namespace=NAMESPACE, name="a-pod", patch={"spec": {"nodeName": "other"}}
    )
    result = node(env).kubelet.prepare(names.DRIVER_NAME, (ref,))[ref.uid]
    assert "none of which runs on node" in result.error
