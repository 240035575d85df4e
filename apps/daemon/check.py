"""`compute-domain-daemon check`: the daemon pod's readiness probe.

Exit 0 when the local nvidia-imex answers READY; 1 when it does not (or cannot be asked);
3 when this node has no NVLink fabric (no clique), so no IMEX daemon can ever run here. The
one-line message says which, and what to look at.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.imex import ctl as imex_ctl
from adapters.nvml import inventory as nvml_inventory
from adapters.nvml import real as nvml_real
from apps.daemon import settings as daemon_settings
from core import errors
from core.computedomain import cliques

READY = 0
NOT_READY = 1
NO_FABRIC = 3


def run_check(
    settings: daemon_settings.Settings, *, say: Callable[[str], None] = print
) -> int:
    """Answer the probe; see the module docstring for the exit statuses."""
    clique_id = settings.clique_id
    if clique_id is None:
        # Not inside a daemon pod (no CDI edits): ask NVML, as the kubelet plugin would.
        try:
            clique_id = _clique_from_nvml(settings)
        except (errors.DriverError, nvml_real.NvmlError) as exc:
            say(f"not ready: cannot tell this node's NVLink clique: {_message(exc)}")
            return NOT_READY
    if not clique_id:
        say(
            f"no NVLink fabric on node {settings.node_name or '(this node)'}: the GPUs report no "
            "NVLink clique (fabric not supported or cluster UUID all zero), so no IMEX daemon "
            "runs here; multi-node NVLink ComputeDomains need GB200/GH200-class NVLink nodes"
        )
        return NO_FABRIC
    readiness = imex_ctl.IMEXCtl(
        command=settings.imex_ctl_command, config_path=settings.imexd_cfg
    ).query()
    if readiness.ready:
        say(f"ready: nvidia-imex of clique {clique_id} answered {readiness.detail}")
        return READY
    say(f"not ready: nvidia-imex of clique {clique_id}: {readiness.detail}")
    return NOT_READY


def _clique_from_nvml(settings: daemon_settings.Settings) -> str:
    inventory = nvml_inventory.inventory_from_spec(
        settings.nvml, node_name=settings.node_name, driver_root=settings.nvidia_driver_root
    )
    return cliques.clique_id_from_fabric(inventory.fabric_records())


def _message(exc: Exception) -> str:
    return str(getattr(exc, "message", "") or exc)
