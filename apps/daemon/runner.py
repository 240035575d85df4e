"""The daemon's loop: own entry -> peers -> IMEX files -> supervised nvidia-imex -> readiness.

`nvidia-imex-ctl -q` is asked every `ready_poll_s` until it says READY, then every
`ready_recheck_s`.

One thread (the caller's) makes every decision and every write; the peer informer only hands
over the newest object and wakes it. Order of a first start: render imexd.cfg, claim the entry
(index), wait to see it in the peer list, write nodes.cfg (+ /etc/hosts), start nvidia-imex.
After that, a change in what nvidia-imex reads is written and followed by SIGUSR1 (once the
child answered READY or ran `reload_grace_s`, so it can take the signal); readiness from
`nvidia-imex-ctl -q` is polled and mirrored into the entry's status, which stays NotReady while
the node's NVLink fabric is degraded (`fabric`, judged on a thread of its own that wakes the
loop on a change). On stop the child is terminated and the entry removed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters.imex import ctl as imex_ctl
from adapters.imex import files
from adapters.imex import supervisor as imex_supervisor
from apps.daemon import registry as daemon_registry
from core import errors, models
from core.computedomain import fabric_health, imexconfig, membership

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Paths:
    imexd_template: str
    imexd_cfg: str
    nodes_cfg: str
    hosts_file: str


class DaemonRunner:
    """Runs one daemon until `stop` is set; `run` returns the process exit status."""

    def __init__(
        self,
        *,
        registry: daemon_registry.PeerRegistry,
        supervisor: imex_supervisor.IMEXSupervisor,
        ctl: imex_ctl.IMEXCtl,
        paths: Paths,
        dns_names: bool,
        max_nodes: int,
        ready_poll_s: float = 1.0,
        ready_recheck_s: float = 10.0,
        reload_grace_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        fabric: Callable[[], fabric_health.FabricHealth] | None = None,
    ) -> None:
        """`fabric`: the node's last fabric judgment (None: not checked, always healthy)."""
        self._registry = registry
        self._supervisor = supervisor
        self._ctl = ctl
        self._paths = paths
        self._dns_names = dns_names
        self._max_nodes = max_nodes
        self._ready_poll_s = ready_poll_s
        self._ready_recheck_s = ready_recheck_s
        self._reload_grace_s = reload_grace_s
        self._clock = clock
        self._fabric = fabric
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._latest: Mapping[str, Any] | None = None
        self._seen_object = False
        self._files: imexconfig.PeerFiles | None = None
        # What nvidia-imex last answered, and what the entry says (NotReady while the
        # fabric is degraded, whatever nvidia-imex answers).
        self._imex_status = models.DomainStatus.NOT_READY
        self._status = models.DomainStatus.NOT_READY
        # The child pid that last answered READY, and whether it still has to re-read its files.
        self._ready_pid: int | None = None
        self._reload_pending = False
        self._next_poll = 0.0

    def on_object(self, obj: Mapping[str, Any] | None) -> None:
        """Informer callback: keep the newest version and wake the loop."""
        with self._lock:
            if obj is None or _newer(obj, self._latest):
                self._latest = obj
                self._seen_object = True
        self._wake.set()

    def wake(self) -> None:
        """Something the entry depends on changed (the fabric's health): look again now."""
        self._wake.set()

    def run(self, stop: threading.Event) -> int:
        """Loop until `stop`; 0 after a clean stop, 1 when the daemon cannot go on."""
        me = self._registry.me
        try:
            self._render_imexd_cfg(bind_ip=me.ip_address)
        except errors.ConfigError as exc:
            log.error("event=daemon_failed error=%r", exc.message)
            return 1
        follower = self._registry.follow(self.on_object, stop)
        # NB: the loop may sleep a whole recheck period; a stop must end that sleep at once.
        threading.Thread(
            target=self._wake_on, args=(stop,), name="stop-waker", daemon=True
        ).start()
        log.info(
            "event=daemon_started node=%s clique=%s ip=%s store=%s dns_names=%s",
            me.node_name, me.clique_id, me.ip_address, self._registry.object_ref,
            self._dns_names,
        )
        code = 0
        while not stop.is_set():
            try:
                self._step()
            except errors.PermanentError as exc:
                log.error("event=daemon_failed error=%r", exc.message)
                code = 1
                break
            except errors.ClusterError as exc:
                log.warning("event=api_error error=%r action=retry", str(exc))
                stop.wait(0.5)
            except FileNotFoundError as exc:
                log.error(
                    "event=daemon_failed error=%r",
                    f"cannot run {exc.filename or 'nvidia-imex'}: not found; the daemon needs the "
                    "NVIDIA driver's nvidia-imex and nvidia-imex-ctl (package nvidia-imex) in its "
                    "image or PATH, or their paths in IMEX_COMMAND / IMEX_CTL_COMMAND",
                )
                code = 1
                break
            except OSError as exc:
                log.error("event=daemon_failed error=%r", str(exc))
                code = 1
                break
            self._wake.wait(max(0.0, self._next_poll - self._clock()) if self._supervisor.started
                            else self._ready_poll_s)
            self._wake.clear()
        self._shutdown()
        stop.set()
        follower.join(timeout=1.0)
        return code

    def _wake_on(self, stop: threading.Event) -> None:
        stop.wait()
        self._wake.set()

    def _step(self) -> None:
        now = self._clock()
        if self._ready_pid is not None and self._supervisor.pid != self._ready_pid:
            # The child was restarted since it last said READY: ask the new one now.
            self._ready_pid = None
            self._next_poll = now
        if self._supervisor.started and now >= self._next_poll:
            pid = self._supervisor.pid
            readiness = self._ctl.query()
            status = models.DomainStatus.READY if readiness.ready else models.DomainStatus.NOT_READY
            # NB: fast until Ready, then at a readiness probe's pace: on a big domain the
            # probes of every daemon would otherwise add up.
            interval = self._ready_recheck_s if readiness.ready else self._ready_poll_s
            self._next_poll = self._clock() + interval
            self._ready_pid = pid if readiness.ready else None
            if status is not self._imex_status:
                log.info("event=imex_readiness status=%s detail=%r", status.value,
                         readiness.detail)
                self._imex_status = status
        self._status = self._entry_status()
        with self._lock:
            obj, seen = self._latest, self._seen_object
        if not seen:
            return  # the informer has not listed yet
        mine = self._my_entry(obj)
        me = self._registry.me
        if mine is None or (mine.ip_address, mine.clique_id, mine.status) != (
            me.ip_address, me.clique_id, self._status
        ) or self._registry.lacks_owner(obj):
            written = self._registry.upsert(self._status)
            self.on_object(written)
            if mine is None or mine.status is not self._status:
                entry = self._my_entry(written)
                log.info("event=entry_written index=%s status=%s object=%s",
                         entry.index if entry else "?", self._status.value,
                         self._registry.object_ref)
            with self._lock:
                obj = self._latest
            if self._my_entry(obj) is None:
                return
        self._apply_peers(obj)
        self._reload_if_due()

    def _entry_status(self) -> models.DomainStatus:
        health = self._fabric() if self._fabric is not None else fabric_health.NOT_JUDGED
        status = fabric_health.daemon_status(self._imex_status, health)
        if status is not self._status and not health.healthy:
            log.info("event=entry_not_ready cause=fabric_degraded reason=%s imex=%s",
                     health.reason, self._imex_status.value)
        return status

    def _reload_if_due(self) -> None:
        # NB: SIGUSR1 only to a child that answered READY or has run `reload_grace_s`: one
        # just started may not have its handler yet (the signal would kill it). Not "READY
        # only": a daemon waiting for its peers may need the reload to ever become READY.
        if not self._reload_pending:
            return
        age = self._supervisor.child_age_s()
        if age is None:
            self._reload_pending = False  # the next child reads the files when it starts
            return
        ready = self._ready_pid is not None and self._ready_pid == self._supervisor.pid
        if not ready and age < self._reload_grace_s:
            return  # retried on the next pass (at most `ready_poll_s` away while not Ready)
        self._supervisor.reload()
        self._reload_pending = False

    def _apply_peers(self, obj: Mapping[str, Any] | None) -> None:
        peers = membership.peers_of(
            membership.entries_of(obj or {}, store=self._registry.store),
            store=self._registry.store,
        )
        wanted = imexconfig.peer_files(
            peers, clique_id=self._registry.me.clique_id, dns_names=self._dns_names,
            max_nodes=self._max_nodes,
        )
        if wanted == self._files:
            return
        files.write_text(self._paths.nodes_cfg, wanted.nodes_cfg)
        if self._dns_names:
            existing = files.read_text(self._paths.hosts_file) or ""
            files.write_in_place(
                self._paths.hosts_file, imexconfig.hosts_file(existing, wanted.hosts)
            )
        log.info(
            "event=peers_changed peers=%s",
            ",".join(f"{p.index}={p.ip_address}" for p in peers
                     if p.clique_id == self._registry.me.clique_id),
        )
        first = self._files is None
        self._files = wanted
        if first or not self._supervisor.started:
            self._supervisor.start()
            self._next_poll = self._clock()
            self._wake.set()
        else:
            self._reload_pending = True

    def _my_entry(self, obj: Mapping[str, Any] | None) -> membership.Peer | None:
        if obj is None:
            return None
        peers = membership.peers_of(
            membership.entries_of(obj, store=self._registry.store), store=self._registry.store
        )
        return next((p for p in peers if p.node_name == self._registry.me.node_name), None)

    def _render_imexd_cfg(self, *, bind_ip: str) -> None:
        template = files.read_text(self._paths.imexd_template)
        if template is None:
            raise errors.ConfigError(
                f"{self._paths.imexd_template} is missing: the daemon claim's CDI edits did not "
                "apply (no per-domain /imexd mount); is CDI enabled in the container runtime "
                "(containerd enable_cdi / CRI-O), and did the kubelet plugin prepare the claim?"
            )
        files.write_text(
            self._paths.imexd_cfg,
            imexconfig.render_imexd_cfg(
                template, bind_ip=bind_ip, nodes_cfg_path=self._paths.nodes_cfg
            ),
        )

    def _shutdown(self) -> None:
        self._supervisor.stop()
        try:
            self._registry.remove()
            log.info("event=entry_removed node=%s object=%s", self._registry.me.node_name,
                     self._registry.object_ref)
        except errors.ClusterError as exc:
            log.error("event=entry_remove_failed error=%r", str(exc))


def _newer(obj: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    if than is None:
        return True
    new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    old_rv = str((than.get("metadata") or {}).get("resourceVersion") or "")
    if new_rv.isdigit() and old_rv.isdigit():
        return int(new_rv) >= int(old_rv)
    return True
