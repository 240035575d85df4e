"""The one logging setup of every binary, with the verbosity scale the chart documents.

`LOG_VERBOSITY` (`-v`, Helm `logVerbosity`) follows `SCALE`; the chart's default is 4.
Python's logging has three levels below WARNING where klog has ten, so neighbouring
verbosities log the same; the scale keeps klog's numbers so the chart's values mean what
upstream's do. Libraries (urllib3, the Kubernetes client, gRPC) stay at warnings below 7:
at the chart's default there is no DEBUG line per API request.
"""

from __future__ import annotations

import logging
import sys
from typing import Final, TextIO

# Loggers of libraries we use: quiet (warnings and up) below LIBRARY_DEBUG.
QUIET_LIBRARIES: Final = ("urllib3", "kubernetes", "grpc", "asyncio", "google", "websocket",
                          "filelock", "celpy", "lark")
# (verbosity, what is logged): values.yaml and docs/operations.md quote it word for word.
SCALE: Final = (
    ("0", "warnings and errors"),
    ("1-3", "+ info: start-up, configuration, each change made"),
    ("4-6", "+ the driver's debug lines"),
    ("7", "+ the libraries' debug lines, e.g. each Kubernetes API request"),
)
DRIVER_DEBUG: Final = 4
LIBRARY_DEBUG: Final = 7
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


class _ShellHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler this module installed, so a second call replaces it."""


def level_for(verbosity: int | None) -> int:
    """None: errors only (the CLI tools' default, whose output is their own narrative)."""
    if verbosity is None:
        return logging.ERROR
    if verbosity <= 0:
        return logging.WARNING
    if verbosity < DRIVER_DEBUG:
        return logging.INFO
    return logging.DEBUG


def configure(verbosity: int | None, *, stream: TextIO | None = None) -> None:
    """Install the one stderr handler at `verbosity`; idempotent (replaces its own handler)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ShellHandler)]:
        root.removeHandler(handler)
    handler = _ShellHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level_for(verbosity))
    libraries = (logging.DEBUG if verbosity is not None and verbosity >= LIBRARY_DEBUG
                 else max(logging.WARNING, level_for(verbosity)))
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(libraries)
