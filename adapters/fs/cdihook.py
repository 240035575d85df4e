"""Which `nvidia-cdi-hook` binary the GPU plugin's CDI specs name, if any.

The hooks run on the host, started by the container runtime, so a spec must name the binary
by its host path. In order of preference, as the upstream driver chooses it (its
`--nvidia-cdi-hook-path` / `NVIDIA_CDI_HOOK_PATH`, else the copy its image ships):

1. a configured path (Helm `nvidiaCDIHookPath`): taken as given, since the plugin's container
   need not see the host's file system;
2. a binary shipped in the plugin's own image (`/usr/bin/nvidia-cdi-hook`): copied into the
   plugin directory, which the chart mounts at the same path on the host;
3. one installed with the driver (the NVIDIA container toolkit's `/usr/bin/nvidia-cdi-hook`
   under the driver root), named by its host path;
4. none: the specs carry no hooks (libraries mounted at their host paths, as before).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import tempfile

BINARY_NAME = "nvidia-cdi-hook"
# Where the toolkit installs it, and where an image that ships it keeps it.
DEFAULT_PATH = f"/usr/bin/{BINARY_NAME}"


class Source(enum.Enum):
    CONFIGURED = "configured"
    IMAGE = "image"
    DRIVER_ROOT = "driver_root"
    NONE = "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HookBinary:
    """The host path the specs name (empty: no hooks) and how it was chosen."""

    path: str
    source: Source


def locate(
    configured: str,
    *,
    plugin_dir: str,
    container_driver_root: str,
    host_driver_root: str,
    image_path: str = DEFAULT_PATH,
) -> HookBinary:
    """The hook binary to name, copying the image's into `plugin_dir` where that is the one.

    Raises OSError when the image has one and it cannot be copied (the plugin dir is not
    writable): a plugin that silently dropped the hooks would hand containers less than
    the operator expects.
    """
    if configured:
        return HookBinary(path=configured, source=Source.CONFIGURED)
    if _is_executable(image_path):
        target = os.path.join(plugin_dir, BINARY_NAME)
        _copy_executable(image_path, target)
        return HookBinary(path=target, source=Source.IMAGE)
    in_root = _join(container_driver_root, DEFAULT_PATH)
    if _is_executable(in_root):
        return HookBinary(path=_join(host_driver_root, DEFAULT_PATH), source=Source.DRIVER_ROOT)
    return HookBinary(path="", source=Source.NONE)


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _copy_executable(source: str, target: str) -> None:
    """Copy to a temporary name beside `target`, then rename: a runtime never sees half."""
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{BINARY_NAME}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as writer, open(source, "rb") as reader:
            while chunk := reader.read(1 << 20):
                writer.write(chunk)
            writer.flush()
            os.fsync(writer.fileno())
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _join(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path
