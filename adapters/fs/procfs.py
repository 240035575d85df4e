"""Node facts read from procfs: `/proc/devices` (IMEX channel major) and the boot ID.

Paths are constructor arguments so that tests and the simulated demo can point them at
ordinary files. Parsing is core's job; this module only reads and reports failures.
"""

from __future__ import annotations

from core import errors

PROC_DEVICES_PATH = "/proc/devices"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class ProcNodeFiles:
    """`core.ports.NodeFiles` reading the real (or overridden) procfs files."""

    def __init__(
        self, *, proc_devices_path: str = PROC_DEVICES_PATH, boot_id_path: str = BOOT_ID_PATH
    ) -> None:
        self.proc_devices_path = proc_devices_path
        self.boot_id_path = boot_id_path

    def __repr__(self) -> str:
        return (
            f"ProcNodeFiles(proc_devices_path={self.proc_devices_path!r}, "
            f"boot_id_path={self.boot_id_path!r})"
        )

    def proc_devices(self) -> str:
        """Text of /proc/devices; ConfigError naming the file if it cannot be read."""
        return _read_text(
            self.proc_devices_path,
            purpose="the IMEX channel device major",
            fix="mount the host's /proc into the plugin container",
        )

    def boot_id(self) -> str:
        """The node's boot ID, stripped; ConfigError if unreadable or empty."""
        boot_id = _read_text(
            self.boot_id_path,
            purpose="the node boot ID (to detect reboots)",
            fix="run the plugin on Linux with procfs mounted",
        ).strip()
        if not boot_id:
            raise errors.ConfigError(
                f"boot ID file {self.boot_id_path} is empty; the driver needs the node boot ID "
                "to detect reboots: run the plugin on Linux with procfs mounted"
            )
        return boot_id


def _read_text(path: str, *, purpose: str, fix: str) -> str:
    try:
        with open(path, encoding="utf-8") as proc_file:
            return proc_file.read()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise errors.ConfigError(
            f"cannot read {path} ({reason}); the driver needs it for {purpose}: {fix}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise errors.ConfigError(
            f"cannot read {path} (not UTF-8 text: {exc.reason}); the driver needs it for "
            f"{purpose}: {fix}"
        ) from exc
