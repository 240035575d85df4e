"""`compute-domain-kubelet-plugin`: flags -> adapters -> a served, registered plugin."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from adapters.fs import procfs
from adapters.nvml import inventory as nvml_inventory
from apps.kubeletplugin import settings as plugin_settings
from apps.kubeletplugin import wiring
from apps.pluginkit import deferred_cluster
from core import cliques, errors, gates, modes, ports

log = logging.getLogger("compute-domain-kubelet-plugin")


def main(argv: Sequence[str] | None = None) -> int:
    settings = plugin_settings.parse(argv, os.environ)
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # NB: handlers first: the kubelet (or a test) may signal us as soon as we register.
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("event=shutdown signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def api_client() -> ports.Cluster:
        from adapters.kube import cluster as kube_cluster  # ~0.25 s: off the start-up path

        return kube_cluster.KubeCluster.from_config(settings.kubeconfig)

    # The kubelet needs our sockets first: the API client loads beside recovery and serving.
    cluster = deferred_cluster.DeferredCluster(api_client).start()
    try:
        resolved = modes.resolve_driver_config(
            mode=settings.imex_mode,
            isolation=settings.imex_isolation,
            feature_gates=settings.feature_gates,
            namespace=settings.namespace,
            host_imex_check=settings.host_imex_check,
            channel_slots=settings.channel_slots,
        )
        for note in resolved.notes:
            log.info("event=config_note note=%r", note)
        inventory = nvml_inventory.inventory_from_spec(
            settings.nvml,
            node_name=settings.node_name,
            driver_root=settings.nvidia_driver_root,
        )
        node = wiring.read_node_facts(
            node_name=settings.node_name,
            files=procfs.ProcNodeFiles(
                proc_devices_path=settings.proc_devices, boot_id_path=settings.boot_id_path
            ),
            inventory=inventory,
            crash_on_fabric_errors=resolved.config.gates.enabled(
                gates.CRASH_ON_NVLINK_FABRIC_ERRORS
            ),
        )
        plugin = wiring.start_plugin(
            settings, config=resolved.config, cluster=cluster, node=node,
            # A node without a clique looks again at each slice resync.
            probe_clique=lambda: cliques.clique_id_from_fabric(inventory.fabric_records()),
        )
    except errors.DriverError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    problem = cluster.wait()
    if problem is not None:  # e.g. a bad kubeconfig: the same exit as before serving
        log.error("event=startup_failed error=%r", problem.message)
        print(f"error: {problem.message}", file=sys.stderr)
        plugin.stop(grace_s=0)
        return 2
    if settings.metrics_port:
        plugin.metrics.serve(settings.metrics_port)
    stop.wait()
    plugin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
