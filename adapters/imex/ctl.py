"""`nvidia-imex-ctl -c <imexd.cfg> -q`: is the local IMEX daemon READY?"""

from __future__ import annotations

import dataclasses
import subprocess

from core.computedomain import hostimex


@dataclasses.dataclass(frozen=True, kw_only=True)
class Readiness:
    ready: bool
    # What the tool said (or why it could not be asked), for logs and the `check` message.
    detail: str


class IMEXCtl:
    """Asks the IMEX daemon configured by `config_path` for its state, once."""

    def __init__(self, *, command: str, config_path: str, timeout_s: float = 10.0) -> None:
        self._command = command
        self._config_path = config_path
        self._timeout_s = timeout_s

    def query(self) -> Readiness:
        argv = [self._command, "-c", self._config_path, "-q"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self._timeout_s, check=False
            )
        except FileNotFoundError:
            return Readiness(ready=False, detail=f"{self._command} not found")
        except subprocess.TimeoutExpired:
            return Readiness(
                ready=False, detail=f"{self._command} did not answer within {self._timeout_s:g}s"
            )
        answer = (done.stdout.strip() or done.stderr.strip() or "no output")[:200]
        if hostimex.is_ready(exit_code=done.returncode, stdout=done.stdout):
            return Readiness(ready=True, detail=answer)
        return Readiness(ready=False, detail=f"exit code {done.returncode}, answered {answer!r}")
