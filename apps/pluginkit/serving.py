"""What keeps a registered plugin serving: slice resync, stale-claim clean-up, a clean stop.

Shared by both halves' plugins; each wires its own driver, publisher and settings into it.

A rolling update (per-pod socket names, `rolling_update_pod_uid`) runs two plugin pods of a
driver on a node for a while: the new one registers beside the old, the kubelet sends its calls
to the newer one, and the old is stopped. Both share the plugin directory, the checkpoint and
the CDI root; every read-modify-write of the checkpoint holds its node-wide file lock and
re-reads what the other process wrote (`journaled_state`), so either may serve any call. The
old one drains its calls before it deregisters (`PluginServer.stop`) and, with a successor
serving, leaves the node's shared state to it (`Plugin.stop`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import cri as grpc_cri
from adapters.grpc import server as grpc_server
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit import runtime_cdi_check
from core import models, names, ports

# The half's checkpoint record (`models.RecordCodec`).
RecordT = TypeVar("RecordT")


log = logging.getLogger(__name__)

SLICE_RESYNC_PERIOD_S = 60.0
SLICE_RETRY_S = 5.0
# How long a stopping plugin lets in-flight kubelet calls finish: a prepare retries for up to
# the retry budget (30 s by default); the kubelet gives up at 45 s, the pod's termination grace
# period (30 s by default) ends in a SIGKILL.
DRAIN_GRACE_S = 25.0


class SliceResync:
    """Keeps this node's ResourceSlices published for as long as the plugin runs.

    The kubelet deletes a node's ResourceSlices when it starts and ~30 s after a plugin
    deregisters, so one publish at startup is not enough: publish after every registration
    the kubelet confirms (`registered()`), and again every `period_s` (a no-op when nothing
    changed). Nothing is published before the first registration, which the kubelet's wipe
    at its own start would undo.
    """

    def __init__(
        self,
        publish: Callable[[], None],
        *,
        node_name: str,
        period_s: float = SLICE_RESYNC_PERIOD_S,
        retry_s: float = SLICE_RETRY_S,
    ) -> None:
        self._publish = publish
        self._node_name = node_name
        self._period_s = period_s
        self._retry_s = retry_s
        self._wake = threading.Event()
        self._registered = False
        self.published = threading.Event()
        # Set while the loop waits for the first registration (nothing is published then).
        self.waiting_for_registration = threading.Event()

    def registered(self) -> None:
        """The kubelet confirmed (again) that we are registered: publish now."""
        self._registered = True
        self._wake.set()

    def republish(self) -> None:
        """What is published changed (a device tainted): publish now, on the resync thread,
        if the kubelet registered us; else the first registration publishes it."""
        if self._registered:
            self._wake.set()

    def start(self, stopping: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stopping,), name="resourceslice-resync", daemon=True
        )
        thread.start()
        return thread

    def run(self, stopping: threading.Event) -> None:
        next_at: float | None = None  # None: not registered yet
        while not stopping.is_set():
            wait_s = 1.0 if next_at is None else min(1.0, max(0.0, next_at - time.monotonic()))
            if next_at is None:
                self.waiting_for_registration.set()
            if self._wake.wait(wait_s):
                self.waiting_for_registration.clear()
                self._wake.clear()
            elif next_at is None or time.monotonic() < next_at:
                continue
            ok = self._publish_once()
            next_at = time.monotonic() + (self._period_s if ok else self._retry_s)

    def _publish_once(self) -> bool:
        try:
            self._publish()
        except Exception:  # keep resyncing: the API server may be back next time
            log.exception(
                "event=resource_slices_publish_failed node=%s retry_in_s=%g",
                self._node_name, self._retry_s,
            )
            return False
        self.published.set()
        return True


class StaleClaimCleanup:
    """Runs the driver's stale-claim clean-up at start and then every `interval_s`.

    An entry whose claim disappeared is gone within one interval plus one round. Tests wait
    on `round_done`, which is set after each round.
    """

    def __init__(
        self, clean: Callable[[], object], *, node_name: str, interval_s: float
    ) -> None:
        self._clean = clean
        self._node_name = node_name
        self._interval_s = interval_s
        self.round_done = threading.Event()

    def start(self, stopping: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stopping,), name="stale-claim-cleanup", daemon=True
        )
        thread.start()
        return thread

    def run(self, stopping: threading.Event) -> None:
        while not stopping.is_set():
            try:
                self._clean()
            except Exception:  # keep going: the next round may succeed
                log.exception("event=stale_claim_cleanup_failed node=%s", self._node_name)
            self.round_done.set()
            stopping.wait(self._interval_s)


# The node facts of the served half.
NodeT = TypeVar("NodeT", bound=models.NodeFacts)
NodeT_co = TypeVar("NodeT_co", bound=models.NodeFacts, covariant=True)


class ServedDriver(ports.KubeletPluginService, Protocol[NodeT_co]):
    """What serving needs of a claim driver (`apps.pluginkit.driver.ClaimDriver`, either half)."""

    @property
    def node(self) -> NodeT_co:
        """The node facts prepares are planned with now."""
        ...

    def compact(self) -> None:
        """Fold the checkpoint journal into its snapshot (at a graceful stop)."""
        ...

    def clean_stale_claims(self) -> tuple[object, ...]:
        """One stale-claim clean-up round."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plugin(Generic[NodeT]):
    """A served plugin: what stops it, and what tests and the demo look at."""

    driver: ServedDriver[NodeT]
    server: grpc_server.PluginServer
    metrics: plugin_metrics.PluginMetrics
    # The node facts it started with (its half's: `ImexNodeFacts` for ComputeDomains).
    node: NodeT
    stopping: threading.Event
    slices: SliceResync
    cleanup: StaleClaimCleanup
    # The container-runtime CDI check (None: turned off, `--container-runtime-endpoint=none`).
    runtime_check: runtime_cdi_check.RuntimeCDICheck | None = None
    # Run at a graceful stop, after the server stopped (a half's own clean-up).
    on_stop: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    # Run at a graceful stop only when no other plugin pod of the driver serves beside this
    # one (a rolling update's successor): the undoing of what the node keeps while a plugin
    # runs (node labels), which the successor still vouches for.
    on_last_stop: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    def stop(self, grace_s: float = 2.0) -> None:
        """Drain and deregister (`PluginServer.stop`), then clean up.

        With a successor serving, the node's shared state is left to it: no `on_last_stop`
        hook runs and the checkpoint is not compacted (the successor writes it on).
        """
        self.stopping.set()
        self.server.stop(grace_s)
        successors = grpc_server.serving_sockets(
            os.path.dirname(self.server.dra_socket_path), besides=self.server.dra_socket_path)
        if successors:
            log.info("event=plugin_handed_over node=%s successors=%s",
                     self.node.node_name, ",".join(successors))
        hooks = self.on_stop if successors else [*self.on_stop, *self.on_last_stop]
        for hook in hooks:
            try:
                hook()
            except Exception:  # a clean-up step must not keep the others from running
                log.exception("event=stop_hook_failed hook=%r", hook)
        if successors:
            return
        try:
            self.driver.compact()
        except OSError as exc:  # the journal still holds every claim; a restart replays it
            log.warning("event=checkpoint_compaction_failed error=%r", str(exc))


