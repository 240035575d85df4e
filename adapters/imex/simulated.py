"""Stand-ins for `nvidia-imex` and `nvidia-imex-ctl` where no NVLink fabric exists.

Written out as small shell scripts (a real child process per daemon, real signals, a few MB
each, so hundreds can run at once). They implement the executables' contract as the daemon
uses it and leave evidence in the config directory (the directory of `-c <imexd.cfg>`):

- `nvidia-imex -c CFG`: refuses to start (exit 1) when CFG or the IMEX_NODE_CONFIG_FILE it
  names is missing; writes `imex.pid`; appends `start`, `SIGUSR1 <nodes.cfg lines>` and `TERM`
  to `imex.events`; exits 0 on SIGTERM.
- `nvidia-imex-ctl -c CFG -q`: prints the content of `imex.state` when that file exists
  (tests flip readiness with it), else READY while the `imex.pid` process lives; exit 0 only
  for READY.
"""

from __future__ import annotations

import os

IMEX_SCRIPT = r"""#!/bin/sh
# Simulated nvidia-imex (compute-domain driver tests and demo).
cfg=""
while [ $# -gt 0 ]; do
  case "$1" in
    -c) cfg="$2"; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$cfg" ] && [ -r "$cfg" ] || { echo "nvidia-imex(sim): no config '$cfg'" >&2; exit 1; }
dir=$(dirname "$cfg")
nodes=$(sed -n 's/^IMEX_NODE_CONFIG_FILE=//p' "$cfg")
[ -r "$nodes" ] || { echo "nvidia-imex(sim): cannot read nodes config '$nodes'" >&2; exit 1; }
# NB: handlers first: the pid file is what makes the simulated ctl answer READY.
trap 'echo "SIGUSR1 $(tr "\n" " " < "$nodes")" >> "$dir/imex.events"' USR1
trap 'echo TERM >> "$dir/imex.events"; rm -f "$dir/imex.pid"; exit 0' TERM INT
echo "start $(tr '\n' ' ' < "$nodes")" >> "$dir/imex.events"
echo $$ > "$dir/imex.pid"
while :; do
  sleep 1 &
  wait $!
done
"""

CTL_SCRIPT = r"""#!/bin/sh
# Simulated nvidia-imex-ctl (compute-domain driver tests and demo).
cfg=""
while [ $# -gt 0 ]; do
  case "$1" in
    -c) cfg="$2"; shift 2 ;;
    *) shift ;;
  esac
done
# NB: shell builtins only (read, kill): hundreds of simulated nodes poll this at once.
dir="${cfg%/*}"
state=UNAVAILABLE
if [ -f "$dir/imex.state" ]; then
  read -r state < "$dir/imex.state"
elif [ -f "$dir/imex.pid" ] && read -r pid < "$dir/imex.pid" && kill -0 "$pid" 2>/dev/null; then
  state=READY
fi
echo "$state"
[ "$state" = READY ]
"""

# /proc/driver/nvidia/capabilities/fabric-imex-mgmt as a GB200 node shows it (mode in decimal).
MGMT_CAPABILITY_TEXT = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"

IMEX_NAME = "nvidia-imex"
CTL_NAME = "nvidia-imex-ctl"


def install(directory: str) -> tuple[str, str]:
    """Write both executables into `directory`; returns (nvidia-imex path, nvidia-imex-ctl path)."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, text in ((IMEX_NAME, IMEX_SCRIPT), (CTL_NAME, CTL_SCRIPT)):
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o755)
        paths.append(path)
    return paths[0], paths[1]
