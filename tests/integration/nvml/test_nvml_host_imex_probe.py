"""The host IMEX readiness probe runs upstream's query: `chroot <root> nvidia-imex-ctl -q --u=SOCK`.

A fake `nvidia-imex-ctl` follows the executable's contract (prints READY and exits 0 when the
daemon is ready, another state and non-zero otherwise) and records its arguments; a fake
`chroot` records the root and runs the command from inside it, so the test needs no privilege.
"""

from __future__ import annotations

import os
import pathlib

from adapters.nvml import imexctl
from core.computedomain import hostimex

FAKE_CTL = """#!/bin/sh
echo "$@" > "$(dirname "$0")/ctl.args"
state=$(cat "$(dirname "$0")/ctl.state")
echo "$state"
[ "$state" = READY ]
"""

# Runs "<root><command>" with the rest of the arguments, as chroot would see the command.
FAKE_CHROOT = """#!/bin/sh
root="$1"; shift
echo "$root" > "{log}"
cmd="$1"; shift
exec "$root$cmd" "$@"
"""


def _executable(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o755)


def _driver_root(tmp_path: pathlib.Path, state: str) -> pathlib.Path:
    root = tmp_path / "driver-root"
    _executable(root / "usr/bin/nvidia-imex-ctl", FAKE_CTL)
    (root / "usr/bin/ctl.state").write_text(f"{state}\n", encoding="utf-8")
    return root


def _fake_chroot(tmp_path: pathlib.Path) -> pathlib.Path:
    chroot = tmp_path / "bin/chroot"
    _executable(chroot, FAKE_CHROOT.format(log=tmp_path / "chroot.root"))
    return chroot


def test_probe_chroots_into_the_driver_root_and_queries_the_socket(
    tmp_path: pathlib.Path,
) -> None:
    root = _driver_root(tmp_path, "READY")
    probe = imexctl.HostIMEXProbe(driver_root=str(root), chroot=str(_fake_chroot(tmp_path)))
    assert probe.check() is None
    assert (tmp_path / "chroot.root").read_text().strip() == str(root)
    args = (root / "usr/bin/ctl.args").read_text().split()
    assert args == ["-q", "--u=/etc/nvidia-imex/imex_ctrl.sock"]


def test_probe_reports_a_daemon_that_is_not_ready_as_retryable(tmp_path: pathlib.Path) -> None:
    root = _driver_root(tmp_path, "UNAVAILABLE")
    probe = imexctl.HostIMEXProbe(
        driver_root=str(root), socket_path="/run/imex/ctl.sock",
        chroot=str(_fake_chroot(tmp_path)),
    )
    error = probe.check()
    assert error is not None
    assert "host nvidia-imex daemon is not ready (queried via /run/imex/ctl.sock" in error.message
    assert "'UNAVAILABLE'" in error.message
    assert "IMEX_CMD_UNIX_DOMAIN_PATH" in error.message


def test_probe_without_nvidia_imex_ctl_in_the_driver_root_names_the_package(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "empty-root").mkdir()
    probe = imexctl.HostIMEXProbe(driver_root=str(tmp_path / "empty-root"))
    error = probe.check()
    assert error is not None
    assert "nvidia-imex-ctl not found under the driver root" in error.message
    assert "is the nvidia-imex package installed on this node?" in error.message


def test_query_runs_without_chroot_when_the_driver_root_is_slash() -> None:
    assert hostimex.ctl_argv(driver_root="/", ctl_path="/usr/bin/nvidia-imex-ctl",
                             socket_path="/s.sock") == (
        "/usr/bin/nvidia-imex-ctl", "-q", "--u=/s.sock"
    )
    assert hostimex.ctl_argv(driver_root="/driver-root", ctl_path="/usr/bin/nvidia-imex-ctl",
                             socket_path="/s.sock") == (
        "chroot", "/driver-root", "/usr/bin/nvidia-imex-ctl", "-q", "--u=/s.sock"
    )


def test_probe_with_driver_root_slash_runs_the_tool_directly(tmp_path: pathlib.Path) -> None:
    root = _driver_root(tmp_path, "READY")
    ctl = root / "usr/bin/nvidia-imex-ctl"
    probe = imexctl.HostIMEXProbe(driver_root="/", ctl_path=str(ctl), chroot="/nonexistent")
    assert probe.check() is None
    assert (root / "usr/bin/ctl.args").read_text().split() == [
        "-q", "--u=/etc/nvidia-imex/imex_ctrl.sock"
    ]