class ServedSettings(Protocol):
    """The settings both plugins serve with (each half's `Settings` has these)."""

    @property
    def node_name(self) -> str: ...

    @property
    def plugin_dir(self) -> str: ...

    @property
    def registry_dir(self) -> str: ...

    @property
    def health_port(self) -> int | None: ...

    @property
    def checkpoint_path(self) -> str: ...

    @property
    def predecessor_checkpoint_path(self) -> str: ...

    @property
    def cdi_root(self) -> str: ...

    @property
    def stale_claim_cleanup_interval_s(self) -> float: ...

    @property
    def container_runtime_endpoint(self) -> str: ...

    @property
    def runtime_cdi_check_interval_s(self) -> float: ...

    @property
    def rolling_update_pod_uid(self) -> str: ...

    @property
    def listen_address(self) -> str: ...


def open_stores(
    settings: ServedSettings, *, cdi_file_name: Callable[[str], str] = names.cdi_spec_file_name
) -> tuple[fs_checkpoints.FileCheckpointStore, fs_cdi.CDIDirectory]:
    """The plugin's checkpoint and CDI stores, with temp files of a killed write removed."""
    checkpoint_store = fs_checkpoints.FileCheckpointStore(settings.checkpoint_path)
    cdi_dir = fs_cdi.CDIDirectory(settings.cdi_root, file_name=cdi_file_name)
    # A kill during an atomic write leaves its temp file; nothing reads them, so drop them.
    for path in (*checkpoint_store.remove_temp_files(), *cdi_dir.remove_temp_files()):
        log.warning("event=temp_file_removed node=%s path=%s", settings.node_name, path)
    return checkpoint_store, cdi_dir


