"""The GPU health watch: run as `python -m adapters.nvml.health_watch`, prints JSON lines.

Like `adapters.nvml.probe`, NVML runs here, in a child process, so that a crash or hang in
the library is a restart in the plugin (`adapters.nvml.health_events`), never its end. The
lines are `adapters.nvml._health_lines`: a ready line naming the GPUs watched, then one
line per event, each flushed as it happens.

Two sources:

- NVML (default): every GPU's XID, double- and single-bit ECC events registered into one
  event set (only XID events are reported, as upstream does; the ECC registration keeps
  upstream's mask); a GPU that cannot be registered is reported `unmonitored`; a lost GPU
  (or one NVML cannot name) is a node-wide `gpu-lost`.
- `--simulated-events FILE`: the event lines appended to FILE after the start (tests and
  the demo raise them), checked and printed again; a bad line is noted on stderr and
  skipped. Like NVML, the watch sees only what happens while it runs: earlier lines are
  not replayed.

Exits 0 on SIGTERM (or SIGINT), 1 when NVML cannot be watched at all; notes and errors go
to stderr as key=value lines. With `--stop-on-stdin-eof` it also stops when its stdin
closes: the plugin holds the other end of that pipe, so the watch ends with the plugin even
when the plugin is killed (it runs in its own session, so nothing else would end it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, Final

from adapters.nvml import _health_lines
from core.gpu import health

logger = logging.getLogger("adapters.nvml.health_watch")

# NVML's nvmlEventType bits (nvml.h); kept here so that the pure parts need no pynvml.
EVENT_SINGLE_BIT_ECC: Final = 0x1
EVENT_DOUBLE_BIT_ECC: Final = 0x2
EVENT_XID_CRITICAL: Final = 0x8
WANTED_EVENTS: Final = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC
# How long one nvmlEventSetWait_v2 blocks (upstream's 5 s): also how late a SIGTERM is seen.
WAIT_MS: Final = 5000
# After an NVML error other than a timeout: a pause, so a persistent error is no busy loop.
ERROR_PAUSE_S: Final = 1.0
DEFAULT_POLL_S: Final = 0.05

Emit = Callable[[str], None]


# ------------------------------------------------------------------------ pure pieces


def event_mask(supported: int) -> int:
    """The events to register on a GPU that supports `supported`."""
    return WANTED_EVENTS & supported


def is_reported(event_type: int) -> bool:
    """Whether an NVML event is reported: only XIDs are (ECC events are skipped, as
    upstream does)."""
    return event_type == EVENT_XID_CRITICAL


def event_from_nvml(
    *, event_data: int, gi_id: int, ci_id: int, gpu_uuid: str | None
) -> health.HealthEvent:
    """What one reported (XID) NVML event means: a node-wide `gpu-lost` when NVML could not
    name its GPU (`gpu_uuid` None), else the XID on that GPU or MIG device."""
    if gpu_uuid is None:
        return health.HealthEvent(kind=health.HealthEventKind.GPU_LOST)
    return health.HealthEvent(
        kind=health.HealthEventKind.XID, gpu_uuid=gpu_uuid, gi_id=gi_id, ci_id=ci_id,
        xid=event_data,
    )


# ------------------------------------------------------------------------ NVML


def watch_nvml(stop: threading.Event, emit: Emit, *, error_pause_s: float = ERROR_PAUSE_S) -> int:
    """Register every GPU, then report XID and lost-GPU events until `stop`."""
    try:
        with warnings.catch_warnings():
            # pynvml 12+ warns that it is a shim over nvidia-ml-py; the API is the same.
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError as exc:
        logger.error("event=nvml_unavailable error=%s", exc)
        return 1
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        logger.error("event=nvml_init_failed error=%s", exc)
        return 1
    event_set = None
    try:
        event_set = pynvml.nvmlEventSetCreate()
        monitored, unmonitored = _register(pynvml, event_set)
        emit(_health_lines.encode_ready(monitored))
        for uuid in unmonitored:
            emit(_health_lines.encode_event(
                health.HealthEvent(kind=health.HealthEventKind.UNMONITORED, gpu_uuid=uuid)))
        _wait_loop(pynvml, event_set, stop, emit, error_pause_s=error_pause_s)
        return 0
    except pynvml.NVMLError as exc:
        logger.error("event=nvml_watch_failed error=%s", exc)
        return 1
    finally:
        if event_set is not None:
            _quietly(pynvml, pynvml.nvmlEventSetFree, event_set)
        _quietly(pynvml, pynvml.nvmlShutdown)


def _register(nvml: Any, event_set: Any) -> tuple[list[str], list[str]]:
    """The UUIDs of the GPUs registered, and of those that could not be ("" where NVML
    could not even name the GPU: then nobody can say which GPU is unwatched)."""
    monitored: list[str] = []
    unmonitored: list[str] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        uuid = ""
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            mask = event_mask(int(nvml.nvmlDeviceGetSupportedEventTypes(handle)))
            # Only XID events are reported: a GPU without them is unwatched whatever else.
            if not mask & EVENT_XID_CRITICAL:
                logger.warning("event=gpu_unmonitored gpu=%s index=%d reason=no_xid_events",
                               uuid, index)
                unmonitored.append(uuid)
                continue
            nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
        except nvml.NVMLError as exc:
            logger.warning("event=gpu_unmonitored gpu=%s index=%d error=%s", uuid, index, exc)
            unmonitored.append(uuid)
            continue
        monitored.append(uuid)
    return monitored, unmonitored


def _wait_loop(
    nvml: Any, event_set: Any, stop: threading.Event, emit: Emit, *, error_pause_s: float
) -> None:
    lost_reported = False
    while not stop.is_set():
        try:
            data = nvml.nvmlEventSetWait_v2(event_set, WAIT_MS)
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_TIMEOUT:
                lost_reported = False
                continue
            if exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                # NB: reported once per loss: a lost GPU fails every wait after it.
                if not lost_reported:
                    emit(_health_lines.encode_event(
                        health.HealthEvent(kind=health.HealthEventKind.GPU_LOST)))
                    lost_reported = True
            else:
                logger.error("event=nvml_event_wait_failed error=%s", exc)
            stop.wait(error_pause_s)
            continue
        lost_reported = False
        if not is_reported(int(data.eventType)):
            continue
        try:
            gpu_uuid: str | None = _text(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError as exc:
            logger.error("event=nvml_event_device_unknown xid=%d error=%s",
                         int(data.eventData), exc)
            gpu_uuid = None
        emit(_health_lines.encode_event(event_from_nvml(
            event_data=int(data.eventData), gi_id=int(data.gpuInstanceId),
            ci_id=int(data.computeInstanceId), gpu_uuid=gpu_uuid,
        )))


def _quietly(nvml: Any, call: Callable[..., Any], *args: Any) -> None:
    try:
        call(*args)
    except nvml.NVMLError as exc:
        logger.warning("event=nvml_cleanup_failed call=%s error=%s", call.__name__, exc)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# ------------------------------------------------------------------------ simulated


def watch_file(
    path: str, gpu_uuids: Sequence[str], stop: threading.Event, emit: Emit, *,
    poll_s: float = DEFAULT_POLL_S,
) -> int:
    """Report the event lines appended to `path` (created if missing) until `stop`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "ab"):
        pass
    tail = _Tail(path)
    emit(_health_lines.encode_ready(gpu_uuids))
    try:
        while not stop.is_set():
            lines = tail.read_lines()
            for line in lines:
                _reemit(line, emit)
            if not lines:
                stop.wait(poll_s)
    finally:
        tail.close()
    return 0


