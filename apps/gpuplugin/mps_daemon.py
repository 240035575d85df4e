"""`gpu-kubelet-plugin mps-control-daemon [--check]`: the process of an MPS daemon's pod.

The Deployment the GPU plugin writes for an MPS claim (`core.gpu.mps.deployment`) runs this
in the driver's image: start `nvidia-cuda-mps-control -d` in the driver root, send it the
claim's settings (env MPS_CONTROL_COMMANDS, one command per line), write the startup file the
pod's startup probe (`--check`) looks for, then wait. SIGTERM (the Deployment deleted at
unprepare) sends `quit` so the daemon goes before the pod does. A daemon that cannot start,
or refuses a setting, fails the container: the pod never turns Ready, and the prepare says so.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence

from adapters.mps import control
from apps.shell import logs, signals
from core import errors
from core.gpu import mps

log = logging.getLogger("mps-control-daemon")

SUBCOMMAND = "mps-control-daemon"
# Where the daemon's container sees its directories (the Deployment sets these).
_ENV_DEFAULTS: Mapping[str, str] = {
    "MPS_DRIVER_ROOT": mps.DRIVER_ROOT_MOUNT,
    "MPS_PIPE_DIRECTORY": mps.DAEMON_PIPE_MOUNT,
    "MPS_LOG_DIRECTORY": mps.DAEMON_LOG_MOUNT,
}


def paths(env: Mapping[str, str]) -> control.ControlPaths:
    """The directories from the environment (the Deployment's, or a test's)."""
    values = {k: env.get(k) or default for k, default in _ENV_DEFAULTS.items()}
    return control.ControlPaths(
        driver_root=values["MPS_DRIVER_ROOT"],
        pipe_dir=values["MPS_PIPE_DIRECTORY"],
        log_dir=values["MPS_LOG_DIRECTORY"],
    )


def startup_file(env: Mapping[str, str]) -> str:
    """The file written once the daemon took its settings."""
    return os.path.join(paths(env).log_dir, mps.STARTUP_FILE)


def commands(env: Mapping[str, str]) -> tuple[str, ...]:
    """The settings to send, from MPS_CONTROL_COMMANDS (one per line)."""
    return tuple(line.strip() for line in env.get("MPS_CONTROL_COMMANDS", "").splitlines()
                 if line.strip())


def run(env: Mapping[str, str], *, stop: threading.Event) -> int:
    """Start and configure the daemon, then wait for `stop`; returns the exit code."""
    where = paths(env)
    marker = startup_file(env)
    if os.path.exists(marker):
        os.remove(marker)  # NB: a restarted container is not Ready until configured again
    daemon = control.MpsControl(where, environ=env)
    try:
        daemon.start(multi_user=env.get("MPS_MULTI_USER") == "true")
        daemon.send(commands(env))
    except errors.DriverError as exc:
        log.error("event=mps_daemon_failed error=%r", exc.message)
        daemon.quit()
        return 1
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write("startup complete\n")
    log.info("event=mps_daemon_running devices=%s chroot=%s",
             env.get("CUDA_VISIBLE_DEVICES", ""), daemon.chrooted)
    stop.wait()
    daemon.quit()
    log.info("event=mps_daemon_quit")
    return 0


def check(env: Mapping[str, str]) -> int:
    """The startup probe: 0 once the startup file exists."""
    return 0 if os.path.exists(startup_file(env)) else 1


def main(argv: Sequence[str]) -> int:
    """Entry point of the subcommand (`argv` after `mps-control-daemon`)."""
    if list(argv) == ["--check"]:
        return check(os.environ)
    if argv:
        print(f"usage: gpu-kubelet-plugin {SUBCOMMAND} [--check]", file=sys.stderr)
        return 2
    logs.configure(int(os.environ.get("LOG_VERBOSITY", "2") or 2))
    return run(os.environ, stop=signals.stop_on_signals(log))
