"""What a driver-managed daemon claim hands the `compute-domain-daemon` pod through CDI.

The daemon learns everything node- and domain-specific from these edits, not from its pod
spec: its ComputeDomain (`COMPUTE_DOMAIN_UUID`/`_NAME`/`_NAMESPACE`), the node's NVLink clique
(`CLIQUE_ID`, empty on a node without fabric), a bind mount of the per-domain host directory at
`/imexd` (where the plugin leaves the `imexd.cfg` template and the daemon writes `nodes.cfg`),
the host driver's `nvidia-imex` and `nvidia-imex-ctl` (read-only, at /usr/bin: the daemon image
ships no driver files), and, on a node with a clique, the IMEX management capability device
`nvidia-imex` needs (`/dev/nvidia-caps/nvidia-cap<N>`, N from
`/proc/driver/nvidia/capabilities/fabric-imex-mgmt`).
"""

from __future__ import annotations

import posixpath

from core import cdi, errors, models, procdevices
from core.computedomain import node_facts

CONTAINER_CONFIG_DIR = "/imexd"
TEMPLATE_FILE_NAME = "imexd.cfg.tmpl"
DOMAINS_DIR_NAME = "domains"
MGMT_CAPABILITY_PATH = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
NVIDIA_CAPS_PROC_NAME = "nvidia-caps"
NVIDIA_CAPS_DEV_DIR = "/dev/nvidia-caps"

ENV_CLIQUE_ID = "CLIQUE_ID"
ENV_DOMAIN_NAME = "COMPUTE_DOMAIN_NAME"
ENV_DOMAIN_NAMESPACE = "COMPUTE_DOMAIN_NAMESPACE"

_MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")
_BINARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
IMEX_BINARY_NAMES = ("nvidia-imex", "nvidia-imex-ctl")
# Where a driver installation keeps its executables, relative to the driver root.
DRIVER_BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin")
CONTAINER_BINARY_DIR = "/usr/bin"


def domain_config_dir(root: str, domain_uid: str) -> str:
    """Host directory of one domain's IMEX files: `<plugin dir>/domains/<cdUID>`."""
    return posixpath.join(root, domain_uid)


def nvidia_caps_major(proc_devices_text: str) -> int | None:
    """Major of the `nvidia-caps` character device in /proc/devices, or None if absent."""
    return procdevices.character_major(proc_devices_text, NVIDIA_CAPS_PROC_NAME)


def parse_mgmt_capability(text: str, *, major: int) -> node_facts.ImexMgmtDevice:
    """The management device from the capability file's `DeviceFileMinor`/`DeviceFileMode`.

    Raises ConfigError naming the file when the minor is missing or not a number.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    minor = fields.get("DeviceFileMinor", "")
    mode = fields.get("DeviceFileMode", "")
    if not minor.isdigit():
        raise errors.ConfigError(
            f"{MGMT_CAPABILITY_PATH} has no numeric DeviceFileMinor (got {minor!r}); the NVIDIA "
            "driver on this node does not expose the IMEX management capability correctly: "
            "check the driver version (IMEX needs R550 or newer)"
        )
    return node_facts.ImexMgmtDevice(
        path=f"{NVIDIA_CAPS_DEV_DIR}/nvidia-cap{int(minor)}",
        major=major,
        minor=int(minor),
        # NB: the file states the mode in decimal (256 = 0o400), as CDI's fileMode wants it.
        file_mode=int(mode) if mode.isdigit() else 0o400,
    )


def imex_binary(*, host_driver_root: str, relative_path: str) -> node_facts.HostBinary:
    """The mount of one driver executable found at `relative_path` under the driver root."""
    name = posixpath.basename(relative_path)
    return node_facts.HostBinary(
        host_path=posixpath.join(host_driver_root, relative_path),
        container_path=posixpath.join(CONTAINER_BINARY_DIR, name),
    )


def check_node_can_run_daemon(node: node_facts.ImexNodeFacts) -> None:
    """Refuse a daemon claim on a node with a clique but no IMEX management device.

    Raises PermanentError saying what to fix; a node without a clique needs no device
    (its daemon idles and reports that the node has no fabric).
    """
    if node.clique_id and node.imex_mgmt is None:
        raise errors.PermanentError(
            f"node {node.node_name} is in NVLink clique {node.clique_id} but the plugin found no "
            f"IMEX management capability ({MGMT_CAPABILITY_PATH} or the {NVIDIA_CAPS_PROC_NAME} "
            "entry of /proc/devices is missing), so nvidia-imex could not run: check the NVIDIA "
            "driver version and that the plugin mounts the driver's /proc"
        )


def daemon_devices(
    *, claim_uid: str, domain: models.ComputeDomain, node: node_facts.ImexNodeFacts
) -> list[models.JSONObject]:
    """The single CDI device `<claimUID>-daemon` of a daemon claim, with every edit it needs.

    `COMPUTE_DOMAIN_UUID` stays the first env entry: a checkpoint rebuilt from CDI files reads
    the domain from it.
    """
    edits: models.JSONObject = {
        "env": [
            f"{cdi.DOMAIN_ENV}={domain.uid}",
            f"{ENV_DOMAIN_NAME}={domain.meta.name}",
            f"{ENV_DOMAIN_NAMESPACE}={domain.meta.namespace}",
            f"{ENV_CLIQUE_ID}={node.clique_id}",
        ],
        "mounts": [
            {
                "hostPath": domain_config_dir(node.daemon_config_root, domain.uid),
                "containerPath": CONTAINER_CONFIG_DIR,
                "options": list(_MOUNT_OPTIONS),
            }
        ],
    }
    edits["mounts"] += [
        {"hostPath": binary.host_path, "containerPath": binary.container_path,
         "options": list(_BINARY_MOUNT_OPTIONS)}
        for binary in node.imex_binaries
    ]
    if node.clique_id and node.imex_mgmt is not None:
        device = node.imex_mgmt
        edits["deviceNodes"] = [
            {
                "path": device.path,
                "type": "c",
                "major": device.major,
                "minor": device.minor,
                "fileMode": device.file_mode,
            }
        ]
    return [{"name": cdi.daemon_device_name(claim_uid), "containerEdits": edits}]
