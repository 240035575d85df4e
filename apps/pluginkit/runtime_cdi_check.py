"""The container-runtime CDI check: refuse prepares while the runtime would ignore our CDI specs.

Why: a runtime with CDI off, or not reading our CDI root, starts the pod without the devices
our prepare answered with, and the workload fails later with no hint why. Both plugins ask the
runtime (`ports.ContainerRuntime`) at start and every `interval_s`, judge the answer with
`core.runtime_cdi`, and while the judgment refuses, answer every claim of a prepare with its
message (the kubelet shows it on the pod), log it, say it once per change in a Warning
Event on the Node, and keep the Node condition `ContainerRuntimeCDIDisabled` (True while
refusing) in step. An unreachable runtime or an answer we do not understand only warns (once):
prepares go on as before the check existed. Unprepares are never refused.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

from apps.pluginkit import node_events
from core import errors, kinds, models, names, ports, runtime_cdi

log = logging.getLogger(__name__)

EVENT_REASON: Final = "ContainerRuntimeCDIDisabled"
EVENT_APPLIED_REASON: Final = "ContainerRuntimeCDIEnabled"
CHECK_INTERVAL_S = 600.0
# Reads and conflicting patches one condition write tries (the kubelet writes the Node's status
# too); a write that still fails is logged and made again at the next round.
_CONDITION_ATTEMPTS = 5
# `--container-runtime-endpoint` value that turns the check off (the embedded cluster's CDI
# root is a temp dir that no runtime of the host reads).
DISABLED = "none"


class RuntimeCDICheck:
    """Holds the latest judgment of the runtime; `check_once` asks again."""

    def __init__(
        self,
        runtime: ports.ContainerRuntime,
        *,
        cluster: ports.Cluster,
        node_name: str,
        cdi_root: str,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._cluster = cluster
        self._node_name = node_name
        self._cdi_root = cdi_root
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._judgment: runtime_cdi.Judgment | None = None
        self._warned_unknown = False
        self._condition_pending = False  # the last condition write failed: write it again
        self.round_done = threading.Event()  # set after each check (tests wait on it)

    @property
    def judgment(self) -> runtime_cdi.Judgment | None:
        """The latest judgment (None before the first check)."""
        with self._lock:
            return self._judgment

    def refusal(self) -> str | None:
        """The message prepares answer with while refusing, else None."""
        judged = self.judgment
        return judged.message if judged is not None and judged.refusing else None

    def check_once(self) -> runtime_cdi.Judgment:
        """Ask the runtime, judge, and report what changed (log, Node Event and condition)."""
        judged, previous = self._judge()
        if judged != previous:
            self._report(judged, previous)
        elif self._condition_pending:
            self._condition_pending = not self._set_condition(judged)
        self.round_done.set()
        return judged

    def start(self, stopping: threading.Event) -> threading.Thread:
        """Judge now (prepares may come as soon as the socket exists), then every interval.

        The first judgment is reported on the thread: its API writes (Event, condition) wait
        for the API client, which the plugin builds while its sockets come up.
        """
        first = self._judge()
        thread = threading.Thread(
            target=self.run, args=(stopping, first), name="runtime-cdi-check", daemon=True
        )
        thread.start()
        return thread

    def run(
        self,
        stopping: threading.Event,
        first: tuple[runtime_cdi.Judgment, runtime_cdi.Judgment | None] | None = None,
    ) -> None:
        """Report `first` (from `start`), then check every interval until `stopping`."""
        if first is not None:
            self._guarded(lambda: self._report(*first))
            self.round_done.set()
        while not stopping.wait(self._interval_s):
            self._guarded(self.check_once)

    def _guarded(self, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception:  # keep the last judgment; the next round may succeed
            log.exception("event=runtime_cdi_check_failed node=%s", self._node_name)

    def _judge(self) -> tuple[runtime_cdi.Judgment, runtime_cdi.Judgment | None]:
        """The runtime's judgment now, held for prepares; with the one it replaced."""
        judged = runtime_cdi.judge(self._runtime.ask(), cdi_root=self._cdi_root)
        with self._lock:
            previous, self._judgment = self._judgment, judged
        return judged, previous

    def _report(
        self, judged: runtime_cdi.Judgment, previous: runtime_cdi.Judgment | None
    ) -> None:
        fields = (
            f"node={self._node_name} verdict={judged.verdict.value} "
            f"runtime={judged.runtime!r} cdi_root={self._cdi_root}"
        )
        self._condition_pending = not self._set_condition(judged)
        if judged.refusing:
            log.error("event=runtime_cdi_refusing %s message=%r", fields, judged.message)
            self._emit(EVENT_REASON, judged.message, warning=True)
        elif judged.verdict is runtime_cdi.Verdict.UNKNOWN:
            # NB: once per plugin life: a node without a reachable runtime socket (the chart's
            # mount missing) would otherwise warn every ten minutes about the same thing.
            if not self._warned_unknown:
                self._warned_unknown = True
                log.warning("event=runtime_cdi_unknown %s message=%r", fields, judged.message)
        else:
            log.info("event=runtime_cdi_applied %s", fields)
            if previous is not None and previous.refusing:
                self._emit(EVENT_APPLIED_REASON, judged.message, warning=False)

    def _set_condition(self, judged: runtime_cdi.Judgment) -> bool:
        """Write our Node condition: read, merge (keeping the kubelet's), patch if unchanged;
        whether it is written."""
        now = datetime.datetime.fromtimestamp(int(self._clock()), tz=datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for _ in range(_CONDITION_ATTEMPTS):
            try:
                node = self._cluster.get(kinds.NODE.kind, namespace="", name=self._node_name)
                current = (node.get("status") or {}).get("conditions") or []
                conditions = runtime_cdi.node_conditions(current, judged, now=stamp)
                if conditions is None:
                    return True
                # NB: a merge patch replaces the whole list; the resourceVersion makes a
                # kubelet status write in between a conflict instead of a lost condition.
                self._cluster.patch(
                    kinds.NODE.kind, namespace="", name=self._node_name, subresource="status",
                    patch={"status": {"conditions": conditions}},
                    resource_version=str(node["metadata"].get("resourceVersion", "")),
                )
                return True
            except errors.ConflictError:
                continue
            except errors.ClusterError as exc:  # the log line and Event say it too
                log.warning(
                    "event=runtime_cdi_condition_failed node=%s error=%r",
                    self._node_name, str(exc),
                )
                return False
        log.warning(
            "event=runtime_cdi_condition_failed node=%s error=%r", self._node_name,
            f"the Node kept changing: {_CONDITION_ATTEMPTS} conflicting writes",
        )
        return False

    def _emit(self, reason: str, message: str, *, warning: bool) -> None:
        try:
            node_events.emit_node_event(
                self._cluster, self._node_name, reason, message, warning=warning
            )
        except errors.ClusterError as exc:  # the log line above says it too
            log.warning(
                "event=runtime_cdi_event_failed node=%s reason=%s error=%r",
                self._node_name, reason, str(exc),
            )


class RefusingWhileCDIOff:
    """A `ports.KubeletPluginService` that answers prepares with the check's refusal, if any."""

    def __init__(self, service: ports.KubeletPluginService, check: RuntimeCDICheck) -> None:
        self._service = service
        self._check = check

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        refused = self._check.refusal()
        if refused is None:
            return self._service.node_prepare(claims, call=call)
        log.warning(
            "event=runtime_cdi_refusing action=prepare_refused claims=%s message=%r",
            ",".join(f"{ref.namespace}/{ref.name}" for ref in claims), refused,
        )
        # NB: an error per claim, never a failed call: the kubelet shows it on each pod.
        return {ref.uid: models.ClaimResult(error=refused) for ref in claims}

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        return self._service.node_unprepare(claims, call=call)


def new_check(
    *,
    endpoint: str,
    cluster: ports.Cluster,
    node_name: str,
    cdi_root: str,
    runtime_factory: Callable[[str], ports.ContainerRuntime],
    interval_s: float = CHECK_INTERVAL_S,
) -> RuntimeCDICheck | None:
    """The check for `endpoint` ("" = the usual sockets), or None when it is `none`."""
    if endpoint.strip() == DISABLED:
        log.info("event=runtime_cdi_check_disabled node=%s", node_name)
        return None
    return RuntimeCDICheck(
        runtime_factory(endpoint), cluster=cluster, node_name=node_name, cdi_root=cdi_root,
        interval_s=interval_s,
    )
