"""Names fixed by the wire contract with upstream (dra-driver-nvidia-gpu) and Kubernetes.

Everything a manifest, a kubelet or a container runtime can see lives here, so that a
rename is a one-line diff and compatibility tests have one place to pin.
"""

from __future__ import annotations

from typing import Final, NewType

ClaimUID = NewType("ClaimUID", str)
ComputeDomainUID = NewType("ComputeDomainUID", str)
NodeName = NewType("NodeName", str)

DRIVER_NAME: Final = "compute-domain.nvidia.com"
# The GPU half's driver (full GPUs, MIG devices, VFIO functions).
GPU_DRIVER_NAME: Final = "gpu.nvidia.com"

API_GROUP: Final = "resource.nvidia.com"
API_VERSION: Final = "v1beta1"
GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"
DRA_GROUP: Final = "resource.k8s.io"
DRA_VERSION: Final = "v1"
DRA_GROUP_VERSION: Final = f"{DRA_GROUP}/{DRA_VERSION}"

KIND_COMPUTE_DOMAIN: Final = "ComputeDomain"
KIND_COMPUTE_DOMAIN_CLIQUE: Final = "ComputeDomainClique"
KIND_CHANNEL_CONFIG: Final = "ComputeDomainChannelConfig"
KIND_DAEMON_CONFIG: Final = "ComputeDomainDaemonConfig"

# NB: the same string is the node label key, the RCT label key and the finalizer.
COMPUTE_DOMAIN_LABEL: Final = "resource.nvidia.com/computeDomain"
COMPUTE_DOMAIN_FINALIZER: Final = COMPUTE_DOMAIN_LABEL
# The node's NVLink clique, historically set by gpu-feature-discovery; upstream's
# ComputeDomain kubelet plugin sets it when chart value gpuCliqueLabelEnabled is on.
GPU_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
COMPUTE_DOMAIN_TARGET_LABEL: Final = "resource.nvidia.com/computeDomainTarget"
TARGET_WORKLOAD: Final = "Workload"
TARGET_DAEMON: Final = "Daemon"

# Our additive stamps (DESIGN §6): the mode/isolation that admitted a ComputeDomain.
ADMITTED_MODE_ANNOTATION: Final = "resource.nvidia.com/admittedIMEXMode"
ADMITTED_ISOLATION_ANNOTATION: Final = "resource.nvidia.com/admittedIMEXIsolation"

CHANNEL_DEVICE_CLASS: Final = "compute-domain-default-channel.nvidia.com"
DAEMON_DEVICE_CLASS: Final = "compute-domain-daemon.nvidia.com"
# Channel isolation: a node's slot devices (several ComputeDomains and pods share a node).
SLOT_DEVICE_CLASS: Final = "compute-domain-channel-slot.nvidia.com"
CHANNEL_REQUEST_NAME: Final = "channel"
DAEMON_REQUEST_NAME: Final = "daemon"
DAEMONSET_NAME_PREFIX: Final = "computedomain-daemon-"

DEVICE_TYPE_CHANNEL: Final = "channel"
DEVICE_TYPE_DAEMON: Final = "daemon"
DEVICE_TYPE_SLOT: Final = "slot"
# The `device_type` label of `nvidia_dra_prepared_devices` (upstream's values; a slot is
# counted as the IMEX channel it gives the pod).
DEVICE_TYPE_UNKNOWN: Final = "unknown"
PREPARED_DEVICE_TYPES: Final = (DEVICE_TYPE_CHANNEL, DEVICE_TYPE_DAEMON, DEVICE_TYPE_UNKNOWN)
MAX_DEVICES_PER_SLICE: Final = 128

IMEX_CHANNEL_DIR: Final = "/dev/nvidia-caps-imex-channels"
IMEX_CHANNELS_PROC_NAME: Final = "nvidia-caps-imex-channels"
MAX_CHANNEL_ID: Final = 2047

CDI_VENDOR: Final = f"k8s.{DRIVER_NAME}"
CDI_CLASS_CLAIM: Final = "claim"
CDI_CLASS_DEVICE: Final = "device"
CDI_KIND_CLAIM: Final = f"{CDI_VENDOR}/{CDI_CLASS_CLAIM}"

PLUGIN_DIR: Final = f"/var/lib/kubelet/plugins/{DRIVER_NAME}"
REGISTRY_DIR: Final = "/var/lib/kubelet/plugins_registry"
DRA_SOCKET_NAME: Final = "dra.sock"
REGISTRATION_SOCKET_NAME: Final = f"{DRIVER_NAME}-reg.sock"
KUBELET_CALL_TIMEOUT_S: Final = 45.0


def daemonset_name(cd_uid: str) -> str:
    """Name of the per-ComputeDomain IMEX DaemonSet (and its daemon RCT) in driver-managed mode."""
    return f"{DAEMONSET_NAME_PREFIX}{cd_uid}"


def channel_device_name(channel_id: int) -> str:
    """ResourceSlice device name of an IMEX channel."""
    return f"{DEVICE_TYPE_CHANNEL}-{channel_id}"


def slot_device_name(index: int) -> str:
    """ResourceSlice device name of a channel-isolation slot."""
    return f"{DEVICE_TYPE_SLOT}-{index}"


def daemon_device_name(index: int = 0) -> str:
    """ResourceSlice device name of the IMEX daemon device."""
    return f"{DEVICE_TYPE_DAEMON}-{index}"


def prepared_device_type(device_name: str) -> str:
    """The `device_type` metric label of a ComputeDomain device, from its slice name."""
    kind, _, index = device_name.rpartition("-")
    if not index.isascii() or not index.isdigit():
        return DEVICE_TYPE_UNKNOWN
    if kind in (DEVICE_TYPE_CHANNEL, DEVICE_TYPE_SLOT):
        return DEVICE_TYPE_CHANNEL
    return DEVICE_TYPE_DAEMON if kind == DEVICE_TYPE_DAEMON else DEVICE_TYPE_UNKNOWN


def cdi_spec_file_name(claim_uid: str) -> str:
    """File name of a claim's CDI spec in the CDI root (one file per claim)."""
    return f"{CDI_VENDOR}-{CDI_CLASS_CLAIM}_{claim_uid}.json"
