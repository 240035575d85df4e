"""The GPU health state (`core.gpu.health.HealthState`) kept in one JSON file of the plugin
directory, so that a plugin restart keeps the taints it had published.

Written atomically (temp file + rename + fsync). A file that cannot be read is moved aside
(`.corrupt`), never silently overwritten, and the plugin starts from nothing.
"""

from __future__ import annotations

import json
import logging
import os

from adapters.fs import _atomic
from core import errors
from core.gpu import health

log = logging.getLogger(__name__)

FILE_NAME = "device-health.json"


class HealthStateFile:
    """Load and save the health state at `path`."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __repr__(self) -> str:
        return f"HealthStateFile({self._path!r})"

    @property
    def path(self) -> str:
        return self._path

    def load(self) -> health.HealthState | None:
        """The saved state; None when there is none or it is unreadable (moved aside)."""
        try:
            with open(self._path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            return None
        try:
            return health.state_from_json(json.loads(text))
        except (ValueError, errors.DecodeError) as exc:
            aside = self._path + ".corrupt"
            os.replace(self._path, aside)
            log.warning("event=gpu_health_state_unreadable path=%s moved_to=%s error=%r",
                        self._path, aside, str(exc)[:300])
            return None

    def save(self, state: health.HealthState) -> None:
        data = json.dumps(health.state_to_json(state), indent=1, sort_keys=True).encode()
        _atomic.write_atomically(self._path, data + b"\n", mode=0o600)
