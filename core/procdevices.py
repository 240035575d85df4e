"""Character-device majors (the IMEX channels', nvidia-caps') from the text of `/proc/devices`.

The major is assigned by the kernel when the nvidia driver loads and differs between nodes,
so it must be read on every node; the CDI device nodes we hand to containers carry it.
"""

from __future__ import annotations

from core import errors, names

_CHARACTER_SECTION = "Character devices:"
_BLOCK_SECTION = "Block devices:"


def character_major(proc_devices_text: str, device: str) -> int | None:
    """Major number of `device` among the character devices, or None when not registered."""
    in_character_section = False
    for line in proc_devices_text.splitlines():
        stripped = line.strip()
        if stripped == _CHARACTER_SECTION:
            in_character_section = True
            continue
        if stripped == _BLOCK_SECTION:
            break
        if not in_character_section:
            continue
        fields = stripped.split()
        if len(fields) == 2 and fields[1] == device and fields[0].isdigit():
            return int(fields[0])
    return None


def imex_channel_major(proc_devices_text: str) -> int:
    """Major number of `nvidia-caps-imex-channels` among the character devices.

    Raises ConfigError (the plugin must not start) when the device is not registered.
    """
    major = character_major(proc_devices_text, names.IMEX_CHANNELS_PROC_NAME)
    if major is not None:
        return major
    raise errors.ConfigError(
        f"the NVIDIA driver's IMEX channel device ({names.IMEX_CHANNELS_PROC_NAME}) is not "
        "registered on this node (no entry among the character devices in /proc/devices); "
        "check that the nvidia kernel module is loaded with NVreg_CreateImexChannel0=1 or that "
        f"the channels were created with nvidia-modprobe (see {names.IMEX_CHANNEL_DIR}), and that "
        "the driver version supports IMEX channels"
    )
