"""vfio-pci loaded as upstream loads it: `chroot <host root> modprobe vfio-pci`, before a bind,
unless the host's /sys/module shows it (gate PassthroughSupport).

The stand-ins implement the programs' contracts: `chroot ROOT CMD ARGS...` runs CMD found in
ROOT's /sbin or /usr/sbin with ARGS (ROOT as its root, here its working directory); the host
root's `modprobe` records its arguments and, as the kernel does on a load, makes
/sys/module/vfio_pci and the driver's directory under /sys/bus/pci/drivers appear. The sysfs
the binder sees is the host root's /sys, as in the chart's container.

Covers: a bind with vfio-pci not loaded runs modprobe once with `vfio-pci` and binds; a GPU
whose modalias the host's modules.alias maps to a variant (Grace: `nvgrace_gpu_vfio_pci`) gets
that module loaded and is bound to its driver, and without a readable modules.alias vfio-pci
serves; a loaded
module runs nothing; a failing modprobe is a PermanentError naming the command, its exit
status and last line of output, and what to do; a missing chroot program says so; the
plugin's start-up checks of --host-root (missing; no IOMMU group).
"""

from __future__ import annotations

import os
import pathlib
import stat
import sys

import pytest

from adapters.fs import kernel_modules, vfio
from apps.gpuplugin import __main__ as gpu_main
from core import errors

_UNIT = pathlib.Path(__file__).resolve().parents[2] / "unit" / "gpu"
if str(_UNIT) not in sys.path:
    sys.path.insert(0, str(_UNIT))

import test_gpu_vfio_sysfs as sysfs_fixtures  # noqa: E402

ADDRESS = "0000:1b:00.0"

FAKE_CHROOT = """#!/bin/sh
# chroot ROOT CMD ARGS...: run CMD from ROOT's sbin with ROOT as its root (stand-in).
root="$1"; shift; cmd="$1"; shift
for dir in sbin usr/sbin; do
  if [ -x "$root/$dir/$cmd" ]; then cd "$root" && exec "$root/$dir/$cmd" "$@"; fi
done
echo "chroot: failed to run command '$cmd': No such file or directory" >&2
exit 127
"""

FAKE_MODPROBE = """#!/bin/sh
# modprobe MODULE (stand-in): records its arguments; loading makes the module visible.
echo "$@" >> modprobe.calls
if [ -e modprobe.fails ]; then
  echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/6.8.0" >&2; exit 1
fi
name=$(echo "$1" | tr - _)
mkdir -p "sys/module/$name" "sys/bus/pci/drivers/$1"
: > "sys/bus/pci/drivers/$1/bind"; : > "sys/bus/pci/drivers/$1/unbind"
"""


