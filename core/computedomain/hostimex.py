"""Host-managed IMEX readiness: the `nvidia-imex-ctl -q` query and its answer (pure).

In host-managed mode the host's systemd runs `nvidia-imex`. Before a workload on an NVLink
fabric node gets a channel, the plugin asks the host daemon whether it is READY, as upstream
does, so a pod does not start against a daemon that cannot broker memory exports yet. The
query runs the host's own `nvidia-imex-ctl` inside the driver root (`chroot`), talking to the
daemon's command socket (`IMEX_CMD_UNIX_DOMAIN_PATH` with `IMEX_CMD_ENABLED=1` in the host's
nvidia-imex config); the socket path is a path in that root.
"""

from __future__ import annotations

from typing import Final

from core import errors

CTL_NAME: Final = "nvidia-imex-ctl"
# Upstream's default for the host daemon's command socket (Helm imex.hostSocketPath).
DEFAULT_HOST_SOCKET: Final = "/etc/nvidia-imex/imex_ctrl.sock"
# Where nvidia-imex-ctl is looked for inside the driver root, in upstream's order.
SEARCH_DIRS: Final = ("/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")


def ctl_argv(
    *, driver_root: str, ctl_path: str, socket_path: str, chroot: str = "chroot"
) -> tuple[str, ...]:
    """The readiness query: `nvidia-imex-ctl -q --u=<socket>`, chrooted into the driver root.

    `ctl_path` is the executable's path inside the driver root. NB: with the driver root at
    "/" there is nothing to chroot into, and running without chroot also lets the plugin
    start where it may not call chroot(2) (tests, unprivileged development).
    """
    query = (ctl_path, "-q", f"--u={socket_path}")
    if driver_root.rstrip("/") == "":
        return query
    return (chroot, driver_root, *query)


def is_ready(*, exit_code: int, stdout: str) -> bool:
    """True when `nvidia-imex-ctl -q` exited 0 and printed READY (its first word)."""
    words = stdout.strip().split()
    return exit_code == 0 and bool(words) and words[0].upper() == "READY"


def ctl_missing_detail(driver_root: str) -> str:
    """Why the query could not run: the control tool is not in the driver root."""
    return (
        f"{CTL_NAME} not found under the driver root {driver_root} (looked in "
        f"{', '.join(SEARCH_DIRS)}): is the nvidia-imex package installed on this node?"
    )


def not_ready_error(*, socket_path: str, detail: str) -> errors.RetryableError:
    """The retryable error a prepare reports while the host IMEX daemon is not ready."""
    return errors.RetryableError(
        f"host nvidia-imex daemon is not ready (queried via {socket_path}: {detail}); "
        "check `systemctl status nvidia-imex` on the node, that its config sets "
        "IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH, and that the Helm value "
        "resources.computeDomains.imex.hostSocketPath names that socket"
    )