def open_predecessor(
    settings: ServedSettings, store: fs_checkpoints.FileCheckpointStore
) -> fs_checkpoints.PredecessorFile:
    """`checkpoint.json` (upstream's, or ours before it had its own name), read at takeover."""
    return fs_checkpoints.PredecessorFile(settings.predecessor_checkpoint_path, successor=store)


def runtime_check(
    settings: ServedSettings, cluster: ports.Cluster
) -> runtime_cdi_check.RuntimeCDICheck | None:
    """The container-runtime CDI check of these settings, over the CRI socket (None: off)."""
    return runtime_cdi_check.new_check(
        endpoint=settings.container_runtime_endpoint, cluster=cluster,
        node_name=settings.node_name, cdi_root=settings.cdi_root,
        runtime_factory=grpc_cri.CriRuntime, interval_s=settings.runtime_cdi_check_interval_s,
    )


def serve(
    driver: ServedDriver[NodeT],
    settings: ServedSettings,
    *,
    driver_name: str,
    publish: Callable[[], None],
    metrics: plugin_metrics.PluginMetrics,
    stopping: threading.Event,
    health: ports.DeviceHealthSource | None = None,
    check: runtime_cdi_check.RuntimeCDICheck | None = None,
    service: ports.KubeletPluginService | None = None,
    clean: Callable[[], object] | None = None,
) -> Plugin[NodeT]:
    """Serve `driver` to the kubelet; slices follow each registration; stale entries get cleaned.

    Call after `driver.recover()`: the kubelet may call as soon as the socket exists.
    With `health`, the kubelet's device-health stream is served and advertised too. With
    `check`, the runtime is judged before serving, and prepares are refused while it refuses.
    `service` (default: `driver`) is what the kubelet's calls go to: a half's wrapper of the
    driver that does more after each call; `clean` (default: the driver's) one stale-claim
    clean-up round.
    """
    resync = SliceResync(publish, node_name=settings.node_name)
    pod_uid = settings.rolling_update_pod_uid
    if pod_uid:
        for path in grpc_server.remove_dead_sockets(
            plugin_dir=settings.plugin_dir, registry_dir=settings.registry_dir,
            driver_name=driver_name, now=time.time(),
        ):
            log.warning("event=dead_socket_removed node=%s path=%s", settings.node_name, path)
    if service is None:
        service = driver
    if check is not None:
        check.start(stopping)
        service = runtime_cdi_check.RefusingWhileCDIOff(service, check)
    server = grpc_server.PluginServer(
        service=service,
        driver_name=driver_name,
        plugin_dir=settings.plugin_dir,
        registry_dir=settings.registry_dir,
        health_port=settings.health_port,
        health_host=settings.listen_address,
        # Every (re-)registration may follow a kubelet restart that wiped our slices.
        on_registered=resync.registered,
        device_health=health,
        pod_uid=pod_uid,
    )
    resync.start(stopping)
    server.start()
    threading.Thread(target=metrics.warm_up, name="metrics-warm-up", daemon=True).start()
    cleanup = StaleClaimCleanup(
        clean or driver.clean_stale_claims,
        node_name=settings.node_name,
        interval_s=settings.stale_claim_cleanup_interval_s,
    )
    cleanup.start(stopping)
    return Plugin(
        driver=driver, server=server, metrics=metrics, node=driver.node, stopping=stopping,
        slices=resync, cleanup=cleanup, runtime_check=check,
    )
