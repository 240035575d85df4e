"""A stand-in `nvidia-cuda-mps-control` where no GPU or driver exists (tests, demo, bench).

Written out as a small Python script that implements the control program's contract as the
driver uses it:

- `nvidia-cuda-mps-control -d [-M]`: starts the control daemon in the background and returns
  0 once it listens on `$CUDA_MPS_PIPE_DIRECTORY/control` (default /tmp/nvidia-mps); exit 1
  with "An instance of this daemon is already running" when one listens there. The daemon
  logs to `$CUDA_MPS_LOG_DIRECTORY/control.log` (default /var/log/nvidia-mps).
- `nvidia-cuda-mps-control` (no arguments): the client. Each line read from stdin is a
  command sent to the daemon, its answer printed; exit 1 when no daemon listens.
- Commands: `set_default_active_thread_percentage <0-100>` (prints the value),
  `get_default_active_thread_percentage`, `set_default_device_pinned_mem_limit <dev> <n>M`,
  `get_default_device_pinned_mem_limit <dev>`, `get_server_list` (prints nothing: no
  clients), `quit` (the daemon exits). Anything else: "Unrecognized command".

Evidence for tests: `$CUDA_MPS_LOG_DIRECTORY/stand-in-state.json` holds the daemon's settings
after every command ({"pid", "multiUser", "visibleDevices", "activeThreadPercentage",
"pinnedMemLimits"}) and disappears when the daemon quits.
"""

from __future__ import annotations

import json
import os
import sys

NAME = "nvidia-cuda-mps-control"
STATE_FILE = "stand-in-state.json"

SCRIPT = r'''
# Simulated nvidia-cuda-mps-control (gpu.nvidia.com driver tests, demo and bench).
import json, os, socket, subprocess, sys, time

pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
log_dir = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
control = os.path.join(pipe_dir, "control")
state_path = os.path.join(log_dir, "stand-in-state.json")


def log(line):
    with open(os.path.join(log_dir, "control.log"), "a") as out:
        out.write(time.strftime("[%Y-%m-%d %H:%M:%S] ") + line + "\n")


def connect():
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # NB: relative to the pipe directory: deep test directories exceed sun_path's 108 bytes.
        os.chdir(pipe_dir)
        client.connect("control")
    except OSError:
        client.close()
        return None
    return client


def save(state):
    tmp = state_path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(state, out, sort_keys=True)
    os.replace(tmp, state_path)


def answer(state, line):
    words = line.split()
    if not words:
        return ""
    if words[0] == "set_default_active_thread_percentage" and len(words) == 2:
        if not words[1].isdigit() or not 0 <= int(words[1]) <= 100:
            return "Invalid active thread percentage"
        state["activeThreadPercentage"] = int(words[1])
        return words[1]
    if words[0] == "get_default_active_thread_percentage":
        return str(state.get("activeThreadPercentage", 100))
    if words[0] == "set_default_device_pinned_mem_limit" and len(words) == 3:
        if not (words[2].endswith("M") and words[2][:-1].isdigit()):
            return "Invalid memory limit"
        state["pinnedMemLimits"][words[1]] = words[2]
        return ""
    if words[0] == "get_default_device_pinned_mem_limit" and len(words) == 2:
        return state["pinnedMemLimits"].get(words[1], "0M")
    if words[0] == "get_server_list":
        return ""
    return "Unrecognized command " + words[0]


def serve(multi_user):
    os.makedirs(pipe_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    if os.path.exists(control):
        os.unlink(control)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.chdir(pipe_dir)
    server.bind("control")
    server.listen(8)
    state = {"pid": os.getpid(), "multiUser": multi_user, "activeThreadPercentage": 100,
             "visibleDevices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
             "pinnedMemLimits": {}}
    save(state)
    log("Startup")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdout.close()
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rw") as stream:
            for line in stream:
                line = line.strip()
                if line == "quit":
                    log("Shutting down")
                    stream.write("\n")
                    stream.flush()
                    os.unlink(control)
                    os.unlink(state_path)
                    return
                reply = answer(state, line)
                log("Command " + line + " -> " + reply)
                save(state)
                stream.write(reply + "\n")
                stream.flush()


args = sys.argv[1:]
if "--serve" in args:
    serve("-M" in args)
    sys.exit(0)
if "-d" in args:
    probe = connect()
    if probe is not None:
        probe.close()
        print("An instance of this daemon is already running")
        sys.exit(1)
    os.makedirs(log_dir, exist_ok=True)
    # NB: the daemon keeps none of the caller's pipes open (callers wait for their EOF).
    errors = open(os.path.join(log_dir, "stand-in.err"), "ab")
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve", *(["-M"] if "-M" in args else [])],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=errors, start_new_session=True)
    ready = child.stdout.readline().strip() == b"ready"
    sys.exit(0 if ready else 1)
client = connect()
if client is None:
    print("Cannot find MPS control daemon process")
    sys.exit(1)
with client, client.makefile("rw") as stream:
    for line in sys.stdin:
        if not line.strip():
            continue
        stream.write(line.strip() + "\n")
        stream.flush()
        reply = stream.readline().rstrip("\n")
        if reply:
            print(reply)
        if line.strip() == "quit":
            break
'''


def install(directory: str) -> str:
    """Write the stand-in into `directory` (run by this Python); returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, NAME)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"#!{sys.executable}\n{SCRIPT}")
    os.chmod(path, 0o755)
    return path


def state(log_dir: str) -> dict[str, object] | None:
    """The running stand-in daemon's settings (None when none runs with this log dir)."""
    try:
        with open(os.path.join(log_dir, STATE_FILE), encoding="utf-8") as handle:
            loaded = json.load(handle)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return loaded if isinstance(loaded, dict) else None
