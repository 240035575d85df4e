"""The real (NVML) health watch against a stand-in `pynvml` with a scripted event stream.

No GPU here (nor in CI), so the stand-in (written to `tmp_path`, first on the child's
PYTHONPATH) plays three GPUs: one watched, one without XID events, one whose registration
is refused; then a timeout, an ECC event, two XIDs (whole GPU, MIG device), a lost GPU
twice, an unknown error, and an XID on a GPU NVML cannot name. This pins what reaches
`on_event`, and that SIGTERM frees the event set and shuts NVML down.
"""

from __future__ import annotations

import logging
import os
import pathlib
import textwrap
import threading

import pytest

from adapters import nvml
from adapters.nvml import health_events, real
from apps.cli.embedded import wait_until
from core.gpu import health

TIMEOUT_S = 20.0

FAKE_PYNVML = textwrap.dedent(
    '''
    """Stand-in for pynvml: three GPUs and a scripted event stream."""
    import os, time

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value
        def __str__(self):
            return {3: "Not Supported", 10: "Timeout", 15: "GPU is lost"}.get(
                self.value, "Unknown Error")

    def _log(what):
        with open(os.environ["FAKE_NVML_LOG"], "a") as log:
            log.write(what + "\\n")

    class Handle:
        def __init__(self, uuid, supported, registrable=True):
            self.uuid, self.supported, self.registrable = uuid, supported, registrable

    GPUS = [Handle("GPU-a", 0x8 | 0x4 | 0x2 | 0x1), Handle("GPU-b", 0x2 | 0x1),
            Handle("GPU-c", 0xB, registrable=False)]
    NAMELESS = Handle(None, 0)

    class Data:
        def __init__(self, device, event_type, data, gi=0xFFFFFFFF, ci=0xFFFFFFFF):
            self.device, self.eventType, self.eventData = device, event_type, data
            self.gpuInstanceId, self.computeInstanceId = gi, ci

    SCRIPT = [
        NVMLError(NVML_ERROR_TIMEOUT),
        Data(GPUS[0], 0x1, 0),
        Data(GPUS[0], 0x8, 79),
        Data(GPUS[0], 0x8, 31, gi=1, ci=0),
        NVMLError(NVML_ERROR_GPU_IS_LOST),
        NVMLError(NVML_ERROR_GPU_IS_LOST),
        NVMLError(NVML_ERROR_UNKNOWN),
        Data(NAMELESS, 0x8, 48),
    ]

    def nvmlInit():
        _log("init")

    def nvmlShutdown():
        _log("shutdown")

    def nvmlDeviceGetCount():
        return len(GPUS)

    def nvmlDeviceGetHandleByIndex(index):
        return GPUS[index]

    def nvmlDeviceGetUUID(handle):
        if handle.uuid is None:
            raise NVMLError(NVML_ERROR_UNKNOWN)
        return handle.uuid.encode()

    def nvmlDeviceGetSupportedEventTypes(handle):
        return handle.supported

    def nvmlEventSetCreate():
        _log("create")
        return "the-set"

    def nvmlDeviceRegisterEvents(handle, mask, event_set):
        if not handle.registrable:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        _log(f"register {handle.uuid} {mask:#x} {event_set}")

    def nvmlEventSetWait_v2(event_set, timeout_ms):
        if SCRIPT:
            item = SCRIPT.pop(0)
            if isinstance(item, NVMLError):
                raise item
            return item
        time.sleep(0.05)  # a short stand-in for a 5 s wait that times out
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(event_set):
        _log(f"free {event_set}")
    '''
)


def test_the_nvml_watch_reports_what_nvml_sees_and_cleans_up(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.nvml.health_events")
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    calls = tmp_path / "calls.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), real._IMPORT_ROOT])
    env["FAKE_NVML_LOG"] = str(calls)
    watch = nvml.NvmlHealthEvents(
        command=[*health_events.default_watch_command(), "--error-pause-s=0.01"], env=env)
    lock = threading.Lock()
    seen: list[health.HealthEvent] = []

    def record(event: health.HealthEvent) -> None:
        with lock:
            seen.append(event)

    def count() -> int:
        with lock:
            return len(seen)

    watch.start(record)
    try:
        assert watch.wait_ready(TIMEOUT_S)
        assert watch.monitored == ("GPU-a",)
        wait_until(lambda: count() >= 6, timeout_s=TIMEOUT_S, what="the scripted events")
    finally:
        watch.stop()

    kind = health.HealthEventKind
    assert seen == [
        health.HealthEvent(kind=kind.UNMONITORED, gpu_uuid="GPU-b"),
        health.HealthEvent(kind=kind.UNMONITORED, gpu_uuid="GPU-c"),
        health.HealthEvent(kind=kind.XID, gpu_uuid="GPU-a", xid=79),
        health.HealthEvent(kind=kind.XID, gpu_uuid="GPU-a", gi_id=1, ci_id=0, xid=31),
        health.HealthEvent(kind=kind.GPU_LOST),  # once for two failed waits
        health.HealthEvent(kind=kind.GPU_LOST),  # the XID on a GPU NVML cannot name
    ]
    assert calls.read_text().splitlines() == [
        "init", "create", "register GPU-a 0xb the-set", "free the-set", "shutdown"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("nvml_event_wait_failed" in m and "Unknown Error" in m for m in messages)
    assert any("gpu_unmonitored gpu=GPU-b" in m and "no_xid_events" in m for m in messages)
    assert not any("gpu_health_watch_exited" in m for m in messages)
