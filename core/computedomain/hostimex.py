"""Host-managed IMEX readiness: interpreting `nvidia-imex-ctl -q` (pure).

In host-managed mode the host's systemd runs `nvidia-imex`. When the optional check is on,
the plugin asks the host daemon whether it is READY before handing a workload a channel,
so a pod does not start against a daemon that cannot broker memory exports yet.
"""

from __future__ import annotations

from core import errors


def is_ready(*, exit_code: int, stdout: str) -> bool:
    """True when `nvidia-imex-ctl -q` exited 0 and printed READY (its first word)."""
    words = stdout.strip().split()
    return exit_code == 0 and bool(words) and words[0].upper() == "READY"


def not_ready_error(*, socket_path: str, detail: str) -> errors.RetryableError:
    """The retryable error a prepare reports while the host IMEX daemon is not ready."""
    return errors.RetryableError(
        f"host nvidia-imex daemon is not ready (queried via {socket_path}: {detail}); "
        "check `systemctl status nvidia-imex` on the node and that the Helm value "
        "resources.computeDomains.imex.hostSocketPath points at its control socket"
    )
