"""`core.ports.FabricManager` over the real Fabric Manager, through libnvfm in a child process.

Fabric Manager's API is a C library (`libnvfm.so.1`). As NVML is (`adapters.nvml.real`), it is
loaded only in a child, `adapters.fabricmanager.fmctl`, one per call: a crash or hang in the
library fails that call with a `errors.RetryableError` and the next call starts afresh. Every
way a call can end is turned into a typed error whose message says what to do:
Fabric Manager unreachable or not ready, the library missing, the child crashing or hanging →
`RetryableError`; a partition it does not have, GPUs another active partition holds, a mode
without partitions, a library of another layout → `PermanentError`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Final

from adapters.driverlib import child
from adapters.fabricmanager import _codec, _nvfm, address
from core import errors
from core.gpu import fm_partitions

log = logging.getLogger(__name__)

FMCTL_MODULE: Final = "adapters.fabricmanager.fmctl"
# NB: activating a partition resets and trains its GPUs' NVLinks: seconds, not milliseconds.
DEFAULT_TIMEOUT_S: Final = 60.0
# How long fmConnect waits for Fabric Manager (go-nvfm's default, which upstream uses).
DEFAULT_CONNECT_TIMEOUT_MS: Final = 1000
INSTALL_HINT: Final = (
    "install Fabric Manager's API library on the node (package nvidia-fabricmanager-dev, "
    "or libnvfm1, of the same version as the nvidia-fabricmanager service) so that the "
    "driver root holds libnvfm.so.1, or disable the FabricManagerPartitioning feature gate"
)
_RETRYABLE: Final = frozenset({
    _nvfm.Return.GENERIC_ERROR, _nvfm.Return.UNINITIALIZED, _nvfm.Return.TIMEOUT,
    _nvfm.Return.CONNECTION_NOT_VALID, _nvfm.Return.NOT_READY,
    _nvfm.Return.RESOURCE_NOT_READY,
})
_IN_USE: Final = frozenset({
    _nvfm.Return.IN_USE, _nvfm.Return.RESOURCE_IN_USE,
    _nvfm.Return.RESOURCE_USED_IN_ANOTHER_PARTITION, _nvfm.Return.PARTITION_ID_IN_USE,
})
_UNKNOWN_ID: Final = frozenset({
    _nvfm.Return.BADPARAM, _nvfm.Return.RESOURCE_BAD, _nvfm.Return.PARTITION_ID_NOT_IN_USE,
})
_NO_PARTITIONING: Final = frozenset({_nvfm.Return.NOT_SUPPORTED, _nvfm.Return.NOT_CONFIGURED})


class NvfmFabricManager:
    """`core.ports.FabricManager` over libnvfm, each call in a new `fmctl` child.

    `library`: the path of libnvfm.so.1, or a name the loader searches (with the library
    directories of `driver_root` first on the child's LD_LIBRARY_PATH). `command` replaces
    the child (tests); `env` replaces its environment (default: ours); either way this
    package is made importable there.
    Calls are serialised: an activation reads the state and acts on it in one child.
    """

    def __init__(
        self,
        *,
        endpoint: address.Address,
        library: str = _nvfm.LIBRARY_NAME,
        driver_root: str = "/",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.library = library
        self.timeout_s = timeout_s
        self.connect_timeout_ms = connect_timeout_ms
        self.command = tuple(command or (sys.executable, "-m", FMCTL_MODULE))
        self._env = child.child_env(
            driver_root=driver_root, env=None if env is None else child.importable(env)
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"NvfmFabricManager(endpoint={self.endpoint!r}, library={self.library!r})"

    def check_library(self) -> None:
        """Load the library in a child, without connecting: PermanentError (with what to
        install) where it is missing or lacks a call this client makes."""
        answer = self._ask(_codec.Action.LIBRARY)
        if answer.outcome is _codec.Outcome.LIBRARY_UNAVAILABLE:
            raise errors.PermanentError(self._library_missing(answer))
        self._raise_for(answer, None)

    def partitions(self) -> tuple[fm_partitions.Partition, ...]:
        """Every partition Fabric Manager supports, sorted by id, each marked active or not."""
        answer = self._ask(_codec.Action.LIST)
        self._raise_for(answer, None)
        return self._partitions(answer)

    def activate(self, partition_id: int) -> None:
        """Activate `partition_id` unless active; PermanentError if unknown or its GPUs are
        held by another active partition (FM_ST_IN_USE)."""
        answer = self._ask(_codec.Action.ACTIVATE, partition_id)
        self._raise_for(answer, partition_id)
        if not answer.changed:
            log.info("event=fm_partition_already_active partition=%d", partition_id)
            return
        modules = next(
            (p.module_ids for p in self._partitions(answer) if p.partition_id == partition_id),
            frozenset[int](),
        )
        log.info(
            "event=fm_partition_activated partition=%d modules=%s",
            partition_id, ",".join(map(str, sorted(modules))),
        )

    def deactivate(self, partition_id: int) -> None:
        """Deactivate `partition_id` unless inactive; PermanentError if unknown."""
        answer = self._ask(_codec.Action.DEACTIVATE, partition_id)
        self._raise_for(answer, partition_id)
        if answer.changed:
            log.info("event=fm_partition_deactivated partition=%d", partition_id)
        else:
            log.info("event=fm_partition_already_inactive partition=%d", partition_id)

    def _ask(self, action: _codec.Action, partition_id: int | None = None) -> _codec.Answer:
        """Run one child for `action`; RetryableError where it gave no answer."""
        request = _codec.Request(
            library=self.library, address=self.endpoint.address,
            unix_socket=self.endpoint.unix_socket, connect_timeout_ms=self.connect_timeout_ms,
            action=action, partition_id=partition_id,
        )
        what = f"Fabric Manager {action.value}" + (
            f" of partition {partition_id}" if partition_id is not None else ""
        )
        with self._lock:
            try:
                done = child.run(
                    (*self.command, _codec.encode_request(request)),
                    timeout_s=self.timeout_s, env=self._env,
                )
            except child.ChildNotRun as exc:
                log.warning("event=fm_child_failed action=%s detail=%r", action.value, str(exc))
                raise errors.RetryableError(
                    f"{what} failed: the libnvfm child process ({FMCTL_MODULE}): {exc}; check "
                    "that nv-fabricmanager is running and answering on the node "
                    "(systemctl status nvidia-fabricmanager, its log)"
                ) from exc
        if done.crash_signal is not None:
            log.warning(
                "event=fm_child_crashed action=%s signal=%s", action.value, done.crash_signal
            )
            raise errors.RetryableError(
                f"{what} failed: libnvfm crashed with {done.crash_signal} in its child process "
                "(the plugin is unaffected; the next call starts a new one); check the "
                "nv-fabricmanager log and that libnvfm matches the service's version. "
                f"stderr: {done.stderr_tail}"
            )
        obj = child.last_json_object(done.stdout)
        try:
            if done.returncode != 0 or obj is None:
                raise _codec.AnswerError(f"exit status {done.returncode} and no answer")
            return _codec.decode_answer(obj)
        except _codec.AnswerError as exc:
            raise errors.RetryableError(
                f"{what} failed: its child process ({FMCTL_MODULE}) answered nonsense ({exc}); "
                f"stderr: {done.stderr_tail}"
            ) from exc

    def _partitions(self, answer: _codec.Answer) -> tuple[fm_partitions.Partition, ...]:
        try:
            return fm_partitions.check_partitions(_codec.to_partitions(answer.partitions or ()))
        except _codec.ContradictoryPartition as exc:
            raise errors.PermanentError(str(exc)) from exc

    def _raise_for(self, answer: _codec.Answer, partition_id: int | None) -> None:
        """Nothing for a done answer; otherwise the error its outcome means."""
        match answer.outcome:
            case _codec.Outcome.DONE:
                return
            case _codec.Outcome.LIBRARY_UNAVAILABLE:
                raise errors.RetryableError(self._library_missing(answer))
            case _codec.Outcome.BAD_COUNT:
                raise errors.PermanentError(
                    f"libnvfm ({self.library}) answered in another layout than the one this "
                    f"plugin binds ({answer.message}); install the libnvfm of the running "
                    "nvidia-fabricmanager service's version"
                )
            case _codec.Outcome.UNKNOWN_PARTITION:
                known = ", ".join(str(p.partition_id) for p in self._partitions(answer))
                raise errors.PermanentError(
                    f"Fabric Manager has no partition {partition_id} (it supports: {known})"
                )
            case _codec.Outcome.FM_STATUS:
                raise self._status_error(answer, partition_id)

    def _status_error(self, answer: _codec.Answer, partition_id: int | None) -> errors.DriverError:
        status, name, call = answer.status, _nvfm.return_name(answer.status), answer.call
        where = f"{'unix socket' if self.endpoint.unix_socket else 'TCP'} {self.endpoint.address}"
        log.warning("event=fm_call_failed call=%s status=%s fm=%r", call, name, where)
        if call in ("fmLibInit", "fmConnect") or status in _RETRYABLE:
            return errors.RetryableError(
                f"cannot reach Fabric Manager at {where}: {call} returned {name}; check that "
                "nv-fabricmanager runs on the node (systemctl status nvidia-fabricmanager) and "
                "listens there (unix socket: mounted from the driver root, or set "
                f"{address.UNIX_SOCKET_ENV}; TCP: set {address.ADDRESS_ENV})"
            )
        if status in _IN_USE and call == "fmActivateFabricPartition" and partition_id is not None:
            return errors.PermanentError(self._in_use(answer, partition_id, name))
        if status in _UNKNOWN_ID and partition_id is not None:
            return errors.PermanentError(
                f"Fabric Manager refused partition {partition_id} ({call} returned {name}): "
                "it does not name a partition Fabric Manager can change; list them with fmpm -l"
            )
        if status in _NO_PARTITIONING:
            return errors.PermanentError(
                f"Fabric Manager at {where} does not manage partitions ({call} returned "
                f"{name}): run it in Shared NVSwitch mode (FABRIC_MODE=1 in fabricmanager.cfg) "
                "or disable the FabricManagerPartitioning feature gate"
            )
        if status == _nvfm.Return.VERSION_MISMATCH:
            return errors.PermanentError(
                f"libnvfm ({self.library}) does not accept the struct versions this plugin "
                f"binds ({call} returned {name}); install the libnvfm of the running "
                "nvidia-fabricmanager service's version"
            )
        target = f" for partition {partition_id}" if partition_id is not None else ""
        return errors.PermanentError(
            f"Fabric Manager refused {call}{target} ({name}); check NVLink health "
            "(nvidia-smi nvlink --status) and the nv-fabricmanager log"
        )

    def _in_use(self, answer: _codec.Answer, partition_id: int, name: str) -> str:
        partitions = self._partitions(answer)
        wanted = next(
            (p.module_ids for p in partitions if p.partition_id == partition_id), frozenset[int]()
        )
        holders = [
            f"active partition {p.partition_id} holds modules "
            f"{sorted(p.module_ids & wanted)}"
            for p in partitions
            if p.active and p.partition_id != partition_id and p.module_ids & wanted
        ]
        return (
            f"cannot activate Fabric Manager partition {partition_id} (modules "
            f"{sorted(wanted)}): {'; '.join(holders) or 'its GPUs are in use'} ({name})"
        )

    def _library_missing(self, answer: _codec.Answer) -> str:
        return f"cannot load Fabric Manager's library {self.library} ({answer.message}): " + (
            INSTALL_HINT
        )
