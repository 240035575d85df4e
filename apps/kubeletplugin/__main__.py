"""`compute-domain-kubelet-plugin`: flags -> adapters -> a served, registered plugin."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from adapters import fabricmanager
from adapters.fs import procfs
from adapters.nvml import inventory as nvml_inventory
from apps.kubeletplugin import settings as plugin_settings
from apps.kubeletplugin import wiring
from apps.pluginkit import process, serving
from apps.shell import logs, signals
from core import gates, ports
from core.computedomain import cliques, modes, node_facts

log = logging.getLogger("compute-domain-kubelet-plugin")


def main(argv: Sequence[str] | None = None) -> int:
    settings = plugin_settings.parse(argv, os.environ)
    logs.configure(settings.log_verbosity)
    stop = signals.stop_on_signals(log)
    return process.run(
        lambda cluster: _start(settings, cluster),
        kubeconfig=settings.kubeconfig, metrics_port=settings.metrics_port, stop=stop, log=log,
        listen_address=settings.listen_address,
    )


def _start(
    settings: plugin_settings.Settings, cluster: ports.Cluster
) -> serving.Plugin[node_facts.ImexNodeFacts]:
    resolved = modes.resolve_driver_config(
        mode=settings.imex_mode,
        isolation=settings.imex_isolation,
        feature_gates=settings.feature_gates,
        namespace=settings.namespace,
        host_imex_check=settings.host_imex_check,
        channel_slots=settings.channel_slots,
    )
    gates.refuse_unbuilt(resolved.config.gates, gates.Component.COMPUTE_DOMAIN_PLUGIN)
    for note in resolved.notes:
        log.info("event=config_note note=%r", note)
    inventory = nvml_inventory.inventory_from_spec(
        settings.nvml,
        node_name=settings.node_name,
        driver_root=settings.nvidia_driver_root,
    )
    wiring.check_driver_version(
        resolved.config, inventory=inventory, node_name=settings.node_name
    )
    strict = resolved.config.gates.enabled(gates.CRASH_ON_NVLINK_FABRIC_ERRORS)
    # Upstream's use of the gate in this plugin: on a single-node NVSwitch system, GPUs not yet
    # registered with the fabric (no partition of theirs active) do not stop the plugin.
    single_node_nvlink = resolved.config.gates.enabled(
        gates.FABRIC_MANAGER_PARTITIONING
    ) and fabricmanager.has_nvswitch_fabric(
        proc_root=os.path.dirname(settings.proc_devices) or "/proc"
    )
    node = wiring.read_node_facts(
        node_name=settings.node_name,
        files=procfs.ProcNodeFiles(
            proc_devices_path=settings.proc_devices, boot_id_path=settings.boot_id_path
        ),
        inventory=inventory,
        crash_on_fabric_errors=strict,
        single_node_nvlink=single_node_nvlink,
    )
    return wiring.start_plugin(
        settings, config=resolved.config, cluster=cluster, node=node,
        # A node without a clique looks again at each slice resync.
        probe_clique=lambda: cliques.clique_id_from_fabric(
            inventory.fabric_records(), strict=strict, forming_ok=single_node_nvlink
        ),
        # Judged at start and at each clique refresh: a degraded fabric taints the devices.
        probe_fabric=inventory.fabric_records,
    )


if __name__ == "__main__":
    sys.exit(main())