def _executable(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def host_root(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A host root whose /sys has one GPU on nvidia and no vfio-pci; `chroot` on PATH."""
    root = tmp_path / "host"
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "chroot", FAKE_CHROOT)
    _executable(root / "sbin" / "modprobe", FAKE_MODPROBE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    sysfs = sysfs_fixtures.FakeSysfs(root / "sys")
    (sysfs.drivers / "vfio-pci" / "bind").unlink()
    (sysfs.drivers / "vfio-pci" / "unbind").unlink()
    (sysfs.drivers / "vfio-pci").rmdir()
    sysfs.add_function(ADDRESS)
    return root


RELEASE = "6.8.0-test"


def _binder(root: pathlib.Path) -> vfio.SysfsVfio:
    return vfio.SysfsVfio(
        str(root / "sys"), str(root),
        modules=kernel_modules.ChrootModprobe(str(root), kernel_release=RELEASE),
    )


def _calls(root: pathlib.Path) -> list[str]:
    path = root / "modprobe.calls"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_a_bind_loads_vfio_pci_with_the_hosts_modprobe_first(host_root: pathlib.Path) -> None:
    _binder(host_root).bind_vfio(ADDRESS)
    assert _calls(host_root) == ["vfio-pci"]
    bound = host_root / "sys/bus/pci/drivers/vfio-pci/bind"
    assert bound.read_text(encoding="utf-8") == ADDRESS
    # Loaded now: the next bind runs nothing.
    _binder(host_root).bind_vfio(ADDRESS)
    assert _calls(host_root) == ["vfio-pci"]


def test_a_loaded_module_runs_no_modprobe(host_root: pathlib.Path) -> None:
    (host_root / "sys/module/vfio_pci").mkdir(parents=True)
    modules = kernel_modules.ChrootModprobe(str(host_root))
    assert modules.is_loaded("vfio-pci")
    modules.ensure_loaded("vfio-pci")
    assert _calls(host_root) == []


def test_a_failing_modprobe_says_what_ran_and_what_to_do(host_root: pathlib.Path) -> None:
    (host_root / "modprobe.fails").touch()
    with pytest.raises(errors.PermanentError) as caught:
        _binder(host_root).bind_vfio(ADDRESS)
    assert caught.value.message == (
        f"loading kernel module vfio-pci failed: `chroot {host_root} modprobe vfio-pci` exited "
        "1: modprobe: FATAL: Module vfio-pci not found in directory /lib/modules/6.8.0; load it "
        f"on the node (modprobe vfio-pci), and check that --host-root ({host_root}) is the "
        "host's root file system"
    )
    # Nothing was bound.
    assert (host_root / "sys/bus/pci/drivers/nvidia/bind").read_text(encoding="utf-8") == ""


def test_a_missing_chroot_program_is_named(host_root: pathlib.Path) -> None:
    modules = kernel_modules.ChrootModprobe(str(host_root), chroot="no-such-chroot")
    with pytest.raises(errors.PermanentError, match="'no-such-chroot' is not on PATH"):
        modules.ensure_loaded("vfio-pci")


def test_the_plugin_refuses_to_start_without_a_host_root(tmp_path: pathlib.Path) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        gpu_main.check_host_root(str(tmp_path / "missing"))
    assert "--host-root (env HOST_ROOT)" in caught.value.message
    assert "mount the host's / there" in caught.value.message


def test_the_plugin_refuses_to_start_without_the_iommu(host_root: pathlib.Path) -> None:
    (host_root / "sys/kernel/iommu_groups/7").rmdir()
    with pytest.raises(errors.ConfigError, match="intel_iommu=on or amd_iommu=on"):
        gpu_main.check_host_root(str(host_root))
    (host_root / "sys/kernel/iommu_groups/7").mkdir()
    gpu_main.check_host_root(str(host_root))


def test_a_grace_gpu_is_bound_to_the_variant_the_hosts_modules_alias_names(
    host_root: pathlib.Path,
) -> None:
    aliases = host_root / "lib/modules" / RELEASE / "modules.alias"
    aliases.parent.mkdir(parents=True)
    aliases.write_text(
        "alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* nvgrace_gpu_vfio_pci\n"
        "alias vfio_pci:v000010DEd00002330sv*sd*bc*sc*i* other_vfio_pci\n", encoding="utf-8")
    (host_root / "sys/bus/pci/devices" / ADDRESS / "modalias").write_text(
        "pci:v000010DEd00002342sv000010DEsd000016EBbc03sc02i00\n", encoding="utf-8")
    binder = _binder(host_root)
    assert binder.vfio_module(ADDRESS) == "nvgrace_gpu_vfio_pci"
    binder.bind_vfio(ADDRESS)
    assert _calls(host_root) == ["nvgrace_gpu_vfio_pci"]
    bound = host_root / "sys/bus/pci/drivers/nvgrace_gpu_vfio_pci/bind"
    assert bound.read_text(encoding="utf-8") == ADDRESS


def test_without_a_readable_modules_alias_vfio_pci_serves(host_root: pathlib.Path) -> None:
    (host_root / "sys/bus/pci/devices" / ADDRESS / "modalias").write_text(
        "pci:v000010DEd00002342sv000010DEsd000016EBbc03sc02i00\n", encoding="utf-8")
    assert _binder(host_root).vfio_module(ADDRESS) == "vfio-pci"
