"""The shared half of every driver-library child (`adapters.driverlib.child`), on real files
and processes.

Covers: a driver root's library directories, in upstream's order, none for "/"; a library is
found by name order first, then directory order, symlinks resolved, directories skipped; the
child's environment puts this package on PYTHONPATH and the root's libraries first on
LD_LIBRARY_PATH; a run reports output, exit status and the crashing signal's name, and one
that cannot start or outlives its timeout is an error of its own; the last JSON line is read.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys

import pytest

from adapters.driverlib import child


def test_library_dirs_are_those_of_the_root_in_search_order(tmp_path: pathlib.Path) -> None:
    for directory in ("lib", "usr/lib/x86_64-linux-gnu", "usr/lib64"):
        (tmp_path / directory).mkdir(parents=True)
    assert child.library_dirs(str(tmp_path)) == (
        str(tmp_path / "usr/lib64"), str(tmp_path / "usr/lib/x86_64-linux-gnu"),
        str(tmp_path / "usr/lib"), str(tmp_path / "lib"),
    )
    assert child.library_dirs("/") == ()


def test_a_library_is_found_by_name_first_then_directory(tmp_path: pathlib.Path) -> None:
    lib64, gnu = tmp_path / "usr/lib64", tmp_path / "usr/lib/x86_64-linux-gnu"
    lib64.mkdir(parents=True)
    gnu.mkdir(parents=True)
    (gnu / "libnvfm.so.580.65.06").write_bytes(b"elf")
    (gnu / "libnvfm.so.1").symlink_to("libnvfm.so.580.65.06")
    (lib64 / "libnvfm.so").write_bytes(b"elf")
    (lib64 / "libnvfm.so.1").mkdir()  # NB: not a library, must not shadow the real one
    names = ("libnvfm.so.1", "libnvfm.so")
    assert child.find_library(str(tmp_path), names) == str(gnu / "libnvfm.so.580.65.06")
    assert child.find_library(str(tmp_path), ("libnvfm.so",)) == str(lib64 / "libnvfm.so")
    assert child.find_library(str(tmp_path), ("libnvidia-ml.so.1",)) is None
    assert child.find_library("/", names) is None


def test_the_child_env_makes_this_package_importable_and_the_root_libraries_first(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "usr/lib64").mkdir(parents=True)
    env = child.child_env(
        driver_root=str(tmp_path),
        env=child.importable({"PYTHONPATH": "/x", "LD_LIBRARY_PATH": "/y", "KEEP": "1"}),
    )
    assert env == {
        "PYTHONPATH": f"{child.IMPORT_ROOT}:/x",
        "LD_LIBRARY_PATH": f"{tmp_path / 'usr/lib64'}:/y",
        "KEEP": "1",
    }
    assert child.child_env(driver_root="/", env={"A": "b"}) == {"A": "b"}
    assert child.child_env(driver_root="/")["PYTHONPATH"].startswith(child.IMPORT_ROOT)


def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_a_run_reports_its_output_status_and_crash() -> None:
    env = dict(os.environ)
    done = child.run(
        _python("import sys; print('x'); print('{\"a\": 1}'); sys.stderr.write('e'); exit(3)"),
        timeout_s=30, env=env,
    )
    assert (done.returncode, done.crash_signal, done.stderr_tail) == (3, None, "e")
    assert child.last_json_object(done.stdout) == {"a": 1}
    aborted = child.run(
        _python(f"import os; os.kill(os.getpid(), {int(signal.SIGABRT)})"), timeout_s=30, env=env
    )
    assert (aborted.crash_signal, aborted.stderr_tail) == ("SIGABRT", "(empty)")
    assert child.signal_name(99) == "signal 99"


@pytest.mark.parametrize("stdout", ["", "not json\n", "[1]\n", '{"a": 1}\nlast\n'])
def test_no_json_object_on_the_last_line_is_no_answer(stdout: str) -> None:
    assert child.last_json_object(stdout) is None


def test_a_child_that_cannot_start_or_hangs_is_an_error_of_its_own(tmp_path: pathlib.Path) -> None:
    with pytest.raises(child.ChildNotStarted, match="could not be started"):
        child.run((str(tmp_path / "missing"),), timeout_s=30, env={})
    with pytest.raises(child.ChildTimedOut, match=r"did not finish within 0\.5s and was killed"):
        child.run(_python("import time; time.sleep(60)"), timeout_s=0.5, env=dict(os.environ))