def _reemit(line: str, emit: Emit) -> None:
    if not line.strip():
        return
    try:
        event = _health_lines.decode_event(line)
    except _health_lines.HealthLineError as exc:
        logger.warning("event=simulated_health_line_skipped error=%s", exc)
        return
    emit(_health_lines.encode_event(event))


class _Tail:
    """The complete lines appended to a file since it was opened; starts over when the file
    is truncated or replaced (tests and the demo may reset it)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._file: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._file.seek(0, os.SEEK_END)
        self._pending = b""
        # Opened in the middle of a line (a writer between its bytes): that line is not ours.
        self._skip_first = self._file.tell() > 0 and not self._ends_with_newline()

    def read_lines(self) -> list[str]:
        chunk = self._file.read()
        if not chunk:
            self._reopen_if_reset()
            return []
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        if self._skip_first and lines:
            lines, self._skip_first = lines[1:], False
        return [line.decode("utf-8", errors="replace") for line in lines]

    def close(self) -> None:
        self._file.close()

    def _ends_with_newline(self) -> bool:
        end = self._file.tell()
        self._file.seek(end - 1)
        last = self._file.read(1)
        return last == b"\n"

    def _reopen_if_reset(self) -> None:
        try:
            now = os.stat(self._path)
        except FileNotFoundError:
            return  # removed: keep waiting; a new file is picked up once it appears
        opened = os.fstat(self._file.fileno())
        if (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev):
            self._file.close()
            self._file = open(self._path, "rb")  # noqa: SIM115 (closed by close())
        elif now.st_size < self._file.tell():
            self._file.seek(0)
        else:
            return
        self._pending, self._skip_first = b"", False


# ------------------------------------------------------------------------ the program


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adapters.nvml.health_watch",
        description="Print the node's GPU health events as JSON lines.")
    parser.add_argument("--simulated-events", metavar="FILE",
                        help="report the event lines appended to FILE instead of NVML's")
    parser.add_argument("--simulated-gpu-uuid", metavar="UUID", action="append", default=[],
                        help="a GPU the simulated watch reports as monitored (repeatable)")
    parser.add_argument("--poll-interval-s", type=float, default=DEFAULT_POLL_S,
                        help="how often the simulated events file is read")
    parser.add_argument("--error-pause-s", type=float, default=ERROR_PAUSE_S,
                        help="the pause after an NVML error other than a timeout")
    parser.add_argument("--stop-on-stdin-eof", action="store_true",
                        help="stop when stdin closes (the parent holds its other end)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(levelname)s %(name)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if args.stop_on_stdin_eof:
        threading.Thread(target=_stop_at_eof, args=(stop,), name="stdin-eof",
                         daemon=True).start()
    try:
        if args.simulated_events is not None:
            return watch_file(args.simulated_events, args.simulated_gpu_uuid, stop, _emit,
                              poll_s=args.poll_interval_s)
        return watch_nvml(stop, _emit, error_pause_s=args.error_pause_s)
    except BrokenPipeError:
        return 0  # the reader is gone: nobody is left to tell


def _stop_at_eof(stop: threading.Event) -> None:
    # NB: os.read returns what is there (a buffered read would wait for a full buffer).
    try:
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    logger.info("event=health_watch_stdin_closed action=stop")
    stop.set()


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
