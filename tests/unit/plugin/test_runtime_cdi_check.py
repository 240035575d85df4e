"""The plugins' runtime CDI check: what prepares answer, what is logged and what the Node shows.

Covers: refusing (CDI off, root not watched) answers every claim of a prepare with the message
and leaves unprepares alone; an applied or unknown judgment lets prepares through; a Warning
Event on the Node when refusal starts or its message changes (not on every round), a Normal
one when it ends; unknown warns once; a failed Event or a failed round does not stop the check;
`none` turns it off; the loop checks again every interval until stopping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from adapters.memory import cluster as memory_cluster
from apps.pluginkit import runtime_cdi_check
from core import errors, kinds, models, names, ports, runtime_cdi

NODE = "node-a"
ON = runtime_cdi.RuntimeAnswer.of(
    name="containerd", version="1.7.27", info={"config": '{"enableCDI": true}'})
OFF = runtime_cdi.RuntimeAnswer.of(
    name="containerd", version="1.7.27", info={"config": '{"enableCDI": false}'})
OTHER_DIRS = runtime_cdi.RuntimeAnswer.of(
    name="containerd", version="1.7.27",
    info={"config": '{"enableCDI": true, "cdiSpecDirs": ["/opt/cdi"]}'})
GONE = runtime_cdi.Unreachable(endpoint="unix:///run/containerd/containerd.sock", reason="absent")
REF = models.ClaimRef(uid=names.ClaimUID("uid-1"), namespace="team", name="claim-1")


class ScriptedRuntime:
    """Answers what the test sets; raises when told to."""

    def __init__(self, answer: runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable) -> None:
        self.answer = answer
        self.fail: Exception | None = None

    def ask(self) -> runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable:
        if self.fail is not None:
            raise self.fail
        return self.answer


class RecordingService:
    def __init__(self) -> None:
        self.prepared: list[tuple[models.ClaimRef, ...]] = []
        self.unprepared: list[tuple[models.ClaimRef, ...]] = []

    def node_prepare(self, claims: tuple[models.ClaimRef, ...], *,
                     call: ports.KubeletCall | None = None,
                     ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        self.prepared.append(claims)
        return {ref.uid: models.ClaimResult() for ref in claims}

    def node_unprepare(self, claims: tuple[models.ClaimRef, ...], *,
                       call: ports.KubeletCall | None = None,
                       ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        self.unprepared.append(claims)
        return {ref.uid: models.ClaimResult() for ref in claims}


class FailingEvents(memory_cluster.InMemoryCluster):
    def emit_event(self, **kwargs: Any) -> None:
        raise errors.ClusterError("events are forbidden")


@pytest.fixture
def cluster() -> memory_cluster.InMemoryCluster:
    return memory_cluster.InMemoryCluster()


def _check(runtime: ScriptedRuntime, cluster: ports.Cluster,
           interval_s: float = 600.0) -> runtime_cdi_check.RuntimeCDICheck:
    port: ports.ContainerRuntime = runtime
    return runtime_cdi_check.RuntimeCDICheck(
        port, cluster=cluster, node_name=NODE, cdi_root="/var/run/cdi", interval_s=interval_s)


def _node_events(cluster: memory_cluster.InMemoryCluster) -> list[tuple[str, str, str]]:
    items = cluster.list(kinds.EVENT.kind, namespace="default").items
    return [(e["type"], e["reason"], e["message"]) for e in items
            if e["involvedObject"]["kind"] == "Node" and e["involvedObject"]["name"] == NODE]


@pytest.mark.parametrize("answer", [OFF, OTHER_DIRS])
def test_a_refusing_runtime_answers_every_claim_with_the_message(
    answer: runtime_cdi.RuntimeAnswer, cluster: memory_cluster.InMemoryCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = _check(ScriptedRuntime(answer), cluster)
    judged = check.check_once()
    service = RecordingService()
    gate: ports.KubeletPluginService = runtime_cdi_check.RefusingWhileCDIOff(service, check)
    other = models.ClaimRef(uid=names.ClaimUID("uid-2"), namespace="team", name="claim-2")
    with caplog.at_level(logging.WARNING):
        results = gate.node_prepare((REF, other))
    assert results == {REF.uid: models.ClaimResult(error=judged.message),
                       other.uid: models.ClaimResult(error=judged.message)}
    assert service.prepared == []
    assert "event=runtime_cdi_refusing action=prepare_refused claims=team/claim-1,team/claim-2" \
        in caplog.text
    assert gate.node_unprepare((REF,)) == {REF.uid: models.ClaimResult()}
    assert service.unprepared == [(REF,)]


@pytest.mark.parametrize("answer", [ON, GONE])
def test_an_applied_or_unknown_runtime_lets_prepares_through(
    answer: runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable,
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    check = _check(ScriptedRuntime(answer), cluster)
    check.check_once()
    service = RecordingService()
    assert runtime_cdi_check.RefusingWhileCDIOff(service, check).node_prepare((REF,)) == {
        REF.uid: models.ClaimResult()}
    assert service.prepared == [(REF,)]
    assert check.refusal() is None


def test_before_the_first_check_nothing_is_refused(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    check = _check(ScriptedRuntime(OFF), cluster)
    assert check.judgment is None and check.refusal() is None


def test_the_node_hears_of_refusal_once_per_change_and_of_its_end(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = ScriptedRuntime(OFF)
    check = _check(runtime, cluster)
    with caplog.at_level(logging.INFO):
        off = check.check_once()
        check.check_once()  # same judgment: no second Event
        runtime.answer = OTHER_DIRS
        other = check.check_once()
        runtime.answer = ON
        on = check.check_once()
    assert _node_events(cluster) == [
        ("Warning", "ContainerRuntimeCDIDisabled", off.message),
        ("Warning", "ContainerRuntimeCDIDisabled", other.message),
        ("Normal", "ContainerRuntimeCDIEnabled", on.message),
    ]
    assert caplog.text.count("event=runtime_cdi_refusing node=node-a verdict=cdi_off") == 1
    assert "event=runtime_cdi_applied node=node-a verdict=applied" in caplog.text


def test_an_applied_runtime_at_start_sends_no_event(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    _check(ScriptedRuntime(ON), cluster).check_once()
    assert _node_events(cluster) == []


def test_an_unknown_runtime_warns_once(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = ScriptedRuntime(GONE)
    check = _check(runtime, cluster)
    with caplog.at_level(logging.WARNING):
        check.check_once()
        runtime.answer = ON
        check.check_once()
        runtime.answer = GONE
        check.check_once()
    assert caplog.text.count("event=runtime_cdi_unknown") == 1
    assert _node_events(cluster) == []


def test_a_failed_event_is_logged_and_the_refusal_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = _check(ScriptedRuntime(OFF), FailingEvents())
    with caplog.at_level(logging.WARNING):
        check.check_once()
    assert check.refusal() is not None
    assert "event=runtime_cdi_event_failed node=node-a reason=ContainerRuntimeCDIDisabled" \
        in caplog.text


def test_the_loop_checks_every_interval_and_survives_a_failed_round(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = ScriptedRuntime(ON)
    check = _check(runtime, cluster, interval_s=0.01)
    stopping = threading.Event()
    thread = check.start(stopping)  # the first check runs before start returns
    assert check.judgment is not None and not check.judgment.refusing
    runtime.fail = RuntimeError("boom")
    with caplog.at_level(logging.ERROR):
        _wait_for(lambda: "event=runtime_cdi_check_failed" in caplog.text)
    runtime.fail = None
    runtime.answer = OFF
    _wait_for(lambda: check.refusal() is not None)
    stopping.set()
    thread.join(5)
    assert not thread.is_alive()


def test_start_judges_at_once_and_reports_on_its_thread(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    check = _check(ScriptedRuntime(OFF), _with_node(cluster))
    stopping = threading.Event()
    thread = check.start(stopping)
    try:
        assert check.refusal() is not None  # before any report: prepares are refused already
        assert check.round_done.wait(10)
        assert [reason for _, reason, _ in _node_events(cluster)] == [
            "ContainerRuntimeCDIDisabled"]
        assert _conditions(cluster)["ContainerRuntimeCDIDisabled"] == ("True", "CDIOff")
    finally:
        stopping.set()
        thread.join(5)


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll `condition` (the check's thread makes it true) until it holds or time is up."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        threading.Event().wait(0.01)


def test_none_turns_the_check_off(cluster: memory_cluster.InMemoryCluster) -> None:
    made: list[str] = []

    def factory(endpoint: str) -> ports.ContainerRuntime:
        made.append(endpoint)
        return ScriptedRuntime(ON)

    assert runtime_cdi_check.new_check(endpoint="none", cluster=cluster, node_name=NODE,
                                       cdi_root="/var/run/cdi", runtime_factory=factory) is None
    check = runtime_cdi_check.new_check(endpoint="", cluster=cluster, node_name=NODE,
                                        cdi_root="/var/run/cdi", runtime_factory=factory)
    assert check is not None and made == [""]


class ConflictingPatches(memory_cluster.InMemoryCluster):
    """Status patches conflict `conflicts` times (the kubelet wrote the Node in between)."""

    def __init__(self, conflicts: int) -> None:
        super().__init__()
        self.conflicts = conflicts

    def patch(self, kind: str, **kwargs: Any) -> Mapping[str, Any]:
        if kwargs.get("subresource") == "status" and self.conflicts > 0:
            self.conflicts -= 1
            raise errors.ConflictError("the object has been modified")
        return super().patch(kind, **kwargs)


def _with_node(cluster: memory_cluster.InMemoryCluster) -> memory_cluster.InMemoryCluster:
    cluster.create(kinds.NODE.kind, {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": NODE}})
    cluster.patch(kinds.NODE.kind, namespace="", name=NODE, subresource="status",
                  patch={"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    return cluster


def _conditions(cluster: ports.Cluster) -> dict[str, tuple[str, str]]:
    node = cluster.get(kinds.NODE.kind, namespace="", name=NODE)
    return {c["type"]: (c["status"], c.get("reason", "")) for c in node["status"]["conditions"]}


def test_the_node_condition_follows_the_judgment_and_keeps_the_kubelets(
    cluster: memory_cluster.InMemoryCluster,
) -> None:
    runtime = ScriptedRuntime(OFF)
    check = _check(runtime, _with_node(cluster))
    check.check_once()
    assert _conditions(cluster) == {"Ready": ("True", ""),
                                    "ContainerRuntimeCDIDisabled": ("True", "CDIOff")}
    runtime.answer = ON
    check.check_once()
    assert _conditions(cluster)["ContainerRuntimeCDIDisabled"] == ("False", "CDIApplied")
    runtime.answer = GONE
    check.check_once()
    assert _conditions(cluster)["ContainerRuntimeCDIDisabled"] == (
        "Unknown", "RuntimeNotUnderstood")
    assert _conditions(cluster)["Ready"] == ("True", "")


def test_a_conflicting_condition_write_is_read_and_made_again() -> None:
    cluster = ConflictingPatches(conflicts=0)
    _with_node(cluster)
    cluster.conflicts = 2
    _check(ScriptedRuntime(OFF), cluster).check_once()
    assert _conditions(cluster)["ContainerRuntimeCDIDisabled"] == ("True", "CDIOff")


def test_a_node_that_keeps_changing_is_logged_and_the_refusal_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = ConflictingPatches(conflicts=0)
    _with_node(cluster)
    cluster.conflicts = 100
    check = _check(ScriptedRuntime(OFF), cluster)
    with caplog.at_level(logging.WARNING):
        check.check_once()
    assert "event=runtime_cdi_condition_failed node=node-a" in caplog.text
    assert "5 conflicting writes" in caplog.text
    assert check.refusal() is not None


def test_a_failed_condition_write_is_logged_and_made_again_next_round(
    cluster: memory_cluster.InMemoryCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    check = _check(ScriptedRuntime(OFF), cluster)
    with caplog.at_level(logging.WARNING):
        check.check_once()
    assert "event=runtime_cdi_condition_failed node=node-a" in caplog.text
    assert check.refusal() is not None
    _with_node(cluster)
    check.check_once()  # same judgment: only the condition is written again
    assert _conditions(cluster)["ContainerRuntimeCDIDisabled"] == ("True", "CDIOff")
    assert [reason for _, reason, _ in _node_events(cluster)] == ["ContainerRuntimeCDIDisabled"]
