"""Driver-managed daemon claims: the node facts and CDI-store wrapping the plugin adds for them.

The daemon claim's CDI edits need the IMEX management capability device and a per-domain host
directory (`<plugin dir>/domains/<cdUID>`, mounted at `/imexd`). Both are wired here so the
plugin's own wiring changes by two calls. Inputs (plugin flags, each with its env var; the
chart sets the env):
- --imex-daemon-config-template (IMEX_DAEMON_CONFIG_TEMPLATE): path of the `imexd.cfg`
  template (default: the built-in one);
- --imex-mgmt-capability-path (IMEX_MGMT_CAPABILITY_PATH): the capability file (default: beside
  the `--proc-devices` file, i.e. /proc/driver/nvidia/capabilities/fabric-imex-mgmt for the
  real /proc/devices);
- --host-driver-root (HOST_DRIVER_ROOT): the driver root as the host sees it (the chart's
  nvidiaDriverRoot; the plugin sees it at --nvidia-driver-root), for the daemon pods'
  `nvidia-imex` mounts.
They are read only through the plugin's settings (apps/shell/flags.py), never from the
environment directly.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

from adapters.imex import capability, config_dirs, files
from apps.kubeletplugin import settings as plugin_settings
from core import errors, models, ports
from core.computedomain import daemon_claim, imexconfig, node_facts

# The env var of --imex-daemon-config-template (what the chart sets), named in its error.
TEMPLATE_ENV = "IMEX_DAEMON_CONFIG_TEMPLATE"

log = logging.getLogger(__name__)


def with_daemon_facts(
    node: node_facts.ImexNodeFacts,
    *,
    settings: plugin_settings.Settings,
    config: models.DriverConfig,
) -> node_facts.ImexNodeFacts:
    """`node` plus the management device and the domains directory (driver-managed only)."""
    if config.host_managed:
        return node
    device = capability.read_mgmt_device(
        capability_path=(
            settings.imex_mgmt_capability_path or capability_path(settings.proc_devices)
        ),
        proc_devices_text=files.read_text(settings.proc_devices) or "",
    )
    binaries = find_imex_binaries(
        settings.nvidia_driver_root, host_driver_root=settings.host_driver_root or "/"
    )
    if len(binaries) < len(daemon_claim.IMEX_BINARY_NAMES):
        log.warning(
            "event=imex_binaries_missing driver_root=%s found=%s hint=%r",
            settings.nvidia_driver_root, ",".join(b.container_path for b in binaries) or "none",
            "install the nvidia-imex package of the node's driver version: IMEX daemon pods "
            "on this node cannot start nvidia-imex without it",
        )
    return dataclasses.replace(
        node,
        imex_binaries=binaries,
        imex_mgmt=device,
        daemon_config_root=os.path.join(
            os.path.abspath(settings.plugin_dir), daemon_claim.DOMAINS_DIR_NAME
        ),
    )


def cdi_store(
    inner: ports.CDIStore,
    *,
    node: node_facts.ImexNodeFacts,
    config: models.DriverConfig,
    template_path: str,
    on_prepared: Callable[[str], None] | None = None,
) -> ports.CDIStore:
    """The CDI store, creating/removing per-domain config dirs with daemon claims' specs.

    `template_path` is the plugin's --imex-daemon-config-template ("" = the built-in
    template). Raises ConfigError when it names a file that cannot be read. `on_prepared`
    gets each per-domain directory a daemon claim's spec mounts, before the spec is written.
    """
    if config.host_managed or not node.daemon_config_root:
        return inner
    template = imexconfig.DEFAULT_IMEXD_TEMPLATE
    if template_path:
        text = files.read_text(template_path)
        if text is None:
            raise errors.ConfigError(
                f"{TEMPLATE_ENV}={template_path} does not exist: mount the chart's imexd.cfg "
                "template there, or unset it to use the built-in template"
            )
        template = text
    return config_dirs.DaemonConfigDirs(inner, root=node.daemon_config_root, template=template,
                                        on_prepared=on_prepared)


def find_imex_binaries(
    driver_root: str, *, host_driver_root: str
) -> tuple[node_facts.HostBinary, ...]:
    """`nvidia-imex` and `nvidia-imex-ctl` under the driver root (as mounted in the plugin)."""
    found: list[node_facts.HostBinary] = []
    for name in daemon_claim.IMEX_BINARY_NAMES:
        for directory in daemon_claim.DRIVER_BINARY_DIRS:
            relative = f"{directory}/{name}"
            if os.access(os.path.join(driver_root, relative), os.X_OK):
                found.append(daemon_claim.imex_binary(
                    host_driver_root=host_driver_root, relative_path=relative))
                break
    return tuple(found)


def capability_path(proc_devices: str) -> str:
    """The capability file in the same procfs as `proc_devices` (a stand-in dir in tests)."""
    proc_root = os.path.dirname(os.path.abspath(proc_devices))
    return os.path.join(proc_root, daemon_claim.MGMT_CAPABILITY_PATH.removeprefix("/proc/"))
