"""The hooks our GPU CDI specs name, run by NVIDIA's real `nvidia-cdi-hook` as a runtime runs them.

`hack/nvidia-cdi-hook.sh` builds the hook (nvidia-container-toolkit v1.19.1) from the Go module
proxy into ~/.cache/cd-dra-driver once; these tests skip only where Go is not installed. The
spec comes from our own builder over a simulated host driver root (real ELF libraries with
their SONAMEs, an ld cache from the real ldconfig). A scratch container root filesystem stands
in for an image of another distribution (no /etc/debian_version: system library dirs /lib64,
/usr/lib64) or of the host's. The spec's mounts are applied by copying each host file to its
container path; then every hook of the spec runs in the spec's order, with the OCI state JSON
on stdin naming the bundle whose config.json names the root, and only the hook's own env.

update-ldcache re-executes itself in a new mount namespace, mounts /proc in the root and
pivots into it (so the root must be a mount point), and disable-device-node-modification
bind-mounts a tmpfs file over the root's /proc/driver/nvidia/params: both need mount
privileges, which the test takes in a private mount namespace (`unshare`; as root, or through
a user namespace otherwise). The host's /proc/driver/nvidia/params (absent without a driver)
is faked there by a tmpfs over /proc/driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import subprocess
from typing import Any

import pytest

from adapters.fs import driverroot, simulated_driverroot
from core.gpu import cdi as gpu_cdi

REPO = pathlib.Path(__file__).parents[3]
LIB = simulated_driverroot.LIBRARY_DIR
VERSION = simulated_driverroot.DRIVER_VERSION
# An image's CUDA forward-compatibility driver, newer than the host's (580).
COMPAT_DIR = "/usr/local/cuda/compat"
COMPAT_VERSION = "999.10.01"


@pytest.fixture(scope="module")
def hook_binary() -> str:
    if shutil.which("go") is None:
        pytest.skip("Go is not installed: nvidia-cdi-hook is built from the Go module proxy "
                    "by hack/nvidia-cdi-hook.sh")
    done = subprocess.run([str(REPO / "hack" / "nvidia-cdi-hook.sh")], capture_output=True,
                          text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _spec_edits(tmp_path: pathlib.Path, hook: str) -> dict[str, Any]:
    """Our spec-wide edits for a simulated host driver, naming `hook`."""
    host = tmp_path / "host"
    simulated_driverroot.install(str(host))
    (host / LIB.lstrip("/") / "libcuda.so").symlink_to("libcuda.so.1")
    # The locator wants a character device at /dev/nvidiactl; /dev/null is one (no mknod).
    dev = tmp_path / "devroot" / "dev"
    dev.mkdir(parents=True)
    (dev / "nvidiactl").symlink_to("/dev/null")
    found = driverroot.DriverRoot(str(host), dev_root=str(dev.parent)).driver_files()
    files = dataclasses.replace(found, cdi_hook_path=hook)
    return json.loads(json.dumps(gpu_cdi.common_edits(files)))


def _bundle(tmp_path: pathlib.Path, edits: dict[str, Any], *, debian: bool) -> pathlib.Path:
    """A bundle whose rootfs holds an image's files plus the spec's mounts (copied)."""
    bundle = tmp_path / "bundle"
    root = bundle / "rootfs"
    for directory in ("etc", "usr/lib64", "proc/driver/nvidia", "tmp", COMPAT_DIR.lstrip("/")):
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / "proc/driver/nvidia/params").write_text("")
    if debian:
        (root / "etc/debian_version").write_text("12.0\n")
    compat = root / COMPAT_DIR.lstrip("/") / f"libcuda.so.{COMPAT_VERSION}"
    compat.write_bytes(simulated_driverroot.elf_shared_object("libcuda.so.1"))
    for mount in edits["mounts"]:
        target = root / mount["containerPath"].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(mount["hostPath"], target)
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2",
                                                    "root": {"path": "rootfs"}}))
    (bundle / "state.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "id": "hooked", "status": "creating", "pid": os.getpid(),
        "bundle": str(bundle),
    }))
    return bundle


def _hook_command(hook: dict[str, Any], state: pathlib.Path) -> str:
    # As a runtime: exec `path` with `args` (args[0] is argv[0]) and only the hook's env.
    assert hook["args"][0] == pathlib.Path(hook["path"]).name
    argv = ["env", "-i", *hook["env"], hook["path"], *hook["args"][1:]]
    return f"{shlex.join(argv)} < {shlex.quote(str(state))}"


def _unshare() -> list[str]:
    argv = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


def _names(edits: dict[str, Any]) -> list[str]:
    return [hook["args"][1] for hook in edits["hooks"]]


def _ld_conf(root: pathlib.Path, pattern: str) -> list[str]:
    return [line for conf in sorted((root / "etc/ld.so.conf.d").glob(pattern))
            for line in conf.read_text().split()]


def _ld_cache(root: pathlib.Path) -> set[tuple[str, str]]:
    """(SONAME, path) of every entry of the root's ld cache, read by the real ldconfig."""
    done = subprocess.run(["ldconfig", "-p", "-C", str(root / "etc/ld.so.cache")],
                          capture_output=True, text=True, check=True, timeout=60)
    return {(e.soname, e.path) for e in driverroot.parse_ldconfig_output(done.stdout)}


