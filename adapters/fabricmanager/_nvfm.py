"""ctypes binding of Fabric Manager's C API library (`libnvfm.so.1`).

Only the child process `adapters.fabricmanager.fmctl` calls `load`: loading the library in
the plugin would let a crash in it take the plugin down (the client imports this module for
the names of return codes only). Layouts, constants and return codes
are those of FM's public headers (`nv_fm_types.h`, `nv_fm_agent.h`, as NVIDIA's go-nvfm
vendors them); only what partition management needs is bound. Every versioned struct carries
`sizeof(struct) | (version << 24)` in its first field (`MAKE_FM_PARAM_VERSION`): a library
built for another layout answers FM_ST_VERSION_MISMATCH instead of misreading memory.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Final

LIBRARY_NAME: Final = "libnvfm.so.1"

FM_MAX_STR_LENGTH: Final = 256
FM_UUID_BUFFER_SIZE: Final = 80
FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE: Final = 32
FM_MAX_NUM_GPUS: Final = 16
FM_MAX_FABRIC_PARTITIONS: Final = 64
# Fabric Manager's TCP command port, where an address names no port.
FM_CMD_PORT_NUMBER: Final = 6666


class Return(enum.IntEnum):
    """`fmReturn_t`: what every call returns."""

    SUCCESS = 0
    BADPARAM = -1
    GENERIC_ERROR = -2
    NOT_SUPPORTED = -3
    UNINITIALIZED = -4
    TIMEOUT = -5
    VERSION_MISMATCH = -6
    IN_USE = -7
    NOT_CONFIGURED = -8
    CONNECTION_NOT_VALID = -9
    NVLINK_ERROR = -10
    RESOURCE_BAD = -11
    RESOURCE_IN_USE = -12
    RESOURCE_NOT_IN_USE = -13
    RESOURCE_EXHAUSTED = -14
    RESOURCE_NOT_READY = -15
    PARTITION_EXISTS = -16
    PARTITION_ID_IN_USE = -17
    PARTITION_ID_NOT_IN_USE = -18
    PARTITION_NAME_IN_USE = -19
    PARTITION_NAME_NOT_IN_USE = -20
    PARTITION_ID_NAME_MISMATCH = -21
    NOT_READY = -22
    RESOURCE_USED_IN_THIS_PARTITION = -23
    RESOURCE_USED_IN_ANOTHER_PARTITION = -24
    PARTITION_MISWIRED_TRUNKS = -25
    PARTITION_INSUFFICIENT_TRUNKS = -26
    PARTITION_MISSING_SWITCHES = -27
    PARTITION_NETWORK_CONFIG_ERROR = -28
    PARTITION_ROUTE_PROGRAMMING_ERROR = -29


def return_name(status: int) -> str:
    """"FM_ST_IN_USE" for -7; the bare number for a code this binding does not know."""
    try:
        return f"FM_ST_{Return(status).name}"
    except ValueError:
        return f"fmReturn_t {status}"


class AddressType(enum.IntEnum):
    """`enum nvFmApiAddrTypes` (fmConnectParams_v2.addressType)."""

    UNKNOWN = 0
    INET = 1
    UNIX = 2
    VSOCK = 3


class ConnectParams(ctypes.Structure):
    """`fmConnectParams_v2` (= fmConnectParams_t)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("addressInfo", ctypes.c_char * FM_MAX_STR_LENGTH),
        ("timeoutMs", ctypes.c_uint),
        ("addressIsUnixSocket", ctypes.c_uint),  # NB: deprecated by addressType, still read
        ("addressType", ctypes.c_int),
    ]


class PartitionGpuInfo(ctypes.Structure):
    """`fmFabricPartitionGpuInfo_t`; physicalId is the GPU's module id (board position)."""

    _fields_ = [
        ("physicalId", ctypes.c_uint),
        ("uuid", ctypes.c_char * FM_UUID_BUFFER_SIZE),
        ("pciBusId", ctypes.c_char * FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
        ("numNvLinksAvailable", ctypes.c_uint),
        ("maxNumNvLinks", ctypes.c_uint),
        ("nvlinkLineRateMBps", ctypes.c_uint),
    ]


class PartitionInfo(ctypes.Structure):
    """`fmFabricPartitionInfo_t`."""

    _fields_ = [
        ("partitionId", ctypes.c_uint),  # fmFabricPartitionId_t
        ("isActive", ctypes.c_uint),
        ("numGpus", ctypes.c_uint),
        ("gpuInfo", PartitionGpuInfo * FM_MAX_NUM_GPUS),
    ]


class PartitionList(ctypes.Structure):
    """`fmFabricPartitionList_v2` (= fmFabricPartitionList_t)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("numPartitions", ctypes.c_uint),
        ("maxNumPartitions", ctypes.c_uint),
        ("partitionInfo", PartitionInfo * FM_MAX_FABRIC_PARTITIONS),
    ]


def param_version(struct: type[ctypes.Structure], version: int) -> int:
    """`MAKE_FM_PARAM_VERSION(struct, version)`."""
    return ctypes.sizeof(struct) | (version << 24)


# NB: the v2 connect params are version 2, but the v2 partition list is version 1
# (fmFabricPartitionList_version2 is MAKE_FM_PARAM_VERSION(fmFabricPartitionList_v2, 1)).
CONNECT_PARAMS_VERSION: Final = param_version(ConnectParams, 2)
PARTITION_LIST_VERSION: Final = param_version(PartitionList, 1)

Handle = ctypes.c_void_p  # fmHandle_t


def load(library: str) -> ctypes.CDLL:
    """dlopen `library` (a path, or a name the loader searches) and declare the calls used.

    Raises OSError when it cannot be loaded, AttributeError when it lacks one of the calls.
    """
    lib = ctypes.CDLL(library)
    status = ctypes.c_int
    signatures: dict[str, list[type[object]]] = {
        "fmLibInit": [],
        "fmLibShutdown": [],
        "fmConnect": [ctypes.POINTER(ConnectParams), ctypes.POINTER(Handle)],
        "fmDisconnect": [Handle],
        "fmGetSupportedFabricPartitions": [Handle, ctypes.POINTER(PartitionList)],
        "fmActivateFabricPartition": [Handle, ctypes.c_uint],
        "fmDeactivateFabricPartition": [Handle, ctypes.c_uint],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = status
    return lib
