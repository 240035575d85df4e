"""A stand-in `nvidia-smi` for tests and the demo, where no GPU or driver exists.

Written out as a small shell script honouring the two calls the time-slicer makes:
`-i <uuid> -c <mode>` and `compute-policy -i <uuid> --set-timeslice <n>`. It appends its
argv (one line per call, words separated by spaces) to `nvidia-smi.calls` next to itself, and
answers like the real tool for a GPU it does not have: "No devices were found", exit 6. The
GPUs it has are the lines of `nvidia-smi.uuids` next to it.
"""

from __future__ import annotations

import os

SCRIPT = r"""#!/bin/sh
# Simulated nvidia-smi (gpu.nvidia.com driver tests and demo).
here=$(dirname "$0")
echo "$*" >> "$here/nvidia-smi.calls"
uuid=""
while [ $# -gt 0 ]; do
  case "$1" in
    -i) uuid="$2"; shift 2 ;;
    *) shift ;;
  esac
done
if [ -n "$uuid" ] && ! grep -qxF -- "$uuid" "$here/nvidia-smi.uuids" 2>/dev/null; then
  echo "No devices were found"
  exit 6
fi
exit 0
"""

NAME = "nvidia-smi"


def install(directory: str, *, gpu_uuids: tuple[str, ...]) -> str:
    """Write the stand-in into `directory`, knowing `gpu_uuids`; returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, NAME)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(SCRIPT)
    os.chmod(path, 0o755)
    with open(os.path.join(directory, "nvidia-smi.uuids"), "w", encoding="utf-8") as handle:
        handle.writelines(uuid + "\n" for uuid in gpu_uuids)
    return path


def calls(directory: str) -> tuple[str, ...]:
    """The argv of every call so far, oldest first (without the program name)."""
    try:
        with open(os.path.join(directory, "nvidia-smi.calls"), encoding="utf-8") as handle:
            return tuple(handle.read().splitlines())
    except FileNotFoundError:
        return ()