def test_spec_names_the_four_hooks_in_the_toolkits_order(
    tmp_path: pathlib.Path, hook_binary: str
) -> None:
    edits = _spec_edits(tmp_path, hook_binary)
    assert _names(edits) == ["create-symlinks", "enable-cuda-compat", "update-ldcache",
                             "disable-device-node-modification"]
    assert {hook["path"] for hook in edits["hooks"]} == {hook_binary}


@pytest.mark.parametrize("debian", [False, True], ids=["other-distribution", "debian-like"])
def test_every_hook_of_the_spec_runs_and_completes_the_containers_view(
    tmp_path: pathlib.Path, hook_binary: str, debian: bool
) -> None:
    edits = _spec_edits(tmp_path, hook_binary)
    bundle = _bundle(tmp_path, edits, debian=debian)
    root = bundle / "rootfs"
    state = bundle / "state.json"
    script = "\n".join([
        "set -e",
        # A runtime's rootfs is a mount point; pivot_root (update-ldcache) needs one.
        f"mount --bind {shlex.quote(str(root))} {shlex.quote(str(root))}",
        # The host driver's params file, which disable-device-node-modification reads.
        "mount -t tmpfs hostdriver /proc/driver",
        "mkdir -p /proc/driver/nvidia",
        "printf 'EnableMSI: 1\\nModifyDeviceFiles: 1\\n' > /proc/driver/nvidia/params",
        *(_hook_command(hook, state) for hook in edits["hooks"]),
        # The params mount lives in this namespace: read the container's view here.
        f"cat {shlex.quote(str(root / 'proc/driver/nvidia/params'))}",
    ])
    probe = subprocess.run([*_unshare(), "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here ({shlex.join(_unshare())}: "
                    f"{probe.stderr.strip()}); update-ldcache and "
                    "disable-device-node-modification need one")
    done = subprocess.run([*_unshare(), "sh", "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    lib = root / LIB.lstrip("/")
    # create-symlinks: the SONAME and .so links the host has, relative as on the host.
    assert os.readlink(lib / "libcuda.so.1") == f"libcuda.so.{VERSION}"
    assert os.readlink(lib / "libcuda.so") == "libcuda.so.1"
    assert os.readlink(lib / "libnvidia-ml.so.1") == f"libnvidia-ml.so.{VERSION}"
    assert (lib / "libcuda.so").resolve() == (lib / f"libcuda.so.{VERSION}").resolve()
    # enable-cuda-compat: the image's compat driver (999 > 580) goes first in the search.
    assert _ld_conf(root, "00-compat-*.conf") == [COMPAT_DIR]
    # update-ldcache: the driver's folder is added where the image's ldconfig would not look
    # (only on a non-Debian image; a Debian-like one searches it already), and the cache
    # knows the driver's libraries either way.
    added = _ld_conf(root, "00-nvcr-*.conf")
    if debian:
        assert LIB not in added
    else:
        assert added == [LIB]
        assert "/usr/lib64" in _ld_conf(root, "zz-nvcr-*.conf")
    assert (root / "etc/ld.so.conf").read_text() == "include /etc/ld.so.conf.d/*.conf\n"
    cache = _ld_cache(root)
    assert ("libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.1") in cache
    assert ("libcuda.so.1", f"{COMPAT_DIR}/libcuda.so.1") in cache
    assert ("libcuda.so.1", f"{LIB}/libcuda.so.1") in cache
    # disable-device-node-modification: the container sees ModifyDeviceFiles: 0.
    assert done.stdout.splitlines()[-2:] == ["EnableMSI: 1", "ModifyDeviceFiles: 0"]


def test_symlink_and_compat_hooks_need_no_privileges(
    tmp_path: pathlib.Path, hook_binary: str
) -> None:
    edits = _spec_edits(tmp_path, hook_binary)
    bundle = _bundle(tmp_path, edits, debian=False)
    root = bundle / "rootfs"
    for hook in edits["hooks"][:2]:
        done = subprocess.run(
            [hook["path"], *hook["args"][1:]], input=(bundle / "state.json").read_text(),
            env=dict(item.split("=", 1) for item in hook["env"]),
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 0, done.stderr
    assert os.readlink(root / LIB.lstrip("/") / "libcuda.so") == "libcuda.so.1"
    assert _ld_conf(root, "00-compat-*.conf") == [COMPAT_DIR]
