"""Child process making one Fabric Manager request through libnvfm.

`python -m adapters.fabricmanager.fmctl '<request JSON>'` (`_codec.Request`) prints one JSON
line (`_codec.Answer`) and exits 0; exit 2 on a request it cannot read. It runs apart from
the plugin (`adapters.fabricmanager.real` starts it for every call) so that a crash or hang in
libnvfm costs one call, never the plugin. Each run is a whole session, as upstream's client
makes one per call: fmLibInit, fmConnect, the calls, fmDisconnect, fmLibShutdown.
Activation and deactivation read the partition list first and leave a partition that is
already in the wanted state alone (Fabric Manager refuses to activate an active one).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

from adapters.fabricmanager import _codec, _nvfm

USAGE = "usage: python -m adapters.fabricmanager.fmctl '<request JSON>'"


class _Failed(Exception):
    """A libnvfm call returned something other than FM_ST_SUCCESS."""

    def __init__(self, call: str, status: int) -> None:
        super().__init__(f"{call} returned {_nvfm.return_name(status)}")
        self.call = call
        self.status = status


class _BadCount(Exception):
    """libnvfm filled a count beyond its struct's array."""


def main(argv: Sequence[str]) -> int:
    """Serve one request; exit 0 whenever an answer was printed, 2 on a bad request."""
    try:
        request = _codec.decode_request(argv[0]) if len(argv) == 1 else None
    except _codec.AnswerError as exc:
        print(f"{USAGE}: {exc}", file=sys.stderr)
        return 2
    if request is None:
        print(USAGE, file=sys.stderr)
        return 2
    print(_codec.encode_answer(_serve(request)), flush=True)
    return 0


def _serve(request: _codec.Request) -> _codec.Answer:
    try:
        lib = _nvfm.load(request.library)
    except (OSError, AttributeError) as exc:
        return _codec.Answer(outcome=_codec.Outcome.LIBRARY_UNAVAILABLE, message=str(exc))
    if request.action is _codec.Action.LIBRARY:
        return _codec.Answer(outcome=_codec.Outcome.DONE)
    listed: tuple[_codec.ListedPartition, ...] | None = None
    try:
        _check("fmLibInit", lib.fmLibInit())
        try:
            handle = _connect(lib, request)
            try:
                listed = _list(lib, handle)
                changed = _change(lib, handle, request, listed)
            finally:
                lib.fmDisconnect(handle)  # NB: its status cannot change what was done
        finally:
            lib.fmLibShutdown()
    except _Failed as exc:
        return _codec.Answer(
            outcome=_codec.Outcome.FM_STATUS, partitions=listed, call=exc.call,
            status=exc.status, message=str(exc),
        )
    except _BadCount as exc:
        return _codec.Answer(outcome=_codec.Outcome.BAD_COUNT, message=str(exc))
    if changed is None:
        return _codec.Answer(outcome=_codec.Outcome.UNKNOWN_PARTITION, partitions=listed)
    return _codec.Answer(outcome=_codec.Outcome.DONE, partitions=listed, changed=changed)


def _check(call: str, status: int) -> None:
    if status != _nvfm.Return.SUCCESS:
        raise _Failed(call, status)


def _connect(lib: ctypes.CDLL, request: _codec.Request) -> _nvfm.Handle:
    params = _nvfm.ConnectParams()
    params.version = _nvfm.CONNECT_PARAMS_VERSION
    params.addressInfo = request.address.encode()
    params.timeoutMs = request.connect_timeout_ms
    params.addressIsUnixSocket = 1 if request.unix_socket else 0
    params.addressType = _nvfm.AddressType.UNIX if request.unix_socket else _nvfm.AddressType.INET
    handle = _nvfm.Handle()
    _check("fmConnect", lib.fmConnect(ctypes.byref(params), ctypes.byref(handle)))
    return handle


def _list(lib: ctypes.CDLL, handle: _nvfm.Handle) -> tuple[_codec.ListedPartition, ...]:
    found = _nvfm.PartitionList()
    found.version = _nvfm.PARTITION_LIST_VERSION
    _check(
        "fmGetSupportedFabricPartitions",
        lib.fmGetSupportedFabricPartitions(handle, ctypes.byref(found)),
    )
    # NB: a count beyond the array means the library fills another layout than ours; clamping
    # it would drop GPUs from a partition and let a subset match it (upstream fails likewise).
    if found.numPartitions > _nvfm.FM_MAX_FABRIC_PARTITIONS:
        raise _BadCount(
            f"fmGetSupportedFabricPartitions reported {found.numPartitions} partitions; "
            f"fmFabricPartitionList_t holds {_nvfm.FM_MAX_FABRIC_PARTITIONS}"
        )
    listed = []
    for info in found.partitionInfo[: found.numPartitions]:
        if info.numGpus > _nvfm.FM_MAX_NUM_GPUS:
            raise _BadCount(
                f"fmGetSupportedFabricPartitions reported {info.numGpus} GPUs in partition "
                f"{info.partitionId}; fmFabricPartitionInfo_t holds {_nvfm.FM_MAX_NUM_GPUS}"
            )
        gpus = tuple(
            _codec.Gpu(
                physical_id=int(gpu.physicalId),
                uuid=gpu.uuid.decode(errors="replace"),
                pci_bus_id=gpu.pciBusId.decode(errors="replace"),
            )
            for gpu in info.gpuInfo[: info.numGpus]
        )
        listed.append(
            _codec.ListedPartition(
                partition_id=int(info.partitionId), active=bool(info.isActive), gpus=gpus
            )
        )
    return tuple(listed)


def _change(
    lib: ctypes.CDLL,
    handle: _nvfm.Handle,
    request: _codec.Request,
    listed: tuple[_codec.ListedPartition, ...],
) -> bool | None:
    """Whether the request changed anything; None for a partition Fabric Manager lacks."""
    if request.action is _codec.Action.LIST:
        return False
    wanted = request.action is _codec.Action.ACTIVATE
    state = {p.partition_id: p.active for p in listed}
    if request.partition_id not in state:
        return None
    if state[request.partition_id] == wanted:
        return False
    call = "fmActivateFabricPartition" if wanted else "fmDeactivateFabricPartition"
    _check(call, getattr(lib, call)(handle, request.partition_id))
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
