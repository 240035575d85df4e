"""Whether this node has an NVSwitch fabric that Fabric Manager manages.

Upstream's rule (pkg/fabricmanager, mirroring the GPU driver container's checks before it
starts Fabric Manager): the nvswitch driver lists at least one device under
`/proc/driver/nvidia-nvswitch/devices` (HGX/DGX A100, H100, H200), or an NVLink 5 switch
(B200 and later) shows as an InfiniBand device whose PCI VPD carries the `SW_MNG` marker.
Both roots are parameters so that tests and a containerised plugin (host's /proc and /sys
mounted elsewhere) read the right files.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Final

from core import errors

log = logging.getLogger(__name__)

NVSWITCH_DEVICES: Final = "driver/nvidia-nvswitch/devices"
INFINIBAND_VPD_GLOB: Final = "class/infiniband/*/device/vpd"
# The VPD keyword an NVLink 5 switch managed by Fabric Manager carries.
SWITCH_MANAGED_MARKER: Final = b"SW_MNG"


def has_nvswitch_fabric(*, proc_root: str = "/proc", sys_root: str = "/sys") -> bool:
    """True when the node has an NVSwitch (or NVLink 5 switch) fabric.

    A missing directory or VPD file means "no fabric"; any other read failure raises
    `errors.PermanentError` naming the path, since guessing either way would publish wrong
    attributes or skip partitioning the user asked for.
    """
    devices = os.path.join(proc_root, NVSWITCH_DEVICES)
    try:
        entries = os.listdir(devices)
    except FileNotFoundError:
        entries = []
    except OSError as exc:
        raise errors.PermanentError(
            f"cannot read {devices} to detect an NVSwitch fabric: {exc}"
        ) from exc
    if entries:
        log.info("event=nvswitch_fabric_detected source=nvswitch devices=%d", len(entries))
        return True
    for vpd in sorted(glob.glob(os.path.join(sys_root, INFINIBAND_VPD_GLOB))):
        try:
            with open(vpd, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            continue  # NB: the device went away between the glob and the read
        except OSError as exc:
            raise errors.PermanentError(
                f"cannot read {vpd} to detect an NVLink switch fabric: {exc}"
            ) from exc
        if SWITCH_MANAGED_MARKER in data:
            log.info("event=nvswitch_fabric_detected source=infiniband_vpd path=%s", vpd)
            return True
    return False
