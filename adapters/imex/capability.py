"""The IMEX management capability device of this node, read from the driver's procfs files."""

from __future__ import annotations

import logging

from adapters.imex import files
from core import errors
from core.computedomain import daemon_claim, node_facts

log = logging.getLogger(__name__)


def read_mgmt_device(
    *, capability_path: str, proc_devices_text: str
) -> node_facts.ImexMgmtDevice | None:
    """`/dev/nvidia-caps/nvidia-cap<N>` with its major, or None (logged) when the node lacks it.

    A node without it can still run daemons for a clique-less domain; a daemon claim on a node
    with a clique is then refused by the planner with the fix.
    """
    major = daemon_claim.nvidia_caps_major(proc_devices_text)
    text = files.read_text(capability_path)
    if major is None or text is None:
        log.warning(
            "event=imex_mgmt_capability_missing capability=%s present=%s nvidia_caps_major=%s",
            capability_path, text is not None, major,
        )
        return None
    try:
        device = daemon_claim.parse_mgmt_capability(text, major=major)
    except errors.ConfigError as exc:
        log.warning("event=imex_mgmt_capability_unreadable error=%r", exc.message)
        return None
    log.info("event=imex_mgmt_capability path=%s major=%d minor=%d", device.path, device.major,
             device.minor)
    return device
